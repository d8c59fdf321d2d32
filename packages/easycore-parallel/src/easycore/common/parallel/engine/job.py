"""A job: one function over a stream of items, and the sink its results go to.

What a client hands to the [`Engine`][easycore.common.parallel.engine.core.Engine]
(see the data flow in [`engine`][easycore.common.parallel.engine]): the items
(a list read by whoever pumps, or a lazy iterator read by its owner's thread),
where it stands (items taken, chunks in flight, deaths it caused), and a
[`JobSink`][easycore.common.parallel.engine.job.JobSink] that receives its
results. A job knows nothing of the engine that runs it; it is given the
recorder it reports its input's reading time to.

A lazy source that is read ahead by a thread of its own (``Pool.imap``'s)
says so by being a
[`BufferedInput`][easycore.common.parallel.engine.job.BufferedInput]: the engine
then takes what the buffer holds and never waits in the user's iterator.
"""

from __future__ import annotations

import abc
import threading
import time
from collections import deque
from itertools import islice

from ..errors import DeathCause
from .chunking import AdaptiveChunker
from .ordering import InputOrder

__all__ = ["BufferedInput", "Chunk", "ItemError", "Job", "JobSink"]

#: makes a job's ``finished`` event exactly once, whichever thread asks first
_EVENT_LOCK = threading.Lock()

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Deque, Dict, Iterator, List, Optional, Tuple

    from ..insights import Recorder


class ItemError:
    """An item's failure as its sink receives it: an exception to raise for it."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class JobSink:
    """Receives a job's results; subclass for each kind of client.

    The engine sets ``job`` before the first chunk is sent, so that a sink can
    act on its job (e.g. cancel it) from its very first delivery.
    """

    job: Optional[Job] = None

    def deliver(self, first_index: int, results: List[Any], failed: Dict[int, ItemError]) -> None:
        """A chunk's results, in input order if the job is ordered.

        Args:
            first_index (int): index (in the input) of ``results[0]``.
            results (list): one result per item.
            failed (dict): position in ``results`` -> the item's error.
        """

    def finish(self, error: Optional[BaseException]) -> None:
        """The job ended: every item delivered (error None), or it failed."""

    def claim(self) -> bool:
        """The job's first chunk is about to be sent (engine lock held).

        Returns:
            bool: False to drop the job instead (it was cancelled before any
            worker got it: it ends with no error and nothing runs).
        """
        return True


class BufferedInput(abc.ABC):
    """A lazy job's input that a thread of its own reads ahead into a buffer.

    What the engine asks of such an input for more items, instead of running
    the user's iterator itself (which may block): ``take`` hands over what the
    buffer holds and never blocks. An input is one by subclassing this (a
    user's iterator that happens to have a ``take`` method is not).
    """

    @abc.abstractmethod
    def take(self, n: int) -> Tuple[List[Any], bool]:
        """Up to ``n`` buffered items, never blocking.

        Args:
            n (int): the most items wanted.

        Returns:
            tuple: ``(items, ended)``: ``ended`` once the input is exhausted
            and every item of it was taken.
        """


class Chunk:
    """A chunk in flight (caller side)."""

    __slots__ = ("first", "in_bytes", "items", "job", "n", "payload", "sent_at", "seq", "worker")

    def __init__(self, job: Job, seq: int, first: int, items: Optional[List[Any]], n: int) -> None:
        self.job = job
        self.seq = seq
        self.first = first  # index of the first item in the job's input
        self.items = items  # kept for a retry when the job allows it
        self.n = n
        self.payload: Any = None
        self.worker = -1
        self.sent_at = 0.0
        self.in_bytes = 0  # bytes the items moved (a worker sees only the pipe's share)


class Job:
    """One function over a stream of items, run by an
    [`Engine`][easycore.common.parallel.engine.core.Engine]."""

    def __init__(
        self,
        job_id: int,
        function: Optional[bytes],
        source: Any,
        sink: JobSink,
        *,
        ordered: bool,
        lazy: bool,
        timeout: Optional[float],
        chunker: AdaptiveChunker,
        chunk_size: Optional[int],
        retry: bool,
        targets: Optional[List[int]] = None,
        window: Optional[int] = None,
        recorder: Optional[Recorder] = None,
    ) -> None:
        self.id = job_id
        self.function = function
        self.sink = sink
        #: the reorder buffer of an ordered job; None: results go out as they come
        self.order: Optional[InputOrder] = InputOrder() if ordered else None
        self.lazy = lazy
        self.timeout = timeout
        self.chunker = chunker
        self.chunk_size = chunk_size
        self.retry = retry
        self.targets = targets  # broadcast: item k runs on worker targets[k]
        self.window = window  # items taken but not yet consumed, at most
        self.recorder = recorder  # insights: reading a lazy input counts (None: off)
        self.consumed_items = 0
        self._source = source
        self._iterator: Optional[Iterator] = iter(source) if lazy else None
        # Told once, not per chunk: a read-ahead buffer is taken from, never waited on.
        self._buffered = isinstance(self._iterator, BufferedInput)
        self._next_index = 0
        self._total = None if lazy else len(source)
        self.exhausted = self._total == 0
        self._retry: Deque[Tuple[int, List[Any]]] = deque()
        self.outstanding = 0  # chunks sent or reserved, not yet received back
        self.seq = 0
        self.taken_items = 0
        self.deaths = 0
        #: nodes whose loss cost this job its workers' items (node -> DeathCause)
        self.lost_nodes: Dict[Any, DeathCause] = {}
        self.done = False
        self._finished: Optional[threading.Event] = None  # made for a thread that waits
        self.error: Optional[BaseException] = None
        self.pull_cap = chunker.max_items

    @property
    def finished(self) -> threading.Event:
        """threading.Event: set once the job is done, for threads that wait on it.

        Made on first use (an ``Event`` costs more than the rest of a small
        job's set-up); ``mark_finished`` sets it.
        """
        with _EVENT_LOCK:
            event = self._finished
            if event is None:
                event = self._finished = threading.Event()
                if self.done:
                    event.set()
        return event

    def mark_finished(self) -> None:
        """Set ``finished`` for whoever waits (``done`` is already True)."""
        with _EVENT_LOCK:
            event = self._finished
        if event is not None:
            event.set()

    # --------------------------------------------------------------- source
    def has_work(self) -> bool:
        """Whether a chunk could be taken now (ignoring credits)."""
        return bool(self._retry) or not self.exhausted

    @property
    def retrying(self) -> bool:
        """bool: items given back by a dead worker wait to run again (any thread may send them)."""
        return bool(self._retry)

    def next_target(self) -> Optional[int]:
        """The slot the next item must run on (a job with ``targets``); None: no item left."""
        assert self.targets is not None
        if self._retry:
            return self.targets[self._retry[0][0]]
        if not self.exhausted:
            return self.targets[self._next_index]
        return None

    def next_size(self) -> int:
        if self.chunk_size is not None:
            return self.chunk_size
        size = min(self.chunker.size, self.pull_cap)
        if self.timeout is not None:
            size = min(size, max(1, int(self.timeout / 4 / max(self.chunker.seconds_per_item,
                                                             1e-9))))
        return max(1, size)

    def take(self, size: int) -> Tuple[int, List[Any]]:
        """Take up to ``size`` items (not for lazy sources: see ``pull``)."""
        if self._retry:
            return self._retry.popleft()
        start = self._next_index
        if self.targets is not None:
            size = 1
        items = list(self._source[start : start + size])
        self._next_index += len(items)
        self.taken_items += len(items)
        if self._next_index >= self._total:  # type: ignore[operator]
            self.exhausted = True
        return start, items

    def pull(self, size: int, linger: float) -> Tuple[int, List[Any]]:
        """Pull up to ``size`` items from a lazy source; may block in the user's iterator."""
        if self._retry:
            return self._retry.popleft()
        assert self._iterator is not None
        start = self._next_index
        t0 = time.perf_counter()
        if self._buffered:
            # Read ahead by a thread of its own (``Pool.imap``'s): feeding never
            # waits in the user's iterator.
            buffered: BufferedInput = self._iterator  # type: ignore[assignment]
            items, ended = buffered.take(size)
        else:
            items = list(islice(self._iterator, size))
            ended = len(items) < size
        elapsed = time.perf_counter() - t0
        recorder = self.recorder
        if recorder is not None:  # insights
            recorder.reading_input += elapsed
        if elapsed > 0 and items and not self._buffered:
            # A slow input must not hold finished items back: cap the chunk at
            # what the input makes in ``linger`` seconds.
            self.pull_cap = max(1, int(linger / (elapsed / len(items))))
        if ended:
            self.exhausted = True
        self._next_index += len(items)
        self.taken_items += len(items)
        return start, items

    def requeue(self, first: int, items: List[Any]) -> None:
        self._retry.append((first, items))

    def release_input(self) -> None:
        """Drop the input: a finished job (a pool keeps the last ones it ran)
        must not keep the caller's items, or the memory they hold, alive."""
        self._source = self._iterator = None
        self._retry.clear()

    @property
    def ordered(self) -> bool:
        """bool: whether results are delivered in input order (see ``ordering``)."""
        return self.order is not None

    @property
    def total(self) -> Optional[int]:
        return self._total if self.exhausted or not self.lazy else None

    # -------------------------------------------------------------- results
    def complete(self) -> bool:
        """Whether every item was delivered."""
        return (self.exhausted and not self._retry and self.outstanding == 0
                and not self.order)
