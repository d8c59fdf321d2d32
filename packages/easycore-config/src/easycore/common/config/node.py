"""CfgNode: a dict with attribute access, safe YAML I/O and a real freeze.

Why keys are mirrored into the instance ``__dict__``: ``cfg.A.B`` is then
resolved by CPython's own attribute lookup, in C, instead of a Python-level
``__getattr__`` on every access (the original spent ~23x a plain dict lookup
there). Every mutation goes through :meth:`CfgNode._set` or a method that
checks the freeze first, so the mirror never drifts from the dict.

Keys that collide with a method or attribute of CfgNode (``copy``, ``items``,
``freeze`` ...) are allowed but live only as items: ``cfg["copy"]`` works,
while ``cfg.copy`` stays the method and ``cfg.copy = 1`` raises with a hint.
"""

from __future__ import annotations

import difflib
import io
import os
import tempfile
from collections.abc import Iterable, Mapping
from copy import deepcopy
from typing import Any, TypeVar

from . import yaml_io
from .errors import ConfigError, ConfigKeyError, FrozenError
from .literal import decode_literal, encode_literal

__all__ = ["CfgNode"]

_T = TypeVar("_T", bound="CfgNode")


class CfgNode(dict):
    """Config Node: a ``dict`` whose keys are also attributes.

    Nested dictionaries become CfgNodes, so ``cfg.MODEL.NUM_CLASSES`` and
    ``cfg["MODEL"]["NUM_CLASSES"]`` are the same value. Keys must be valid
    Python identifiers; errors name the full dotted key (``MODEL.BACKBONE.DEPTH``).

    Example::

        cfg = CfgNode({"MODEL": {"NUM_CLASSES": 100}})
        cfg.SOLVER = CfgNode()
        cfg.SOLVER.LEARNING_RATE = 0.001
        cfg.freeze()
    """

    __slots__ = ("__dict__", "_frozen", "_key_path")

    #: Names a key must not shadow as an attribute (methods, slots, dunders),
    #: per class, so a subclass's own methods are protected too.
    _reserved: frozenset[str] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._reserved = frozenset(dir(cls))

    def __init__(self, init_dict: Mapping[str, Any] | None = None, copy: bool = True) -> None:
        """
        Args:
            init_dict (dict): a possibly-nested dictionary to initialize the CfgNode.
            copy (bool): if False, the CfgNode shares the leaf values with
                ``init_dict``; otherwise the contents of ``init_dict`` are deep-copied.
        """
        object.__setattr__(self, "_frozen", False)
        object.__setattr__(self, "_key_path", "")
        super().__init__()
        if init_dict is None:
            return
        if not isinstance(init_dict, Mapping):
            raise TypeError(f"CfgNode expects a mapping, got {type(init_dict).__name__}")
        if copy:
            init_dict = deepcopy(init_dict)
        for key, value in init_dict.items():
            self._set(key, value)
        if copy:
            # A copy is a new tree: deep-copied, and unfrozen all the way down
            # even when built from a frozen CfgNode.
            self.freeze(False)

    # ------------------------------------------------------------------ access
    def __getattr__(self, name: str) -> Any:
        # Reached only for names that are neither attributes nor mirrored keys.
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # protocol probes (__deepcopy__, ...) stay quiet
        raise AttributeError(self._missing_message(name))

    def __missing__(self, key: Any) -> Any:
        raise ConfigKeyError(self._missing_message(key))

    def _path_of(self, key: Any) -> str:
        return f"{self._key_path}.{key}" if self._key_path else str(key)

    def _missing_message(self, key: Any) -> str:
        message = f"config has no key {self._path_of(key)!r}"
        if isinstance(key, str):
            close = difflib.get_close_matches(key, [k for k in self if isinstance(k, str)], n=1)
            if close:
                message += f"; did you mean {self._path_of(close[0])!r}?"
        return message

    # --------------------------------------------------------------- mutation
    def _set(self, key: Any, value: Any) -> None:
        """The single way a key gets into the node: validate, convert, mirror."""
        if not isinstance(key, str) or not key.isidentifier():
            raise ConfigKeyError(
                f"invalid config key {self._path_of(key)!r}: keys must be valid Python identifiers"
            )
        if type(value) in _SCALARS:
            pass  # nothing to convert (and no slow ABC isinstance check)
        elif isinstance(value, Mapping) and not isinstance(value, CfgNode):
            # Give the new node its path before its children are set, so that
            # their paths (used in every error message) are full dotted paths.
            node = CfgNode()
            object.__setattr__(node, "_key_path", self._path_of(key))
            for child_key, child in value.items():
                node._set(child_key, child)
            value = node
        elif isinstance(value, CfgNode):
            _set_key_path(value, self._path_of(key))
        dict.__setitem__(self, key, value)
        if key not in type(self)._reserved:
            self.__dict__[key] = value

    def _check_mutable(self, key: Any = None) -> None:
        if self._frozen:
            what = f" key {self._path_of(key)!r}" if key is not None else ""
            where = f" {self._key_path!r}" if self._key_path else ""
            raise FrozenError(
                f"config{where} is frozen; cannot change{what} (call freeze(False) first)"
            )

    def __setattr__(self, name: str, value: Any) -> None:
        # Fast path for re-binding an existing key to a scalar, the hot
        # ``cfg.sum += x`` of a consumer loop: a key already in the mirror is
        # known valid and unreserved, and a scalar needs no conversion.
        mirror = self.__dict__
        if name in mirror and type(value) in _SCALARS and not self._frozen:
            dict.__setitem__(self, name, value)
            mirror[name] = value
            return
        if name in type(self)._reserved:
            raise AttributeError(
                f"cannot set {self._path_of(name)!r} as an attribute: {name!r} is a CfgNode "
                f"method or attribute; use cfg[{name!r}] = ... to store it as a key"
            )
        self._check_mutable(name)
        self._set(name, value)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._check_mutable(key)
        self._set(key, value)

    def __delattr__(self, name: str) -> None:
        if name not in self:
            raise AttributeError(self._missing_message(name))
        del self[name]

    def __delitem__(self, key: Any) -> None:
        self._check_mutable(key)
        if key not in self:
            raise ConfigKeyError(self._missing_message(key))
        dict.__delitem__(self, key)
        self.__dict__.pop(key, None)

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self._check_mutable()
        for key, value in dict(*args, **kwargs).items():
            self._set(key, value)

    def __ior__(self: _T, other: Any) -> _T:  # type: ignore[override]
        self.update(other)
        return self

    def __or__(self, other: Any) -> CfgNode:  # type: ignore[override]
        if not isinstance(other, Mapping):
            return NotImplemented
        merged = CfgNode(self, copy=False)
        merged.update(other)
        return merged

    def pop(self, key: Any, *default: Any) -> Any:  # type: ignore[override]
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

    def setdefault(self, key: Any, default: Any = None) -> Any:  # type: ignore[override]
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

        A frozen node refuses every change: ``cfg.X = ...``, ``cfg["X"] = ...``,
        ``del``, ``update``, ``pop``, ``popitem``, ``setdefault``, ``clear``,
        ``|=`` and ``merge``. Lists inside the tree stay ordinary lists.

        Args:
            frozen (bool): freeze or unfreeze the config
        """
        object.__setattr__(self, "_frozen", bool(frozen))
        for value in dict.values(self):
            if isinstance(value, CfgNode):
                value.freeze(frozen)

    def is_frozen(self) -> bool:
        """get the state of the config.

        Returns:
            bool: whether the config tree is frozen.
        """
        return self._frozen

    def copy(self: _T) -> _T:  # type: ignore[override]
        """deepcopy this CfgNode (the copy keeps the frozen state)

        Returns:
            CfgNode
        """
        return deepcopy(self)

    def __deepcopy__(self: _T, memo: dict[int, Any]) -> _T:
        new = type(self)()
        memo[id(self)] = new
        object.__setattr__(new, "_key_path", self._key_path)
        for key, value in dict.items(self):
            new._set(key, deepcopy(value, memo))
        object.__setattr__(new, "_frozen", self._frozen)
        return new

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuild through _set so unpickled nodes (e.g. in runner workers) get
        # their attribute mirror and key paths back.
        return (_rebuild, (type(self), dict(self), self._frozen, self._key_path))

    def merge(self, cfg: Mapping[str, Any]) -> None:
        """merge another CfgNode into this CfgNode, the another CfgNode will override this CfgNode.

        Nested nodes merge recursively; other values from ``cfg`` are deep-copied in.

        Args:
            cfg (CfgNode): the config whose values win.
        """
        self._check_mutable()
        for key, value in cfg.items():
            mine = dict.get(self, key)
            if isinstance(value, Mapping) and isinstance(mine, CfgNode):
                mine.merge(value)
            else:
                self._set(key, deepcopy(value))

    def merge_from_list(self, overrides: Iterable[str], allow_new: bool = False) -> None:
        """merge command-line style overrides into this CfgNode.

        ``overrides`` is either alternating keys and values
        (``["SOLVER.LR", "0.1", "NAME", "run1"]``) or ``KEY=VALUE`` items
        (``["SOLVER.LR=0.1", "NAME=run1"]``). Values are parsed as Python
        literals (``"0.1"`` -> 0.1, ``"(1, 2)"`` -> tuple); anything else stays a
        string. An existing value keeps its type: an int may become a float, a
        list a tuple and vice versa, a string stays a string; other type changes
        are refused.

        Args:
            overrides (Iterable[str]): the overrides.
            allow_new (bool): allow keys (and parent nodes) that do not exist yet.
                If False (the default) an unknown key is an error, which catches typos.

        Raises:
            ConfigKeyError: unknown or invalid key (with a close-match suggestion).
            ConfigError: a value whose type does not match the existing one.

        Either every override is applied or, on an error, none is.
        """
        pairs = _pairs(list(overrides))
        # Rehearse on a copy first, so a bad override leaves this node untouched.
        deepcopy(self)._apply_overrides(pairs, allow_new)
        self._apply_overrides(pairs, allow_new)

    def _apply_overrides(self, pairs: list[tuple[str, str]], allow_new: bool) -> None:
        for dotted, raw in pairs:
            node, leaf = self._walk_to_parent(dotted, allow_new)
            value = decode_literal(raw)
            if leaf in node:
                value = _coerce(dict.__getitem__(node, leaf), value, raw, dotted)
            elif not allow_new:
                raise ConfigKeyError(node._missing_message(leaf))
            node[leaf] = value

    def _walk_to_parent(self, dotted: str, allow_new: bool) -> tuple[CfgNode, str]:
        *parents, leaf = dotted.split(".")
        node = self
        for part in parents:
            if part not in node:
                if not allow_new:
                    raise ConfigKeyError(node._missing_message(part))
                node[part] = CfgNode()
            child = dict.__getitem__(node, part)
            if not isinstance(child, CfgNode):
                raise ConfigKeyError(
                    f"cannot set {dotted!r}: {node._path_of(part)!r} is a value, not a config node"
                )
            node = child
        return node, leaf

    def dict(self) -> dict[str, Any]:
        """convert to a dict

        Returns:
            dict: nested plain dicts (leaf values are not copied).
        """
        return {k: v.dict() if isinstance(v, CfgNode) else v for k, v in dict.items(self)}

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

        A path is written atomically (a temporary file renamed into place), so
        a failed save never leaves a half-written config. A file object opened
        in text or binary mode is written to directly.

        Args:
            save_path (str or io.IOBase): path to the yaml file, or a file object.
            encoding (str): encoding of the file.
        """
        text = type(self).dump(self)
        if hasattr(save_path, "write"):
            if isinstance(save_path, (io.RawIOBase, io.BufferedIOBase)) or "b" in getattr(
                save_path, "mode", ""
            ):
                save_path.write(text.encode(encoding))
            else:
                save_path.write(text)
            return
        _atomic_write(os.fspath(save_path), text, encoding)

    @classmethod
    def open(cls: type[_T], file: Any, encoding: str = "utf-8") -> _T:
        """load a CfgNode from file.

        Args:
            file (io.IOBase or str): file object or path to the yaml file.
            encoding (str): encoding of the file.

        Returns:
            CfgNode

        Raises:
            ConfigError: invalid YAML, an unsafe tag or an invalid key, naming the file.
        """
        if hasattr(file, "read"):
            text = file.read()
            if isinstance(text, bytes):
                text = text.decode(encoding)
            source = str(getattr(file, "name", "<stream>"))
        else:
            source = os.fspath(file)
            with open(source, encoding=encoding) as f:
                text = f.read()
        return cls._from_yaml(text, source)

    @classmethod
    def load(cls: type[_T], yaml_str: str) -> _T:
        """load a CfgNode from a string of yaml format

        Args:
            yaml_str (str): the YAML text.

        Returns:
            CfgNode
        """
        return cls._from_yaml(yaml_str, "<string>")

    @classmethod
    def _from_yaml(cls: type[_T], text: str, source: str) -> _T:
        data = yaml_io.safe_load(text, source)
        if data is None:
            return cls()
        if not isinstance(data, dict):
            kind = type(data).__name__
            raise ConfigError(f"{source}: the top level must be a mapping, not {kind}")
        try:
            return cls(_decode_tree(data), copy=False)
        except ConfigKeyError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    @classmethod
    def dump(
        cls, cfg: CfgNode, stream: Any = None, encoding: str | None = None, **kwargs: Any
    ) -> str | None:
        """dump CfgNode into yaml str or yaml file

        Note:
            if ``stream`` is set to a non-None object, the CfgNode is dumped into
            it and None is returned; otherwise the YAML string is returned.

        Args:
            cfg (CfgNode): the config to dump.
            stream (io.IOBase or None): a file object, or None to return a string.
            encoding (str or None): encoding of the output.
            **kwargs: options of the yaml dumper. Some useful options:
                ["allow_unicode", "line_break", "explicit_start", "explicit_end",
                "version", "tags"].

        Returns:
            None or str

        Raises:
            ConfigError: a value with no YAML or Python-literal form, naming its key.
        """
        return yaml_io.safe_dump(_encode_tree(cfg, ""), stream, encoding=encoding, **kwargs)


CfgNode._reserved = frozenset(dir(CfgNode))

# Leaf types that need no conversion when stored.
_SCALARS = frozenset({int, float, str, bool, type(None), bytes, complex})


def _rebuild(cls: type[CfgNode], items: dict[str, Any], frozen: bool, key_path: str) -> CfgNode:
    node = cls()
    object.__setattr__(node, "_key_path", key_path)
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


def _decode_tree(value: Any) -> Any:
    if isinstance(value, str):
        return decode_literal(value)
    if isinstance(value, dict):
        return {k: _decode_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_tree(v) for v in value]
    return value


def _encode_tree(value: Any, path: str) -> Any:
    if isinstance(value, Mapping):
        return {k: _encode_tree(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_encode_tree(v, f"{path}[{i}]") for i, v in enumerate(value)]
    try:
        return encode_literal(value)
    except TypeError as exc:
        raise ConfigError(f"cannot save {path or 'config'!r}: {exc}") from None


def _pairs(items: list[str]) -> list[tuple[str, str]]:
    if all("=" in item for item in items):
        return [tuple(item.split("=", 1)) for item in items]  # type: ignore[misc]
    if len(items) % 2:
        raise ConfigError(
            f"overrides must be KEY=VALUE items or KEY VALUE pairs; got an odd list: {items}"
        )
    return list(zip(items[0::2], items[1::2]))


def _coerce(old: Any, new: Any, raw: str, key: str) -> Any:
    if old is None or new is None or type(old) is type(new):
        return new
    if isinstance(old, str):
        return raw  # "NAME=50" on a string key means the string "50"
    if isinstance(old, float) and type(new) is int:
        return float(new)
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)):
        return type(old)(new)
    raise ConfigError(
        f"cannot set {key!r} to {raw!r}: expected {type(old).__name__}, got {type(new).__name__}"
    )


def _atomic_write(path: str, text: str, encoding: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".yaml", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding=encoding) as f:
            f.write(text)
        # mkstemp makes the file 0600; give it the mode a plain open() would.
        os.chmod(tmp, _mode_for(path))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _mode_for(path: str) -> int:
    try:
        return os.stat(path).st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
