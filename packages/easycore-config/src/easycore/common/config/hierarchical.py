"""HierarchicalCfgNode: configs that extend a base config through ``__BASE__``."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import Any

from .errors import ConfigError
from .node import CfgNode

__all__ = ["HierarchicalCfgNode", "BASE_KEY"]

#: The key that names the base config of a file.
BASE_KEY = "__BASE__"


class HierarchicalCfgNode:
    """Config Node help class for open yaml file that depends on another yaml file.

    You can specify the dependency between yaml files with the ``__BASE__`` key.
    ``example-A.yaml``::

        __BASE__: ./example-B.yaml
        A: in example-A.yaml
        C: in example-A.yaml

    ``example-B.yaml``::

        A: in example-B.yaml
        B: in example-B.yaml

    Then::

        >>> from easycore.common.config import HierarchicalCfgNode
        >>> cfg = HierarchicalCfgNode.open("./example-A.yaml")
        >>> print(cfg)
        {'A': 'in example-A.yaml', 'B': 'in example-B.yaml', 'C': 'in example-A.yaml'}

    Attributes in ``example-A.yaml`` cover attributes in ``example-B.yaml``.
    Chains may be of any depth; a cycle is an error naming the chain.

    Note:
        ``__BASE__`` can be an absolute path or a path relative to the yaml file.
        It is first considered as a path relative to the yaml file, then as given.
    """

    @classmethod
    def open(cls, file: str | os.PathLike[str], encoding: str = "utf-8") -> CfgNode:
        """load a CfgNode from file, resolving its ``__BASE__`` chain.

        Args:
            file (str): path to the yaml file.
            encoding (str): encoding of the files.

        Returns:
            CfgNode: the merged config, without the ``__BASE__`` key.

        Raises:
            ConfigError: a base that cannot be found, or a cycle of bases.
        """
        return _open_chain(os.path.abspath(os.fspath(file)), encoding, ())

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

        With a base, only the keys whose values differ from the (fully resolved)
        base are written, below a ``__BASE__`` key. Keys of the base that
        ``cfg`` lacks cannot be expressed this way; they come back on the next
        ``open`` and a warning says so.

        Args:
            cfg (CfgNode): the config to save.
            save_path (str): path of the yaml file to write.
            base_cfg_path (str): if not specified, it behaves like
                ``cfg.save(save_path, encoding)``.
            base_path_relative (bool): whether to write the base path relative to
                the directory of ``save_path`` (otherwise absolute).
            encoding (str): encoding of the files.
        """
        if base_cfg_path is None:
            cfg.save(save_path, encoding)
            return
        base_abs = os.path.abspath(os.fspath(base_cfg_path))
        base = cls.open(base_abs, encoding)
        out = CfgNode()
        if base_path_relative:
            out[BASE_KEY] = os.path.relpath(base_abs, os.path.dirname(os.path.abspath(save_path)))
        else:
            out[BASE_KEY] = base_abs
        lost: list[str] = []
        out.update(_difference(cfg, base, "", lost))
        if lost:
            warnings.warn(
                f"{os.fspath(save_path)}: keys of the base missing from the config will come "
                f"back from the base when it is opened: {', '.join(lost)}",
                stacklevel=2,
            )
        out.save(save_path, encoding)


def _open_chain(path: str, encoding: str, chain: tuple[str, ...]) -> CfgNode:
    if path in chain:
        cycle = " -> ".join((*chain, path))
        raise ConfigError(f"circular {BASE_KEY} chain: {cycle}")
    cfg = CfgNode.open(path, encoding)
    base = cfg.pop(BASE_KEY, None)
    if base is None:
        return cfg
    if not isinstance(base, str):
        raise ConfigError(f"{path}: {BASE_KEY} must be a path string, not {type(base).__name__}")
    relative = os.path.join(os.path.dirname(path), base)
    if os.path.isfile(relative):
        base_path = relative
    elif os.path.isfile(base):
        base_path = base
    else:
        raise ConfigError(
            f"{path}: {BASE_KEY} file {base!r} not found (looked at {relative!r} and {base!r})"
        )
    merged = _open_chain(os.path.abspath(base_path), encoding, (*chain, path))
    merged.merge(cfg)
    return merged


def _difference(cfg: Mapping[str, Any], base: Mapping[str, Any], path: str, lost: list[str]):
    diff: dict[str, Any] = {}
    for key, value in cfg.items():
        old = base.get(key, _ABSENT)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            sub = _difference(value, old, f"{path}{key}.", lost)
            if sub:
                diff[key] = sub
        elif old is _ABSENT or old != value or type(old) is not type(value):
            diff[key] = value
    lost.extend(f"{path}{key}" for key in base if key not in cfg)
    return diff


_ABSENT = object()
