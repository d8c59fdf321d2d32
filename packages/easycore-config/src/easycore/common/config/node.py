"""CfgNode: a dict with attribute access, safe YAML I/O and a real freeze.

Why keys are mirrored into the instance `__dict__`: `cfg.A.B` is then
resolved by CPython's own attribute lookup, in C, instead of a Python-level
`__getattr__` on every access (the original spent ~23x a plain dict lookup
there). Every mutation goes through `CfgNode._prepare` and `CfgNode._store`
or a method that checks the freeze first, so the mirror never drifts from the
dict.

Two kinds of keys are items only, never attributes:

* keys that collide with a method or attribute of CfgNode (`copy`, `items`,
  `freeze` ...): `cfg["copy"]` works, `cfg.copy` stays the method;
* dunder keys (`__BASE__`, `__array_interface__` ...): Python and libraries
  such as NumPy look such names up as protocol hooks, so a config file must
  never be able to define one (`__array_interface__` would let it read and
  write process memory through `numpy.asarray`).

Imports are kept to the standard library's lightest modules: PyYAML, `ast`,
`difflib` and `copy` are imported on first use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .errors import ConfigError, ConfigKeyError, FrozenError, UnknownOverrideKeyError
from .freezing import set_frozen, thawed
from .peers import PeerSpellings, PeerState, honour_registered_keys, set_state, state_of

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from collections.abc import Iterable
    from typing import Any

    from typing_extensions import Self

__all__ = ["CfgNode"]


#: `dump`'s "no config given": dump the node it is called on.
_THIS: Any = object()


def _deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
    from copy import deepcopy  # on first use: the import costs more than the call

    return deepcopy(value, memo)


def _is_dunder(key: str) -> bool:
    return key[:2] == "__" and key[-2:] == "__"


class CfgNode(PeerSpellings, dict):
    """Config Node: a `dict` whose keys are also attributes.

    Nested dictionaries become CfgNodes, so `cfg.MODEL.NUM_CLASSES` and
    `cfg["MODEL"]["NUM_CLASSES"]` are the same value. Keys must be valid
    Python identifiers; errors name the full dotted key (`MODEL.BACKBONE.DEPTH`).

    Keys named like a method (`copy`, `items`...) and dunder keys (`__BASE__`)
    are items only: read and write them with `cfg["copy"]`.

    Examples:
        ```python
        from easycore.common.config import CfgNode

        cfg = CfgNode({"MODEL": {"NUM_CLASSES": 100}})
        cfg.SOLVER = CfgNode()
        cfg.SOLVER.LEARNING_RATE = 0.001
        cfg.freeze()
        ```
    """

    __slots__ = ("__dict__", "_frozen", "_key_path", "_peer")

    #: Names a key must not shadow as an attribute (methods, slots, dunders),
    #: per class, so a subclass's own methods are protected too.
    _reserved: frozenset[str] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._reserved = frozenset(dir(cls))

    def __init__(
        self,
        init_dict: Mapping[str, Any] | None = None,
        copy: bool = True,
        *,
        new_allowed: bool = False,
    ) -> None:
        """
        Args:
            init_dict (dict): a possibly-nested dictionary to initialize the CfgNode.
                Its values are kept as they are: a string stays a string.
            copy (bool): if False, the CfgNode shares the leaf values with
                `init_dict`; otherwise the contents of `init_dict` are deep-copied.
            new_allowed (bool): let `merge_from_other_cfg` and `merge_from_file` add
                keys to this node (yacs's `new_allowed`; `merge` always may).
        """
        try:
            frozen = _FROZEN_SLOT.__get__(self, CfgNode)
        except AttributeError:  # a new node: its slots are not set yet
            frozen = False
        if frozen:
            # Calling __init__ again would clear the freeze and change the node.
            self._check_mutable()
        object.__setattr__(self, "_frozen", False)
        object.__setattr__(self, "_key_path", "")
        object.__setattr__(self, "_peer", PeerState(True) if new_allowed else None)
        dict.__init__(self)
        if init_dict is None:
            return
        if not isinstance(init_dict, Mapping):
            raise TypeError(f"CfgNode expects a mapping, got {type(init_dict).__name__}")
        if copy:
            init_dict = _deepcopy(init_dict)
        for key, value in init_dict.items():
            self._set(key, value)
        if copy:
            # A copy is a new tree: deep-copied, and unfrozen all the way down
            # even when built from a frozen CfgNode.
            self.freeze(False)

    # ------------------------------------------------------------------ access
    def __getattr__(self, name: str) -> Any:
        # Reached only for names that are neither attributes nor mirrored keys.
        if _is_dunder(name):
            if dict.__contains__(self, name):
                raise AttributeError(
                    f"{self._path_of(name)!r} is a key with a dunder name: such keys are items "
                    f"only, never attributes; use cfg[{name!r}]"
                )
            raise AttributeError(name)  # protocol probes (__deepcopy__, ...) stay quiet
        raise AttributeError(self._missing_message(name))

    def __missing__(self, key: Any) -> Any:
        raise ConfigKeyError(self._missing_message(key))

    def _path_of(self, key: Any) -> str:
        return f"{self._key_path}.{key}" if self._key_path else str(key)

    def _missing_message(self, key: Any) -> str:
        message = f"config has no key {self._path_of(key)!r}"
        if isinstance(key, str):
            from difflib import get_close_matches  # only errors pay for difflib

            close = get_close_matches(key, [k for k in self if isinstance(k, str)], n=1)
            if close:
                message += f"; did you mean {self._path_of(close[0])!r}?"
        return message

    # --------------------------------------------------------------- mutation
    def _prepare(self, key: Any, value: Any) -> Any:
        """Validate a key and convert its value, changing nothing yet."""
        if not isinstance(key, str) or not key.isidentifier():
            raise ConfigKeyError(
                f"invalid config key {self._path_of(key)!r}: keys must be valid Python identifiers"
            )
        if type(value) in _SCALARS or isinstance(value, CfgNode):
            return value  # nothing to convert (and no slow ABC isinstance check)
        if isinstance(value, Mapping):
            # Give the new node its path before its children are set, so that
            # their paths (used in every error message) are full dotted paths.
            node = CfgNode()
            object.__setattr__(node, "_key_path", self._path_of(key))
            for child_key, child in value.items():
                node._set(child_key, child)
            return node
        return value

    def _store(self, key: str, value: Any) -> None:
        """Put a prepared value in place: the dict, the attribute mirror, the key path."""
        if isinstance(value, CfgNode):
            _set_key_path(value, self._path_of(key))
        dict.__setitem__(self, key, value)
        if key not in type(self)._reserved and (key[:2] != "__" or key[-2:] != "__"):
            self.__dict__[key] = value

    def _set(self, key: Any, value: Any) -> None:
        """The single way one key gets into the node: validate, convert, mirror."""
        self._store(key, self._prepare(key, value))

    def _check_mutable(self, key: Any = None) -> None:
        if self._frozen:
            what = f" key {self._path_of(key)!r}" if key is not None else ""
            where = f" {self._key_path!r}" if self._key_path else ""
            raise FrozenError(
                f"config{where} is frozen; cannot change{what} (call freeze(False) first)"
            )

    def __setattr__(self, name: str, value: Any) -> None:
        # Fast path for re-binding an existing key to a scalar, the hot
        # `cfg.sum += x` of a consumer loop: a key already in the mirror is
        # known valid and unreserved, and a scalar needs no conversion.
        mirror = self.__dict__
        if name in mirror and type(value) in _SCALARS and not self._frozen:
            dict.__setitem__(self, name, value)
            mirror[name] = value
            return
        if name in type(self)._reserved or _is_dunder(name):
            kind = (
                "a CfgNode method or attribute"
                if name in type(self)._reserved
                else ("a Python special name")
            )
            raise AttributeError(
                f"cannot set {self._path_of(name)!r} as an attribute: {name!r} is {kind}; "
                f"use cfg[{name!r}] = ... to store it as a key"
            )
        self._check_mutable(name)
        self._set(name, value)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._check_mutable(key)
        self._set(key, value)

    def __delattr__(self, name: str) -> None:
        # Only keys that are attributes can be deleted as attributes; a key
        # named like a method, or a dunder key, is deleted with `del cfg[name]`.
        if name not in self.__dict__:
            raise AttributeError(self._missing_message(name))
        del self[name]

    def __delitem__(self, key: Any) -> None:
        self._check_mutable(key)
        if key not in self:
            raise ConfigKeyError(self._missing_message(key))
        dict.__delitem__(self, key)
        self.__dict__.pop(key, None)

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Set several keys at once, as `dict.update` does; all or none of them.

        Raises:
            FrozenError: the config is frozen.
            ConfigKeyError: a key is invalid (nothing is changed then).
        """
        self._check_mutable()
        items = dict(*args, **kwargs).items()
        prepared = [(key, self._prepare(key, value)) for key, value in items]
        for key, value in prepared:
            self._store(key, value)

    def __ior__(self, other: Any) -> Self:
        self.update(other)
        return self

    def __or__(self, other: Any) -> CfgNode:
        if not isinstance(other, Mapping):
            return NotImplemented
        merged = CfgNode(self, copy=False)
        merged.update(other)
        return merged

    def pop(self, key: Any, *default: Any) -> Any:
        self._check_mutable(key)
        if key not in self and not default:
            raise ConfigKeyError(self._missing_message(key))
        self.__dict__.pop(key, None)
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[str, Any]:
        self._check_mutable()
        key, value = dict.popitem(self)
        self.__dict__.pop(key, None)
        return key, value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._check_mutable(key)
        if key not in self:
            self._set(key, default)
        return dict.__getitem__(self, key)

    def clear(self) -> None:
        self._check_mutable()
        dict.clear(self)
        self.__dict__.clear()

    # ------------------------------------------------------------- tree ops
    def freeze(self, frozen: bool = True) -> None:
        """freeze or unfreeze the CfgNode and all of its children

        A frozen node refuses every change: `cfg.X = ...`, `cfg["X"] = ...`,
        `del`, `update`, `pop`, `popitem`, `setdefault`, `clear`, `|=`,
        `merge`, `merge_from_list` and calling `__init__` again. Sub-configs
        are frozen with it, those inside lists and tuples too. The lists
        themselves stay lists that may change, but a sub-config put into one
        later is frozen with the config (while frozen, they are
        `FrozenTreeList`s; unfreezing gives plain lists back).

        Args:
            frozen (bool): freeze or unfreeze the config
        """
        set_frozen(self, bool(frozen))

    def is_frozen(self) -> bool:
        """get the state of the config.

        Returns:
            bool: whether the config tree is frozen.
        """
        return self._frozen

    def copy(self) -> Self:
        """deepcopy this CfgNode (the copy keeps the frozen state)

        Returns:
            CfgNode: a deep copy, of the same class as this node.
        """
        return _deepcopy(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        new = type(self)()
        memo[id(self)] = new
        object.__setattr__(new, "_key_path", self._key_path)
        set_state(new, state_of(self))
        for key, value in dict.items(self):
            new._set(key, _deepcopy(value, memo))
        object.__setattr__(new, "_frozen", self._frozen)
        return new

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuild through _set so unpickled nodes (e.g. in runner workers) get
        # their attribute mirror and key paths back.
        return (_rebuild, (type(self), dict(self), self._frozen, self._key_path, state_of(self)))

    def merge(self, cfg: Mapping[str, Any]) -> None:
        """merge another CfgNode into this CfgNode, the another CfgNode will override this CfgNode.

        Nested nodes merge recursively; other values from `cfg` are deep-copied
        in. The merge is atomic: every key is checked first (names, frozen
        sub-configs), so a failing merge changes nothing.

        Args:
            cfg (CfgNode): the config whose values win.

        Raises:
            FrozenError: this config, or a sub-config the merge would change, is frozen.
            ConfigKeyError: `cfg` holds an invalid key.
        """
        plan: list[tuple[CfgNode, str, Any]] = []
        self._plan_merge(cfg, plan)
        for node, key, value in plan:
            node._store(key, value)

    def _plan_merge(self, cfg: Mapping[str, Any], plan: list[tuple[CfgNode, str, Any]]) -> None:
        self._check_mutable()
        for key, value in cfg.items():
            mine = dict.get(self, key)
            if isinstance(value, Mapping) and isinstance(mine, CfgNode):
                mine._plan_merge(value, plan)
            else:
                plan.append((self, key, self._prepare(key, _deepcopy(value))))

    def merge_from_list(self, overrides: Iterable[Any], allow_new: bool = False) -> None:
        """merge command-line style overrides into this CfgNode.

        `overrides` is either alternating keys and values
        (`["SOLVER.LR", "0.1", "NAME", "run1"]`) or `KEY=VALUE` items
        (`["SOLVER.LR=0.1", "NAME=run1"]`). Values are parsed as Python
        literals (`"0.1"` -> 0.1, `"(1, 2)"` -> tuple); anything else stays a
        string. A value given as another object than a string
        (`["SOLVER.LR", 0.1]`, as yacs takes it) is that object. An existing
        value keeps its type: an int may become a float, a list a tuple and
        vice versa, a string stays a string (`NAME=None` sets the string
        `"None"`), anything but a string may become None; other type changes
        are refused.

        Either every override is applied or, on an error, none is.

        Args:
            overrides (Iterable[str]): the overrides (a value may be any object).
            allow_new (bool): allow keys (and parent nodes) that do not exist yet.
                If False (the default) an unknown key is an error, which catches typos.

        Raises:
            ConfigKeyError: unknown or invalid key (with a close-match suggestion);
                an unknown one is an `UnknownOverrideKeyError`, also an
                `AssertionError` (what yacs raised).
            ConfigError: a value whose type does not match the existing one, or a
                key that is not a str (naming the entry).
            FrozenError: the config is frozen.
        """
        from .overrides import pairs as override_pairs  # (files, YAML: imported when used)

        pairs = honour_registered_keys(self, override_pairs(list(overrides)))
        # Rehearse first, so a bad override leaves this node untouched. The
        # rehearsal copies only the nodes on the overrides' paths, and those
        # shallowly: a config may hold values that cannot be copied at all (a
        # lock, a process, a socket), and the rest of the tree is not touched.
        rehearsal = _shallow_copy(self)
        rehearsal._apply_overrides(pairs, allow_new, copies={id(rehearsal)})
        self._apply_overrides(pairs, allow_new)

    def _apply_overrides(
        self, pairs: list[tuple[str, Any]], allow_new: bool, copies: set[int] | None = None
    ) -> None:
        from .literal import decode_literal
        from .overrides import coerce

        for dotted, raw in pairs:
            node, leaf = self._walk_to_parent(dotted, allow_new, copies)
            # A value given as an object (["NUM_GPUS", 2], as yacs takes it) is itself.
            value = decode_literal(raw) if isinstance(raw, str) else raw
            if leaf in node:
                value = coerce(dict.__getitem__(node, leaf), value, raw, dotted)
            elif not allow_new:
                raise UnknownOverrideKeyError(node._missing_message(leaf))
            node[leaf] = value

    def _walk_to_parent(
        self, dotted: str, allow_new: bool, copies: set[int] | None = None
    ) -> tuple[CfgNode, str]:
        """The node that holds `dotted`'s last part, and that part.

        In a rehearsal, `copies` holds the ids of the nodes already copied.
        """
        *parents, leaf = dotted.split(".")
        node = self
        for part in parents:
            if part not in node:
                if not allow_new:
                    raise UnknownOverrideKeyError(node._missing_message(part))
                node[part] = CfgNode()
            child = dict.__getitem__(node, part)
            if not isinstance(child, CfgNode):
                raise ConfigKeyError(
                    f"cannot set {dotted!r}: {node._path_of(part)!r} is a value, not a config node"
                )
            if copies is not None and id(child) not in copies:
                # Copy-on-write: the rehearsal changes a copy of each node it
                # passes through, put in place of the original in the copied parent.
                child = _shallow_copy(child)
                copies.add(id(child))
                dict.__setitem__(node, part, child)
                if part in node.__dict__:
                    node.__dict__[part] = child
            node = child
        return node, leaf

    def dict(self) -> dict[str, Any]:
        """convert to a dict

        Returns:
            dict: nested plain dicts (leaf values are not copied, except that
                the lists of a frozen config are given as plain lists).
        """
        frozen = self._frozen
        return {
            k: v.dict()
            if isinstance(v, CfgNode)
            else (thawed(v) if frozen and isinstance(v, (list, tuple)) else v)
            for k, v in dict.items(self)
        }

    def __str__(self) -> str:
        """
        Returns:
            str: a str of dict format
        """
        return str(self.dict())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dict()!r})"

    # -------------------------------------------------------------------- I/O
    def save(self, save_path: Any, encoding: str = "utf-8") -> None:
        """save the CfgNode into a yaml file

        A path is written atomically: a temporary file in the same directory,
        created with the mode a plain `open()` would give (or the mode of the
        file it replaces), is renamed into place, so a failed save never leaves
        a half-written config. A symbolic link is followed and its target
        replaced. A path naming something other than a regular file (a
        directory, a FIFO, `/dev/stdout`) is refused. A file object opened in
        text or binary mode is written to directly.

        Args:
            save_path (str or io.IOBase): path to the yaml file, or a file object.
            encoding (str): encoding of the file.

        Raises:
            ConfigError: a value with no YAML form, a path that is not a regular
                file or is a URL, or YAML text larger than `open` reads (64 MiB).
        """
        from . import files

        if hasattr(save_path, "write"):
            where = repr(getattr(save_path, "name", "<stream>"))
        else:
            where = repr(os.fspath(save_path))
            files.refuse_url(os.fspath(save_path), "save to")
        try:
            text = type(self).dump(self)
        except files.ConfigTooLargeError as exc:
            files.check_size(exc.size, where)  # the same refusal, naming the file
            raise
        assert text is not None  # dump without a stream returns the text
        data = text.encode(encoding)
        files.check_size(len(data), where)
        if hasattr(save_path, "write"):
            save_path.write(data if files.is_binary(save_path) else text)
            return
        files.atomic_write(os.fspath(save_path), data)

    @classmethod
    def open(cls, file: Any, encoding: str = "utf-8") -> Self:
        """load a CfgNode from file.

        Args:
            file (io.IOBase or str): file object or path to the yaml file.
            encoding (str): encoding of the file.

        Returns:
            CfgNode: the config, of the class this method is called on.

        Raises:
            ConfigFileNotFoundError: no file at that path (a `FileNotFoundError`).
            ConfigError: a file that is not valid text in `encoding` (then also a
                `UnicodeDecodeError`), invalid YAML, an unsafe tag, a duplicate
                or invalid key, or nesting too deep, naming the file.
        """
        from . import files

        if hasattr(file, "read"):
            source = str(getattr(file, "name", "<stream>"))
            try:
                text = file.read(files.MAX_STREAM_BYTES + 1)
            except UnicodeDecodeError as exc:
                raise files.decode_error(exc, source) from None
            if len(text) > files.MAX_STREAM_BYTES:
                raise ConfigError(
                    f"{source}: more than {files.MAX_STREAM_BYTES // 2**20} MiB; "
                    "refusing to read a config that large"
                )
            if isinstance(text, bytes):
                text = files.decode(text, encoding, source)
        else:
            source = os.fspath(file)
            text = files.read_text(source, encoding)
        return cls._from_yaml(text, source)

    @classmethod
    def load(cls, yaml_str: str) -> Self:
        """load a CfgNode from a string of yaml format

        Args:
            yaml_str (str): the YAML text.

        Returns:
            CfgNode: the config, of the class this method is called on.

        Raises:
            ConfigError: invalid YAML, an unsafe tag, a duplicate or invalid key.
        """
        return cls._from_yaml(yaml_str, "<string>")

    @classmethod
    def _from_yaml(cls, text: str, source: str) -> Self:
        from . import yaml_io

        data = yaml_io.safe_load(text, source)
        if data is None:
            return cls()
        if not isinstance(data, dict):
            kind = type(data).__name__
            raise ConfigError(f"{source}: the top level must be a mapping, not {kind}")
        try:
            return cls(data, copy=False)
        except ConfigKeyError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    def dump(
        self: Any, cfg: Any = _THIS, stream: Any = None, encoding: str | None = None, **kwargs: Any
    ) -> str | None:
        """dump CfgNode into yaml str or yaml file

        Called on the class with the config (`CfgNode.dump(cfg, f)`, as easycore
        0.4.2 spelt it) or on the config itself (`cfg.dump()`, `cfg.dump(f)`, as
        yacs spells it).

        Note:
            if `stream` is set to a non-None object, the CfgNode is dumped into
            it and None is returned; otherwise the YAML string is returned.

        Args:
            cfg (CfgNode): the config to dump (the one it is called on if not given).
            stream (io.IOBase or None): a file object, or None to return a string.
            encoding (str or None): encoding of the output.
            **kwargs: options of the yaml dumper. Some useful options:
                `allow_unicode`, `line_break`, `explicit_start`, `explicit_end`,
                `version`, `tags`, `width`, `indent`.

        Returns:
            None or str: the YAML text when `stream` is None.

        Raises:
            ConfigError: a value with no YAML or Python-literal form, or nesting
                deeper than 100 levels, naming its key; or YAML text larger than
                `open` reads (64 MiB).
        """
        from . import files, yaml_io
        from .literal import encode_tree

        if cfg is _THIS:
            cfg = self
        elif not isinstance(cfg, Mapping):  # cfg.dump(stream[, encoding]), or CfgNode.dump(cfg, f)
            # The stream came in `cfg`'s place, and a positional encoding in `stream`'s.
            if stream is not None and encoding is not None:
                raise TypeError("dump() got two encodings")
            cfg, stream, encoding = self, cfg, encoding if stream is None else stream
        ascii_only = not kwargs.get("allow_unicode", True)
        data = encode_tree(cfg, "", ascii_only, 0)
        text: str = yaml_io.safe_dump(data, None, **kwargs)
        # What easycore writes, it reads: UTF-8 takes at most 4 bytes a character.
        if len(text) * 4 > files.MAX_STREAM_BYTES:
            files.check_size(len(text.encode("utf-8", "surrogatepass")), "the config")
        out = text.encode(encoding) if encoding is not None else text
        if stream is None:
            return out  # type: ignore[return-value]  # bytes with an encoding, as PyYAML gives
        stream.write(out)
        return None


CfgNode._reserved = frozenset(dir(CfgNode))

# Leaf types that need no conversion when stored.
_SCALARS = frozenset({int, float, str, bool, type(None), bytes, complex})


_FROZEN_SLOT = CfgNode.__dict__["_frozen"]


def _shallow_copy(node: CfgNode) -> CfgNode:
    """A node with the same keys, values, path and freeze as `node`, for a rehearsal.

    Its values are those of `node`, not copies; the rehearsal replaces the
    sub-configs it walks into by shallow copies in turn, so that nothing of
    the original changes.
    """
    new = type(node).__new__(type(node))
    object.__setattr__(new, "_frozen", node._frozen)
    object.__setattr__(new, "_key_path", node._key_path)
    set_state(new, state_of(node))
    dict.update(new, node)
    new.__dict__.update(node.__dict__)
    return new


def _rebuild(
    cls: type[CfgNode],
    items: dict[str, Any],
    frozen: bool,
    key_path: str,
    peer: PeerState | None = None,
) -> CfgNode:
    node = cls()
    object.__setattr__(node, "_key_path", key_path)
    if peer is not None:
        set_state(node, peer)
    for key, value in items.items():
        node._set(key, value)
    if frozen:
        node.freeze()
    return node


def _set_key_path(node: CfgNode, path: str) -> None:
    """Give an existing node (moved under a new key) and its subtree their dotted paths."""
    if node._key_path == path:
        return  # already in place: its subtree was keyed when it was built
    object.__setattr__(node, "_key_path", path)
    for key, value in dict.items(node):
        if isinstance(value, CfgNode):
            _set_key_path(value, f"{path}.{key}" if path else key)
