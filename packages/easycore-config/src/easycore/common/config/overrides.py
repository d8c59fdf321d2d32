"""`merge_from_list`'s overrides: how a list is read, and which changes of type are allowed."""

from __future__ import annotations

from .errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any

__all__ = ["coerce", "pairs"]


def pairs(items: list[Any]) -> list[tuple[str, Any]]:
    """KEY=VALUE items, or alternating keys and values; a value may be given as any object."""
    if items and all(isinstance(item, str) and "=" in item for item in items):
        return [tuple(item.split("=", 1)) for item in items]
    if len(items) % 2:
        raise ConfigError(
            f"overrides must be KEY=VALUE items or KEY VALUE pairs; got an odd list: {items}"
        )
    for index in range(0, len(items), 2):
        key = items[index]
        if not isinstance(key, str):
            raise ConfigError(
                f"override entry {index} is {key!r} ({type(key).__name__}) where a key is "
                f"expected: a dotted key as a str, e.g. ['SOLVER.LR', '0.1'] or "
                f"['SOLVER.LR=0.1'], in {items}"
            )
    return list(zip(items[0::2], items[1::2]))


def coerce(old: Any, new: Any, raw: Any, key: str) -> Any:
    """The value an override `raw` (decoded: `new`) sets on a key that holds `old`.

    Raises:
        ConfigError: a change of type other than those `merge_from_list` allows.
    """
    if isinstance(old, str) and isinstance(raw, str):
        # "NAME=50" or "NAME=None" on a string key means that string; a quoted
        # literal ("NAME='run 7'") gives the string it spells.
        return new if isinstance(new, str) else raw
    if old is None or new is None or type(old) is type(new):
        return new
    if isinstance(old, float) and type(new) is int:
        return float(new)
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)):
        return type(old)(new)
    raise ConfigError(
        f"cannot set {key!r} to {raw!r}: expected {type(old).__name__}, got {type(new).__name__}"
    )
