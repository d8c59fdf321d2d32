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
from .node import CfgNode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .hierarchical import HierarchicalCfgNode


def __getattr__(name: str) -> object:
    # PEP 562: HierarchicalCfgNode (and the file handling it brings) is imported
    # on first use; a CfgNode built from a dict, or received by a worker, needs
    # neither.
    if name == "HierarchicalCfgNode":
        from .hierarchical import HierarchicalCfgNode

        return HierarchicalCfgNode
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"HierarchicalCfgNode"})

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
