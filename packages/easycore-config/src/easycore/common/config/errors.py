"""Exceptions raised by `easycore.common.config`."""

from __future__ import annotations

__all__ = [
    "ConfigDecodeError",
    "ConfigError",
    "ConfigFileNotFoundError",
    "ConfigKeyError",
    "FrozenError",
    "UnknownOverrideKeyError",
]


class ConfigError(ValueError):
    """A config file or value cannot be loaded, saved or merged.

    The message names the file (and line, when known) or the dotted key at fault.
    """


class ConfigFileNotFoundError(FileNotFoundError, ConfigError):
    """A config file, or the `__BASE__` file a config names, does not exist.

    It is both a `FileNotFoundError` (what easycore 0.4.2 raised, with `errno`
    and `filename` set) and a [`ConfigError`][easycore.common.config.ConfigError];
    `str()` gives the message alone.
    """

    def __str__(self) -> str:
        return str(self.strerror)


class ConfigDecodeError(UnicodeDecodeError, ConfigError):
    """A config file is not valid text in its encoding; the message names the file.

    Both a `UnicodeDecodeError` (what easycore 0.4.2 raised) and a
    [`ConfigError`][easycore.common.config.ConfigError].
    """

    def __init__(
        self, message: str, encoding: str, data: bytes, start: int, end: int, reason: str
    ) -> None:
        super().__init__(encoding, data, start, end, reason)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[object, ...]:
        return (
            type(self),
            (self.message, self.encoding, self.object, self.start, self.end, self.reason),
        )


class ConfigKeyError(KeyError):
    """A key is missing or invalid; the message carries the full dotted path.

    Unlike a plain `KeyError`, `str()` gives the readable message instead of
    its `repr`.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownOverrideKeyError(ConfigKeyError, AssertionError):
    """`merge_from_list` was given a key the config does not have.

    A [`ConfigKeyError`][easycore.common.config.ConfigKeyError], and an
    `AssertionError` as well: what yacs raised there, so that code written for yacs
    (`except AssertionError:`) keeps working.
    """


class FrozenError(AttributeError):
    """A frozen [`CfgNode`][easycore.common.config.CfgNode] was asked to change."""
