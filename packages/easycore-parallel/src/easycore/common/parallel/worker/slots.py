"""Item slots: which item each worker runs, and since when.

One slot per worker, written by the worker and read by the caller without a
message: a worker writes its slot when it receives a chunk (item -1: received,
no item started yet) and then, as each
[`RunChunk.mark`][easycore.common.parallel.worker.protocol.RunChunk] asks, the index
of each item before running it (``MARK_INDEX``: one 8-byte store) or its
index and start time (``MARK_TIMES``, for task timeouts).
From a slot the caller tells which item overran its ``task_timeout`` or killed
its worker, and whether a worker that died had received its chunk at all.

The slots are a flat array of ``(job, seq, item, started)`` records over any
writable buffer: between processes an anonymous shared mapping the workers
inherit (``fork``) or a shared-memory segment (``spawn``, ``forkserver``), a
``bytearray`` between threads. ``started`` is ``time.monotonic()``, the same clock in every
process of a machine. These are not the progress bar (``progress=``), which
counts delivered results in the caller.
"""

from __future__ import annotations

import struct

from .._named_tuples import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Tuple

__all__ = ["MARK_INDEX", "MARK_NONE", "MARK_TIMES", "ItemSlot", "ItemSlots"]

#: ``RunChunk.mark``: the chunk's receipt only (items too small to mark)
MARK_NONE = 0
#: ``RunChunk.mark``: each item's index before it runs (a death then costs one item)
MARK_INDEX = 1
#: ``RunChunk.mark``: each item's index and start time (task timeouts)
MARK_TIMES = 2


class ItemSlot(NamedTuple):
    """What a worker last wrote to its item slot."""

    job: int  #: the job of the chunk it runs (-1: none yet)
    seq: int  #: that chunk's number in its job
    item: int  #: the item's position in the chunk (-1: received, none started)
    started: float  #: ``time.monotonic()`` when it wrote this record


class ItemSlots:
    """One item slot per worker over a buffer (shared memory or a ``bytearray``).

    A record's fields are stored one by one, the item first, so that a reader
    that sees a new chunk never pairs it with the item of the chunk before.
    """

    _FIELDS = 4  # job, seq, item (int64), started (float64)
    _RECORD = struct.Struct("qqqd")

    def __init__(self, buffer: Any) -> None:
        """
        Args:
            buffer (buffer): writable, at least ``nbytes(slots)`` long for
                the slots it holds.
        """
        self._buf = buffer
        view = memoryview(buffer)
        self._ints = view.cast("q")
        self._floats = view.cast("d")

    @classmethod
    def nbytes(cls, slots: int) -> int:
        """Bytes needed for ``slots`` slots."""
        return cls._RECORD.size * max(1, slots)

    @classmethod
    def local(cls, slots: int) -> ItemSlots:
        """Item slots in this process's memory (workers that are threads), each empty."""
        made = cls(bytearray(cls.nbytes(slots)))
        made.clear(slots)
        return made

    def clear(self, slots: int) -> None:
        """Mark the first ``slots`` slots empty: no job (-1) runs there yet."""
        for slot in range(slots):
            self.write(slot, -1, -1, -1, 0.0)

    def write(self, slot: int, job: int, seq: int, item: int, started: float) -> None:
        """Record that ``slot``'s worker started ``item`` of chunk ``seq`` of ``job``."""
        base = slot * self._FIELDS
        ints = self._ints
        ints[base + 2] = item  # the item first: see the class docstring
        self._floats[base + 3] = started
        ints[base] = job
        ints[base + 1] = seq

    def item_cell(self, slot: int) -> Tuple[Any, int]:
        """``(cells, index)``: ``cells[index] = item`` records the item ``slot``'s
        worker starts now (one store, inlined in the loop that runs items)."""
        return self._ints, slot * self._FIELDS + 2

    def close(self) -> None:
        """Unmap the buffer now (a shared mapping keeps a descriptor until then);
        reads fail with ``ValueError`` afterwards."""
        self._ints.release()
        self._floats.release()
        close = getattr(self._buf, "close", None)  # a bytearray has none
        if close is not None:
            close()

    def read(self, slot: int) -> ItemSlot:
        """What ``slot``'s worker last wrote."""
        base = slot * self._FIELDS
        ints = self._ints
        return ItemSlot(ints[base], ints[base + 1], ints[base + 2], self._floats[base + 3])
