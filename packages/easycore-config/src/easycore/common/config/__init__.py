"""Light, safe YAML config trees.

:class:`CfgNode` is a ``dict`` with attribute access that loads and saves YAML
safely (config files never run code), freezes for real, and names the full
dotted key in every error. :class:`HierarchicalCfgNode` opens configs that
extend a base file through ``__BASE__``.

Run ``python -m easycore.common.config FILE [--set KEY=VALUE ...]`` to print a
resolved config.
"""

from ._version import __version__
from .errors import ConfigError, ConfigKeyError, FrozenError
from .hierarchical import HierarchicalCfgNode
from .node import CfgNode

__all__ = [
    "CfgNode",
    "HierarchicalCfgNode",
    "ConfigError",
    "ConfigKeyError",
    "FrozenError",
    "__version__",
]
