"""A tiny, thread-safe name -> object registry.

See [`Registry`][easycore.common.registry.Registry].
"""

from ._version import __version__
from .registry import Registry

__all__ = ["Registry", "__version__"]
