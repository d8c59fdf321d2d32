"""Adaptive chunking: how many items travel between processes at once.

Sending items one by one costs a few tens of microseconds of pickling and
system calls each, which dwarfs ``x * x``. Sending them in chunks amortises
that, but a chunk that is too large hurts load balance, latency and memory.
The chunker watches how long workers take per chunk (and how many bytes a
chunk makes) and steers the size towards a few milliseconds and a few
megabytes per chunk. Hooks still see one item at a time: chunking is
invisible to ``producer_work`` and ``consumer_work``.
"""

from __future__ import annotations

import threading
import types

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable, Dict, Optional

__all__ = ["AdaptiveChunker", "ChunkersByFunction"]


class AdaptiveChunker:
    """Picks the next chunk size from the timings of finished chunks.

    Thread-safety: [`observe`][easycore.common.parallel.engine.chunking.AdaptiveChunker.observe]
    is called by the thread that pumps and
    [`size`][easycore.common.parallel.engine.chunking.AdaptiveChunker.size] read by the
    thread that feeds; both touch a single int, so a stale read only means one
    chunk of the previous size.
    """

    def __init__(
        self,
        target_seconds: float = 0.008,
        target_bytes: int = 4 << 20,
        max_items: int = 8192,
        growth: float = 8.0,
    ) -> None:
        """
        Args:
            target_seconds (float): aim for chunks that take this long in a worker.
            target_bytes (int): and that carry at most about this many bytes.
            max_items (int): never more items than this per chunk; with
                ``queue_scale`` it bounds how far the input is read ahead.
            growth (float): the largest factor by which one observation can
                grow the size, so one lucky timing does not jump to the maximum.
        """
        self.target_seconds = target_seconds
        self.target_bytes = target_bytes
        self.max_items = max_items
        self.growth = growth
        self.outlier = 3.0  # one chunk moves the average by at most (1 + 3) / 2 = 2x
        self._size = 1  # start small: the first items also probe how costly an item is
        self._secs_per_item: Optional[float] = None
        self._bytes_per_item: Optional[float] = None

    @property
    def size(self) -> int:
        """int: the number of items to put in the next chunk."""
        return self._size

    @property
    def seconds_per_item(self) -> float:
        """float: the average worker time per item seen so far (0 before any)."""
        return self._secs_per_item or 0.0

    def observe(self, n_items: int, seconds: float, nbytes: int) -> None:
        """Account for a finished chunk.

        Args:
            n_items (int): items in the chunk.
            seconds (float): time the worker spent on it (decode, hooks, encode).
            nbytes (int): bytes it moved (input and results, wherever they travelled).
        """
        if n_items <= 0:
            return
        secs = max(seconds / n_items, 1e-9)
        nb = max(nbytes / n_items, 1.0)
        if self._secs_per_item is not None:
            # A worker that was descheduled (more workers than cores, a noisy
            # neighbour) reports a chunk many times too slow; alone it must not
            # shrink chunks to one item, which makes everything slower still.
            secs = min(secs, self.outlier * self._secs_per_item)
        # An exponential average: single chunks are noisy (GIL switches, page
        # faults on the first big array), the trend is what matters.
        if self._secs_per_item is None or self._bytes_per_item is None:
            spi, bpi = secs, nb
        else:
            spi = 0.5 * self._secs_per_item + 0.5 * secs
            bpi = 0.5 * self._bytes_per_item + 0.5 * nb
        self._secs_per_item, self._bytes_per_item = spi, bpi
        ideal = min(self.target_seconds / spi, self.target_bytes / bpi)
        ideal = min(ideal, self._size * self.growth, self.max_items)
        self._size = max(1, int(ideal))


class ChunkersByFunction:
    """One [`AdaptiveChunker`][easycore.common.parallel.engine.chunking.AdaptiveChunker]
    per function, for a pool whose jobs run many functions (thread-safe).

    Keyed by what does not hold the caller's objects: a bound method's
    function, not its instance (``submit(obj.method)`` must not keep ``obj``
    alive, as CPython's ``test_no_stale_references`` checks); other callable
    objects by id (a reused id only shares a chunk-size estimate). Past
    ``limit`` functions the estimates start afresh.
    """

    def __init__(self, limit: int = 64) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._chunkers: Dict[Any, AdaptiveChunker] = {}

    def get(self, func: Callable) -> AdaptiveChunker:
        """The chunker of ``func`` (made on first use).

        Args:
            func (callable): the job's function.

        Returns:
            AdaptiveChunker:
        """
        key: Any = getattr(func, "__func__", func)
        if not (isinstance(key, (types.FunctionType, type)) or (
                isinstance(key, types.BuiltinFunctionType)  # len, not [].append
                and isinstance(key.__self__, (types.ModuleType, type(None))))):
            key = (type(func), id(func))
        with self._lock:
            chunker = self._chunkers.get(key)
            if chunker is None:
                if len(self._chunkers) > self._limit:
                    self._chunkers.clear()
                chunker = self._chunkers[key] = AdaptiveChunker()
        return chunker
