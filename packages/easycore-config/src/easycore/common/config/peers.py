"""yacs's and fvcore's spellings on `CfgNode`, where they mean what easycore already does.

Code written for yacs or fvcore (detectron2 and most FAIR research code) calls
`clone`, `defrost`, `merge_from_file`, `merge_from_other_cfg`, `load_cfg`, the
deprecated- and renamed-key registry and `new_allowed`. They are methods of
`CfgNode` through `PeerSpellings`, with yacs's meaning:

- `merge_from_other_cfg` and `merge_from_file` take only keys the config has (a
  node made with `new_allowed=True` takes new ones), coerce a value to the type
  it replaces (a list for a tuple and back, an int for a float), and refuse other
  changes of type; keys registered as deprecated are skipped with a warning,
  renamed ones refused naming the new key. Unlike yacs, a merge is all or nothing.
- `merge_from_file` reads fvcore's `_BASE_` (a path or a list of them) as well as
  `__BASE__`, through `HierarchicalCfgNode`; it never runs code
  (`allow_unsafe=True` is accepted and changes nothing: a tag that would construct
  a Python object is refused all the same).

The state behind them (which keys are deprecated or renamed, whether new keys are
allowed) lives in one slot of each node as an immutable `PeerState`, so copies,
pickles and lazy copies carry it without sharing anything that can change.
"""

from __future__ import annotations

from collections.abc import Mapping

from .errors import ConfigError, ConfigKeyError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, NoReturn

    from typing_extensions import Self

    from .node import CfgNode

__all__ = ["BASE_KEYS", "PeerSpellings", "PeerState"]

#: The keys that name a file's base config: easycore's and fvcore's spelling.
BASE_KEYS = ("__BASE__", "_BASE_")


class PeerState:
    """What yacs keeps beside a node's keys: new keys allowed, deprecated and renamed keys.

    Immutable: a change makes a new state, so that copies may share one.
    """

    __slots__ = ("deprecated", "new_allowed", "renamed")

    def __init__(
        self,
        new_allowed: bool = False,
        deprecated: frozenset[str] = frozenset(),
        renamed: tuple[tuple[str, str, str | None], ...] = (),
    ) -> None:
        self.new_allowed = new_allowed
        self.deprecated = deprecated
        self.renamed = renamed  # (old key, new key, message)

    def replace(self, **changes: Any) -> PeerState:
        fields = {name: getattr(self, name) for name in self.__slots__}
        fields.update(changes)
        return PeerState(**fields)

    def __reduce__(self) -> tuple[Any, ...]:
        return (PeerState, (self.new_allowed, self.deprecated, self.renamed))


_NO_STATE = PeerState()


def state_of(node: Any) -> PeerState:
    """The peer state of `node` (the default one if it has none)."""
    try:
        # Not getattr(): a missing attribute would go to CfgNode.__getattr__ and its
        # "did you mean" search.
        state = object.__getattribute__(node, "_peer")
    except AttributeError:  # a node made by __new__ alone
        return _NO_STATE
    return _NO_STATE if state is None else state


def set_state(node: Any, state: PeerState) -> None:
    object.__setattr__(node, "_peer", None if state is _NO_STATE else state)


class PeerSpellings:
    """yacs's and fvcore's methods; mixed into `CfgNode` (see the module's doc)."""

    __slots__ = ()

    def clone(self: Self) -> Self:
        """Recursively copy this CfgNode (yacs's name for `copy()`).

        Returns:
            CfgNode: a deep copy, of the same class, with the same frozen state.
        """
        return self.copy()  # type: ignore[attr-defined]

    def defrost(self) -> None:
        """Make this CfgNode and all of its children mutable (yacs's `freeze(False)`)."""
        self.freeze(False)  # type: ignore[attr-defined]

    def merge_from_file(
        self, cfg_filename: Any, allow_unsafe: bool = False, encoding: str = "utf-8"
    ) -> None:
        """Merge a YAML file (and its `__BASE__` / `_BASE_` chain) into this config.

        yacs's and fvcore's method: only keys this config has are taken (see
        `merge_from_other_cfg`).

        Args:
            cfg_filename (str or os.PathLike): the YAML file.
            allow_unsafe (bool): fvcore's switch to run Python tags; accepted, and
                changes nothing: easycore never constructs objects from a config.
            encoding (str): encoding of the files.

        Raises:
            ConfigKeyError: a key this config does not have (or a renamed one).
            ConfigError: a value of another type, or any error of reading the files.
            FrozenError: the config is frozen.
        """
        from .hierarchical import HierarchicalCfgNode

        del allow_unsafe  # never honoured: configs never run code
        self.merge_from_other_cfg(HierarchicalCfgNode.open(cfg_filename, encoding))

    def merge_from_other_cfg(self, cfg_other: Mapping[str, Any]) -> None:
        """Merge another config into this one, as yacs does: its keys must exist here.

        A key this config lacks is refused (`ConfigKeyError`, a `KeyError`), unless
        its node allows new keys (`new_allowed=True`, `set_new_allowed`), or the key
        is registered as deprecated (skipped, with a warning on the
        `easycore.common.config` logger). A value replaces one of the same type; a
        list may replace a tuple and vice versa, an int a float, None anything and
        anything None. Nothing changes unless everything can.

        Args:
            cfg_other (Mapping): the config whose values win.

        Raises:
            ConfigKeyError: a key this config does not have, or one registered as
                renamed (the message names the new key).
            ConfigError: a value of another type (a `ValueError`, as yacs raised), or a
                base key (`__BASE__`, `_BASE_`), which only files may hold.
            FrozenError: this config, or a sub-config the merge would change, is frozen.
        """
        from .node import CfgNode, _deepcopy
        from .overrides import coerce

        if not isinstance(cfg_other, Mapping):
            raise TypeError(f"merge_from_other_cfg expects a mapping, got {type(cfg_other)}")
        for key in BASE_KEYS:
            if key in cfg_other:
                raise ConfigError(f"the key {key!r} names a base config; only files hold it")
        root: Any = self
        plan: list[tuple[CfgNode, str, Any]] = []
        todo: list[tuple[CfgNode, Mapping[str, Any], str]] = [(root, cfg_other, "")]
        while todo:
            node, other, prefix = todo.pop()
            node._check_mutable()
            for key, value in other.items():
                full = f"{prefix}{key}"
                if not dict.__contains__(node, key):
                    if state_of(node).new_allowed:
                        plan.append((node, key, node._prepare(key, _deepcopy(value))))
                    elif root.key_is_renamed(full):
                        root.raise_key_rename_error(full)
                    elif not root.key_is_deprecated(full):
                        raise ConfigKeyError(f"config has no key {node._path_of(key)!r}")
                    continue
                mine = dict.__getitem__(node, key)
                if isinstance(mine, CfgNode) and isinstance(value, Mapping):
                    todo.append((mine, value, f"{full}."))
                    continue
                if isinstance(mine, CfgNode) or (isinstance(value, Mapping) and mine is not None):
                    raise ConfigError(
                        f"cannot merge {node._path_of(key)!r}: a config node and a value "
                        f"({type(mine).__name__} here, {type(value).__name__} in the other)"
                    )
                new = coerce(mine, _deepcopy(value), value, node._path_of(key))
                plan.append((node, key, node._prepare(key, new)))
        for node, key, value in plan:
            node._store(key, value)

    def register_deprecated_key(self, key: str) -> None:
        """Register a dotted key (`"MODEL.DILATION"`) as deprecated: merges skip it.

        Args:
            key (str): the full dotted key, from this config.

        Raises:
            ConfigError: the key is registered already.
        """
        state = state_of(self)
        if key in state.deprecated:
            raise ConfigError(f"key {key!r} is already registered as a deprecated key")
        set_state(self, state.replace(deprecated=state.deprecated | {key}))

    def register_renamed_key(
        self, old_name: str, new_name: str, message: str | None = None
    ) -> None:
        """Register a dotted key as renamed: merging it fails, naming the new key.

        Args:
            old_name (str): the key's old full dotted name.
            new_name (str): its new name.
            message (str or None): more to say (how to convert the value, say).

        Raises:
            ConfigError: the old name is registered already.
        """
        state = state_of(self)
        if any(old == old_name for old, _, _ in state.renamed):
            raise ConfigError(f"key {old_name!r} is already registered as a renamed key")
        set_state(self, state.replace(renamed=(*state.renamed, (old_name, new_name, message))))

    def key_is_deprecated(self, full_key: str) -> bool:
        """Whether `full_key` is registered as deprecated (a warning says it is skipped).

        Args:
            full_key (str): a dotted key.

        Returns:
            bool:
        """
        if full_key not in state_of(self).deprecated:
            return False
        import logging  # only a deprecated key pays for logging

        logging.getLogger("easycore.common.config").warning(
            "Deprecated config key (ignoring): %s", full_key
        )
        return True

    def key_is_renamed(self, full_key: str) -> bool:
        """Whether `full_key` is registered as renamed.

        Args:
            full_key (str): a dotted key.

        Returns:
            bool:
        """
        return any(old == full_key for old, _, _ in state_of(self).renamed)

    def raise_key_rename_error(self, full_key: str) -> NoReturn:
        """Raise the error for a renamed key.

        Args:
            full_key (str): a key registered with `register_renamed_key`.

        Raises:
            ConfigKeyError: always, naming the new key.
        """
        for old, new, message in state_of(self).renamed:
            if old == full_key:
                note = f" Note: {message}" if message else ""
                raise ConfigKeyError(
                    f"Key {full_key} was renamed to {new}; please update your config.{note}"
                )
        raise ConfigKeyError(f"key {full_key!r} is not registered as renamed")

    def is_new_allowed(self) -> bool:
        """Whether merges may add keys to this node (yacs's `new_allowed`).

        Returns:
            bool:
        """
        return state_of(self).new_allowed

    def set_new_allowed(self, is_new_allowed: bool) -> None:
        """Let merges add keys to this node and every node below it, or stop them.

        Args:
            is_new_allowed (bool): allow new keys.
        """
        from .node import CfgNode

        todo: list[Any] = [self]
        while todo:
            node = todo.pop()
            set_state(node, state_of(node).replace(new_allowed=bool(is_new_allowed)))
            todo.extend(v for v in dict.values(node) if isinstance(v, CfgNode))

    @classmethod
    def load_cfg(cls, cfg_file_obj_or_str: Any) -> Any:
        """A config from YAML text or a YAML file object (yacs's `load_cfg`).

        Args:
            cfg_file_obj_or_str (str or file object): YAML text, or an open file.

        Returns:
            CfgNode: of the class this is called on.

        Raises:
            ConfigError: invalid YAML, an unsafe tag, or a Python source file (which
                yacs ran: configs never run code).
        """
        if isinstance(cfg_file_obj_or_str, str):
            return cls.load(cfg_file_obj_or_str)  # type: ignore[attr-defined]
        name = str(getattr(cfg_file_obj_or_str, "name", ""))
        if name.endswith(".py"):
            raise ConfigError(
                f"{name}: a Python source file; configs are YAML and never run code"
            )
        return cls.open(cfg_file_obj_or_str)  # type: ignore[attr-defined]


def honour_registered_keys(root: Any, pairs: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """`merge_from_list`'s overrides without the deprecated keys; a renamed one is refused."""
    state = state_of(root)
    if not state.deprecated and not state.renamed:
        return pairs
    kept = []
    for key, value in pairs:
        if root.key_is_renamed(key):
            root.raise_key_rename_error(key)
        if not root.key_is_deprecated(key):
            kept.append((key, value))
    return kept
