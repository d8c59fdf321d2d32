"""HierarchicalCfgNode: configs that extend a base config through `__BASE__`."""

from __future__ import annotations

import errno
import math
import os
import stat
from collections.abc import Mapping

from .errors import ConfigError, ConfigFileNotFoundError
from .files import describe_mode, refuse_url, url_scheme
from .freezing import FrozenTreeList
from .node import CfgNode
from .peers import BASE_KEYS

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any

__all__ = ["BASE_KEY", "HierarchicalCfgNode"]

#: The key that names the base config of a file (fvcore's `_BASE_` is read too).
BASE_KEY = "__BASE__"


class HierarchicalCfgNode:
    """Config Node help class for open yaml file that depends on another yaml file.

    You can specify the dependency between yaml files with the `__BASE__` key
    (fvcore's `_BASE_` is read as well). Keys in a file override those of its
    base; bases may have bases, to any depth; a cycle is an error naming the
    chain. A list of bases (`__BASE__: [a.yaml, b.yaml]`) merges them in order,
    a later one winning, as fvcore does.

    Examples:
        ```yaml title="example-B.yaml"
        A: in example-B.yaml
        B: in example-B.yaml
        ```

        ```yaml title="example-A.yaml"
        __BASE__: ./example-B.yaml
        A: in example-A.yaml
        C: in example-A.yaml
        ```

        ```python
        from easycore.common.config import HierarchicalCfgNode

        cfg = HierarchicalCfgNode.open("example-A.yaml")
        # {'A': 'in example-A.yaml', 'B': 'in example-B.yaml',
        #  'C': 'in example-A.yaml'}
        print(cfg)
        ```

    Note:
        `__BASE__` can be an absolute path or a path relative to the yaml file.
        It is first considered as a path relative to the yaml file, then as given.
    """

    #: The key that names a file's base config, `"__BASE__"`.
    __BASE__ = BASE_KEY

    @classmethod
    def open(cls, file: str | os.PathLike[str], encoding: str = "utf-8") -> CfgNode:
        """load a CfgNode from file, resolving its `__BASE__` chain.

        Args:
            file (str): path to the yaml file.
            encoding (str): encoding of the files.

        Returns:
            CfgNode: the merged config, without the `__BASE__` key.

        Raises:
            ConfigFileNotFoundError: the file, or a base it names, does not exist
                (a `FileNotFoundError` and a `ConfigError`).
            ConfigError: a base that is not a regular file, a cycle of bases, or
                any error of [`CfgNode.open`][easycore.common.config.CfgNode.open].
        """
        path = os.fspath(file)
        refuse_url(path, "open")  # before abspath, which would make it a local path
        return _open_chain(os.path.abspath(path), encoding)[0]

    @classmethod
    def save(
        cls,
        cfg: CfgNode,
        save_path: str | os.PathLike[str],
        base_cfg_path: str | os.PathLike[str] | None = None,
        base_path_relative: bool = True,
        encoding: str = "utf-8",
    ) -> None:
        """save the CfgNode into a yaml file

        With a base, only the values that differ from the (fully resolved)
        base are written, below a `__BASE__` key; every sub-config of `cfg` is
        kept, as an empty mapping (`B: {}`) when all its values equal the
        base's. Keys of the base that `cfg` lacks cannot be expressed this way;
        they come back on the next `open` and a warning says so.

        Args:
            cfg (CfgNode): the config to save.
            save_path (str): path of the yaml file to write.
            base_cfg_path (str): if not specified, it behaves like
                `cfg.save(save_path, encoding)`.
            base_path_relative (bool): whether to write the base path relative to
                the directory of `save_path` (otherwise absolute).
            encoding (str): encoding of the files.

        Raises:
            ConfigFileNotFoundError: the base file does not exist.
            ConfigError: `save_path` is the base or a file of its `__BASE__`
                chain, or any error of [`CfgNode.save`][easycore.common.config.CfgNode.save].
        """
        if base_cfg_path is None:
            cfg.save(save_path, encoding)
            return
        refuse_url(os.fspath(save_path), "save to")
        refuse_url(os.fspath(base_cfg_path), "use", "the base ")
        base_abs = os.path.abspath(os.fspath(base_cfg_path))
        base, chain = _open_chain(base_abs, encoding)
        target = os.path.realpath(os.fspath(save_path))
        if target in chain:
            # Writing the base (or a base of it) would make it name itself, or
            # a file that names it, as its base: the next open finds a cycle.
            what = "the base" if chain[0] == target else f"in the {BASE_KEY} chain of {base_abs!r}"
            raise ConfigError(
                f"cannot save to {os.fspath(save_path)!r}: it is {what}; saving there would "
                f"make a circular {BASE_KEY} chain; save to another file"
            )
        out = CfgNode()
        if base_path_relative:
            out[BASE_KEY] = os.path.relpath(base_abs, os.path.dirname(os.path.abspath(save_path)))
        else:
            out[BASE_KEY] = base_abs
        lost: list[str] = []
        out.update(_difference(cfg, base, "", lost))
        if lost:
            import warnings

            warnings.warn(
                f"{os.fspath(save_path)}: keys of the base missing from the config will come "
                f"back from the base when it is opened: {', '.join(lost)}",
                stacklevel=2,
            )
        out.save(save_path, encoding)


def _open_chain(path: str, encoding: str) -> tuple[CfgNode, list[str]]:
    """The merged config of the file at `path`, and the real paths of every file it uses.

    A file names its base with `__BASE__` (or fvcore's `_BASE_`): one path, or a list
    of them merged in order (a later base wins). Bases may have bases, to any depth: a
    loop over a stack, not recursion, so a chain of thousands of files is as fine as
    two. A file met again on the path from the top is a cycle; met again on another
    branch (two bases sharing one of their own), it is read again.
    """
    # Each frame: [path, its real path, the file's own config, its bases, next base,
    # what its bases merged give].
    # Keyed by real path: `__BASE__: d/x.yaml` with `d -> .` is x.yaml again.
    stack: list[list[Any]] = []
    on_path: dict[str, int] = {}  # real path -> its frame's index in the stack
    used: dict[str, str] = {}
    result: CfgNode | None = None
    todo: tuple[str, str | None] | None = (path, None)
    while todo is not None or stack:
        if todo is not None:
            file, referrer = todo
            todo = None
            real = os.path.realpath(file)
            if real in on_path:
                shown = [frame[0] for frame in stack[on_path[real] :]]
                raise ConfigError(f"circular {BASE_KEY} chain: {' -> '.join([*shown, file])}")
            used.setdefault(real, file)
            if referrer is None:
                cfg = CfgNode.open(file, encoding)
            else:
                cfg = _open_base(referrer, file, encoding)
            bases = [_find_base(file, base) for base in _bases_named(file, cfg)]
            on_path[real] = len(stack)
            stack.append([file, real, cfg, bases, 0, None])
        frame = stack[-1]
        if result is not None:  # a base of this frame's file is done: merge it in order
            frame[5] = result if frame[5] is None else _merged(frame[5], result)
            result = None
        file, real, cfg, bases, index, merged = frame
        if index < len(bases):
            frame[4] += 1
            todo = (bases[index], file)
            continue
        stack.pop()
        del on_path[real]
        result = cfg if merged is None else _merged(merged, cfg)
    assert result is not None
    return result, list(used)


def _merged(base: CfgNode, cfg: CfgNode) -> CfgNode:
    base.merge(cfg)
    return base


def _bases_named(path: str, cfg: CfgNode) -> list[Any]:
    """The bases `cfg` (read from `path`) names, its base keys removed."""
    given = [key for key in BASE_KEYS if key in cfg]
    if len(given) > 1:
        raise ConfigError(f"{path}: both {given[0]} and {given[1]} name a base; keep one")
    if not given:
        return []
    base = cfg.pop(given[0])
    return list(base) if isinstance(base, (list, tuple)) else [base]


def _open_base(referrer: str, path: str, encoding: str) -> CfgNode:
    try:
        return CfgNode.open(path, encoding)
    except ConfigError:
        raise
    except OSError as exc:  # unreadable (permissions), a loop of links, ...
        reason = exc.strerror or str(exc)
        raise ConfigError(
            f"{referrer}: cannot read its {BASE_KEY} file {path!r}: {reason}"
        ) from None


def _find_base(path: str, base: Any) -> str:
    """The absolute path of the base that the file at `path` names."""
    if not isinstance(base, str):
        raise ConfigError(f"{path}: {BASE_KEY} must be a path string, not {type(base).__name__}")
    if "\0" in base:
        raise ConfigError(f"{path}: {BASE_KEY} {base!r} holds a null character; not a path")
    if url_scheme(base) is not None:
        raise ConfigError(
            f"{path}: {BASE_KEY} {base!r} is a URL; a base is a local file (a path relative "
            "to this file, or absolute)"
        )
    relative = os.path.join(os.path.dirname(path), base)
    for candidate in dict.fromkeys((relative, base)):
        try:
            mode = os.stat(candidate).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        except (OSError, ValueError) as exc:  # too long, a loop of links, not permitted
            reason = getattr(exc, "strerror", None) or str(exc)
            raise ConfigError(
                f"{path}: cannot use {BASE_KEY} {_short(base)}: {reason} ({_short(candidate)})"
            ) from None
        if not stat.S_ISREG(mode):
            kind = describe_mode(mode)
            where = f"{BASE_KEY} {base!r} is a {kind} ({candidate})"
            raise ConfigError(f"{path}: {where}, not a YAML file")
        return os.path.abspath(candidate)
    looked = f"looked at {relative!r} and {base!r}" if relative != base else f"looked at {base!r}"
    raise ConfigFileNotFoundError(
        errno.ENOENT, f"{path}: {BASE_KEY} file {base!r} not found ({looked})", base
    )


def _short(text: str, limit: int = 200) -> str:
    """`repr(text)`, cut in the middle when long (a 5,000-character path is unreadable)."""
    shown = repr(text)
    if len(shown) <= limit:
        return shown
    return f"{shown[: limit // 2]}...{shown[-limit // 2 :]} ({len(text):,} characters)"


def _difference(
    cfg: Mapping[str, Any], base: Mapping[str, Any], path: str, lost: list[str]
) -> dict[str, Any]:
    diff: dict[str, Any] = {}
    for key, value in cfg.items():
        old = base.get(key, _ABSENT)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            # Kept even when empty, as easycore 0.4.2 did: the saved file then
            # shows every sub-config, and opening it alone still has `cfg.B`.
            diff[key] = _difference(value, old, f"{path}{key}.", lost)
        elif old is _ABSENT or not _same_value(old, value):
            diff[key] = value
    lost.extend(f"{path}{key}" for key in base if key not in cfg)
    return diff


_ABSENT = object()


def _kind(value: Any) -> type:
    # A list of a frozen config is the list a file gives back.
    return list if type(value) is FrozenTreeList else type(value)


def _same_value(a: Any, b: Any) -> bool:
    """Equal, of the same types all the way down, and of the same sign.

    `[1]` equals `[1.0]` and `-0.0` equals `0.0` in Python, but a file that
    dropped one for the other would reopen with the base's value.
    """
    if _kind(a) is not _kind(b):
        return False
    if isinstance(a, float):
        return (a == b and math.copysign(1.0, a) == math.copysign(1.0, b)) or (a != a and b != b)
    if isinstance(a, complex):
        return _same_value(a.real, b.real) and _same_value(a.imag, b.imag)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, Mapping):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, (set, frozenset)):
        # {1} == {1.0}: compare the items with their types
        return {(type(x), repr(x)) for x in a} == {(type(x), repr(x)) for x in b}
    return bool(a == b)
