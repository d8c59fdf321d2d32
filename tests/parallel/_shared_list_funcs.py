"""Worker-side functions of the SharedList tests, importable under every start method."""

from __future__ import annotations

import os
from typing import Any, Optional

#: set by ``keep`` (a pool initializer) in each worker
_ITEMS: Optional[Any] = None


def make_items(n: int) -> list:
    """Small dicts, the shape of a detection data set's records."""
    return [{"id": i, "file": f"{i:06d}.jpg", "box": (i, i + 1.5), "tags": ["a"] * (i % 3)}
            for i in range(n)]


def keep(items: Any) -> None:
    """Pool initializer: the SharedList travels once per worker."""
    global _ITEMS
    _ITEMS = items


def kept_ids(_: Any = None) -> tuple:
    """(this worker's pid, the sum of every kept item's id, read by iteration)."""
    assert _ITEMS is not None
    return os.getpid(), sum(item["id"] for item in _ITEMS)


def ids_of(items: Any) -> list:
    """The ids of a SharedList (or view) sent as an argument, by indexing."""
    return [items[i]["id"] for i in range(len(items))]


def close_and_report(items: Any) -> tuple:
    """Close a handle in this (non-owner) process: it stops working here only."""
    first = items[0]["id"]
    items.close()
    try:
        items[0]
    except ValueError as exc:
        return first, str(exc)
    return first, None


def read_until_released(items: Any, ready: Any, released: Any, out: Any) -> None:
    """Read, say so, wait until the owner released the list, then read again.

    Sends ``("ok", id)`` then ``("error", message)`` or ``("read", item)``
    through ``out``; a SIGBUS would end the process without the second.
    """
    out.send(("ok", items[1]["id"]))
    ready.set()
    if not released.wait(60):
        out.send(("timeout", None))
        return
    try:
        item = items[1]
    except ValueError as exc:
        out.send(("error", str(exc)))
    else:
        out.send(("read", item))
    try:
        next(iter(items))
    except ValueError as exc:
        out.send(("error", str(exc)))
    else:
        out.send(("read", None))
