"""``imap``'s reader: a lazy input read by a thread of its own into a small buffer.

The engine never runs a user's iterator on a thread that hands results over:
[`ReadAhead`][easycore.common.parallel.pool.reader.ReadAhead] is a
[`BufferedInput`][easycore.common.parallel.engine.job.BufferedInput], so the
engine takes what it buffered (``take``, never blocking).
"""

from __future__ import annotations

import threading
import time
from collections import deque

from .._os import interrupts
from ..engine.core import Engine
from ..engine.job import BufferedInput, Job

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Deque, List, Optional, Tuple

__all__ = ["ReadAhead", "Readers"]


class ReadAhead(BufferedInput):
    """A lazy ``imap`` input, read by a thread of its own into a small buffer.

    The user's iterator may block (a generator waiting on a queue, on the
    network, or on a result of this very ``imap``), so it is never run by the
    thread that hands results over, nor by the coordinator: this reader runs
    it, one item at a time, and feeds the engine, which takes from the buffer
    without blocking (``take``). The reader reads at most a chunk ahead of
    what the engine took, and the engine takes at most ``window`` items ahead
    of what the caller consumed: the input is read a bounded distance ahead.

    With an explicit ``chunksize`` items are buffered a whole chunk at a time,
    as the stdlib's task handler reads them: an input that raises loses the
    items of the chunk it broke, and the error is raised in its place. With
    the automatic chunk size every item read before the error runs.
    """

    def __init__(self, iterator: Any, chunksize: Optional[int]) -> None:
        self._iterator = iterator
        self._chunksize = chunksize
        self._buffer: Deque[Any] = deque()
        self._lock = threading.Lock()
        self.ended = False
        self.error: Optional[BaseException] = None
        self.thread: Optional[threading.Thread] = None
        # One thread feeds at a time (the reader, or a caller waiting in next()).
        self._feeding = threading.Lock()
        self._oldest = 0.0  # when the oldest item not yet taken was buffered
        self.reading_since = 0.0  # when the reader entered the input's __next__ (0: not in it)

    def __iter__(self) -> ReadAhead:
        return self

    def __next__(self) -> Any:  # (the engine uses take; a plain iterator for anyone else)
        items, _ended = self.take(1)
        if items:
            return items[0]
        raise StopIteration

    def take(self, n: int) -> Tuple[List[Any], bool]:
        """Up to ``n`` buffered items, never blocking; and whether the input ended."""
        ended = self.ended  # read first: once True, every item is in the buffer
        buffer = self._buffer
        items = []
        pop = buffer.popleft
        try:
            for _ in range(n):
                items.append(pop())
        except IndexError:
            pass
        self._oldest = time.perf_counter()
        return items, ended and not buffer

    def stalled(self, linger: float) -> bool:
        """Whether items wait in the buffer while the reader is stuck in the input."""
        since = self.reading_since
        return bool(self._buffer) and (
            (since and time.perf_counter() - since > linger)
            or time.perf_counter() - self._oldest > linger)

    def read(self, engine: Engine, job: Job, cond: threading.Condition) -> None:
        """The reader thread's loop: read, buffer, feed; ends with the input or the job.

        Args:
            engine (Engine): the pool's engine.
            job (Job): the ``imap``'s job, whose input this is.
            cond (threading.Condition): notified as the job's results come
                (credits came back): the reader waits on it for room.
        """
        pending: List[Any] = []
        chunk = self._chunksize
        linger = engine.linger
        buffer, iterator, clock = self._buffer, self._iterator, time.perf_counter
        # (deque appends and pops are atomic: no lock per item; ``take`` reads
        # ``ended`` only after the last items are in)
        size = max(1, job.next_size())
        try:
            while not job.done:
                if len(buffer) >= size:  # a chunk ahead: no more reading until it goes
                    self.feed(engine, job, cond, wait=False)
                    size = max(1, job.next_size())
                    if len(buffer) >= size:
                        self._wait(job, cond)
                    continue
                self.reading_since = now = clock()
                try:
                    item = next(iterator)
                except StopIteration:
                    break
                finally:
                    self.reading_since = 0.0
                if chunk is not None:
                    pending.append(item)
                    if len(pending) < chunk:
                        continue
                    if not buffer:
                        self._oldest = now
                    buffer.extend(pending)
                    pending = []
                else:
                    if not buffer:
                        self._oldest = now
                    buffer.append(item)
                # Send a full chunk; less only when the input is slow (items wait
                # no longer than ``linger``). While this thread is blocked in the
                # input, a caller waiting in next() sends what it read (``stalled``).
                if len(buffer) >= size or now - self._oldest > linger:
                    self.feed(engine, job, cond, wait=False)
                    size = max(1, job.next_size())
        except BaseException as exc:  # noqa: BLE001 - the input failed (any error): raised in its place
            self.error = exc
            pending = []
        with self._lock:
            self._buffer.extend(pending)
            self.ended = True
        # The engine sees the end only when it takes again: feed until it did.
        while not job.done and not job.exhausted:
            self.feed(engine, job, cond, wait=True)
        self._iterator = None  # the user's input is not kept past its end

    def feed(self, engine: Engine, job: Job, cond: threading.Condition, wait: bool) -> None:
        """Send what is buffered, if no other thread does now; then wait for room if ``wait``."""
        if self._feeding.acquire(blocking=False):
            try:
                engine.feed(job)
            except BaseException as exc:  # noqa: BLE001 - the pool broke or closed (or Ctrl-C): the job fails with it
                if not job.done:
                    engine.cancel(job, exc)
                return
            finally:
                self._feeding.release()
        if wait:
            self._wait(job, cond)

    @staticmethod
    def _wait(job: Job, cond: threading.Condition) -> None:
        # Woken by every delivery of this job (credits came back), or soon
        # (credits freed by other jobs, results consumed: no event for those).
        with cond:
            if not job.done:
                cond.wait(0.05)



class Readers:
    """A pool's reader threads, one per lazy ``imap`` input still being read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: List[threading.Thread] = []

    def start(self, source: ReadAhead, engine: Engine, job: Job,
              cond: threading.Condition) -> None:
        """Start the thread that reads ``source`` for ``job`` (see ``ReadAhead.read``)."""
        reader = threading.Thread(target=source.read, args=(engine, job, cond),
                                  name="easycore-pool-input", daemon=True)
        source.thread = reader
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(reader)
        reader.start()

    def join(self, timeout: Optional[float]) -> None:
        """Wait for every reader (each ``timeout`` seconds at most; None: no limit)."""
        # A reader ends with its input or its job; one blocked in the user's
        # iterator ends when that yields (it is a daemon thread).
        with self._lock:
            readers, self._threads = self._threads, []
        for reader in readers:
            if reader is not threading.current_thread():
                interrupts.join(reader, timeout)
