"""Light, safe YAML config trees.

[`CfgNode`][easycore.common.config.CfgNode] is a `dict` with attribute access
that loads and saves YAML safely (config files never run code), freezes for
real, and names the full dotted key in every error.
[`HierarchicalCfgNode`][easycore.common.config.HierarchicalCfgNode] opens
configs that extend a base file through `__BASE__`.

Importing the package is cheap: PyYAML is imported when YAML is first read or
written.

Run `python -m easycore.common.config FILE [--set KEY=VALUE ...]` to print a
resolved config.
"""

from ._version import __version__
from .errors import (
    ConfigDecodeError,
    ConfigError,
    ConfigFileNotFoundError,
    ConfigKeyError,
    FrozenError,
    UnknownOverrideKeyError,
)
from .hierarchical import HierarchicalCfgNode
from .node import CfgNode

__all__ = [
    "CfgNode",
    "ConfigDecodeError",
    "ConfigError",
    "ConfigFileNotFoundError",
    "ConfigKeyError",
    "FrozenError",
    "HierarchicalCfgNode",
    "UnknownOverrideKeyError",
    "__version__",
]
