"""Exceptions raised by :mod:`easycore.common.config`."""

from __future__ import annotations

__all__ = ["ConfigError", "ConfigKeyError", "FrozenError"]


class ConfigError(ValueError):
    """A config file or value cannot be loaded, saved or merged.

    The message names the file (and line, when known) or the dotted key at fault.
    """


class ConfigKeyError(KeyError):
    """A key is missing or invalid; the message carries the full dotted path.

    Unlike a plain :class:`KeyError`, ``str()`` gives the readable message
    instead of its ``repr``.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class FrozenError(AttributeError):
    """A frozen :class:`~easycore.common.config.CfgNode` was asked to change."""
