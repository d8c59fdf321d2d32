"""Credits and dispatch: which worker gets a job's next chunk, and sending it.

A worker holds at most ``credits`` chunks (sent, or reserved while a lazy
input fills one): that bounds how far any input is read ahead, and a chunk
queued behind a slow one waits on one worker only. Free credits go to the
jobs in turn (``_dispatch``, for inputs in memory, by whoever pumps) or to a
lazy job's owner (``feed``: its iterator may block, so only its own thread
reads it). A reservation holds a worker's place in its fifo while the chunk
is taken and encoded (outside the engine lock for a lazy input), so that the
fifo is always in the order the worker runs its chunks.

[`Engine`][easycore.common.parallel.engine.core.Engine] inherits this half;
supervision (``supervision``) and ordering (``ordering``) are the others.
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Deque, Final, List, Optional, Tuple, Union

from .._os import interrupts
from ..backends.base import Backend, ChannelBroken
from ..worker.protocol import RunChunk
from ..worker.slots import MARK_INDEX, MARK_NONE, MARK_TIMES
from .job import Chunk, Job
from .ordering import may_run_ahead

if TYPE_CHECKING:
    from ..insights import Recorder

__all__ = ["RESERVED", "Dispatch", "WorkerState", "pop_chunk"]


class Reserved(enum.Enum):
    """A place in a worker's fifo whose credit is taken for a chunk not yet sent."""

    PLACE = 0


#: Holds a worker's credit while its chunk is taken and encoded (see ``_reserve``);
#: ``_send`` puts the chunk in its place, ``_unreserve`` gives it back.
RESERVED: Final = Reserved.PLACE


class WorkerState:
    """The engine's view of one worker slot."""

    __slots__ = (
        "alive",
        "fifo",
        "forget",
        "items_done",
        "jobs",
        "kill_reason",
        "last_at",
        "ready",
        "retiring",
        "slot",
        "start_deaths",
    )

    def __init__(self, slot: int) -> None:
        self.slot = slot
        self.ready = False
        # chunks sent (and places reserved), in the order it runs them
        self.fifo: Deque[Union[Chunk, Reserved]] = deque()
        self.jobs: set = set()  # jobs whose function it has
        self.forget: List[int] = []
        self.items_done = 0
        self.retiring = False
        self.last_at = 0.0  # when it last finished a chunk
        self.kill_reason: Optional[Tuple[str, Any]] = None
        self.alive = True
        self.start_deaths = 0  # deaths in a row before the init hooks returned


class Dispatch:
    """The engine's credits and dispatch (a mixin: ``Engine`` holds the state)."""

    #: seconds a lazy input may take to fill a chunk before it is sent
    linger = 0.02
    #: seconds per item above which workers write each item's index (see ``_mark``)
    mark_items_above = 5e-6

    backend: Backend
    transport: Any
    credits: int
    maxtasksperchild: Optional[int]
    reorder_bytes: int
    recorder: Optional[Recorder]
    _workers: List[WorkerState]
    _active: List[Job]
    _lock: Any  # the engine's RLock: scheduling state and the transport
    _rr: int
    _closing: bool
    _broken: Optional[BaseException]

    @property
    def devices(self) -> List[str]:
        return self.backend.devices

    if TYPE_CHECKING:  # the engine's own
        def _check_usable(self) -> None: ...

        def _finish(self, job: Job, error: Optional[BaseException]) -> None: ...

    def has_credit(self) -> bool:
        """Whether some worker could take a chunk now."""
        with self._lock:
            return any(self._usable(w) and len(w.fifo) < self.credits for w in self._workers)

    def feed(self, job: Job, budget: Optional[float] = None) -> bool:
        """Pull and send a lazy job's items while credits allow (owner's thread).

        Args:
            job (Job): a job made with ``lazy=True``.
            budget (float or None): stop after about this many seconds (default
                ``linger``), so that the caller gets to deliver results.

        Returns:
            bool: whether the input can still give items (False: exhausted).
        """
        stop_at = time.perf_counter() + (self.linger if budget is None else budget)
        while not job.done:
            if time.perf_counter() > stop_at:
                return job.has_work()
            with self._lock:
                self._check_usable()
                if not job.has_work():
                    return False
                worker = self._reserve(job)
                if worker is None:
                    return True
                size = self._size_for(job, worker)
            try:
                # The user's iterator may block: a Ctrl-C here gives the credit back.
                first, items = job.pull(size, self.linger)
            except BaseException:
                with self._lock:
                    self._unreserve(worker, job)
                raise
            with interrupts.deferred(), self._lock:
                if not items or job.done:
                    self._unreserve(worker, job)
                    if not job.done and job.complete():
                        self._finish(job, None)
                    if not items and not job.exhausted and not job.done:
                        return True  # a read-ahead source has nothing for now
                    continue
                self._send(job, worker, first, items)
        return False

    # ------------------------------------------------------------- dispatch
    def _usable(self, w: WorkerState) -> bool:
        if not (w.ready and w.alive and not w.retiring and w.kill_reason is None):
            return False
        if self.maxtasksperchild is not None:
            # Never more in flight than the worker may still run: queued
            # chunks would run past maxtasksperchild before it retires.
            queued = sum(1 if c is RESERVED else c.n for c in w.fifo)
            return w.items_done + queued < self.maxtasksperchild
        return True

    def _reserve(self, job: Job) -> Optional[int]:
        """A worker with a free credit for ``job`` (credit taken), or None."""
        if not may_run_ahead(job, self.reorder_bytes):
            return None
        if (job.window is not None and not job._retry
                and job.taken_items - job.consumed_items >= job.window):
            # (Items to run again were taken already: the window does not hold
            # them back, or a full window of lost items would wait for ever.)
            return None
        if job.targets is not None:
            if job._retry:
                index = job._retry[0][0]
            elif not job.exhausted:
                index = job._next_index
            else:
                return None
            w = self._workers[job.targets[index]]
            if self._usable(w) and len(w.fifo) < self.credits:
                job.outstanding += 1
                w.fifo.append(RESERVED)
                return w.slot
            return None
        best = None
        n = len(self._workers)
        for k in range(n):
            w = self._workers[(self._rr + k) % n]
            if (self._usable(w) and len(w.fifo) < self.credits
                    and (best is None or len(w.fifo) < len(best.fifo))):
                best = w
        if best is None:
            return None
        self._rr = (best.slot + 1) % n
        job.outstanding += 1
        best.fifo.append(RESERVED)
        return best.slot

    def _size_for(self, job: Job, slot: int) -> int:
        """The next chunk's size for ``job`` on worker ``slot`` (credit reserved; lock held)."""
        size = job.next_size()
        if self.maxtasksperchild is not None:
            w = self._workers[slot]
            queued = sum(1 if c is RESERVED else c.n for c in w.fifo) - 1  # less this credit
            size = max(1, min(size, self.maxtasksperchild - w.items_done - queued))
        return size

    def _unreserve(self, slot: int, job: Job) -> None:
        w = self._workers[slot]
        if RESERVED in w.fifo:  # not if its worker exited meanwhile (its queue was emptied)
            w.fifo.remove(RESERVED)
        job.outstanding -= 1

    def _dispatch(self) -> None:
        """Hand free credits to jobs over in-memory inputs, in turn (lock held)."""
        if self._closing or self._broken is not None:
            return
        progress = True
        while progress and self._active:
            progress = False
            for job in list(self._active):
                if job.done or not job.has_work():
                    if job in self._active and (job.done or job.exhausted):
                        self._active.remove(job)
                    continue
                if job.lazy and not job._retry:
                    continue  # fed by its owner's thread
                worker = self._reserve(job)
                if worker is None:
                    continue
                first, items = job.take(self._size_for(job, worker))
                if not items:
                    self._unreserve(worker, job)
                    continue
                self._send(job, worker, first, items)
                progress = True

    def _send(self, job: Job, slot: int, first: int, items: List[Any]) -> None:
        """Encode and send a chunk to a worker whose credit is reserved (lock held)."""
        w = self._workers[slot]
        if RESERVED not in w.fifo:
            # Its worker exited while a lazy input filled the chunk (outside
            # the lock), which cleared its queue: the items go to another.
            self._unreserve(slot, job)
            job.requeue(first, items)
            if job not in self._active:
                self._active.append(job)
            return
        if job.seq == 0 and not job.sink.claim():
            self._unreserve(slot, job)
            self._finish(job, None)
            return
        chunk = Chunk(job, job.seq, first, items if job.retry else None, len(items))
        job.seq += 1
        function = None
        if job.id not in w.jobs:
            function = job.function
            w.jobs.add(job.id)
        forget, w.forget = tuple(w.forget), []
        transport = self.transport
        try:
            payload, chunk.in_bytes = transport.encode_items(slot, items)
        except BaseException as exc:
            # The credit goes back, whatever it was (a Ctrl-C raised from an
            # item's __reduce__, too): a credit kept for a chunk never sent
            # wedges the worker's queue.
            self._unreserve(slot, job)
            job.seq -= 1
            if not isinstance(exc, Exception):
                self._finish(job, exc)
                raise
            self._finish(job, wrap_encode_error(exc, self.devices[slot], slot, first))
            return
        chunk.payload = payload
        chunk.worker = slot
        chunk.sent_at = time.monotonic()
        # Replace the reserved place: the fifo is in the order the worker runs.
        idx = w.fifo.index(RESERVED)
        w.fifo[idx] = chunk
        if self.recorder is not None:
            self.recorder.chunk_sent(len(items))
        message = RunChunk(job.id, chunk.seq, payload, function, forget,
                           transport.feedback(slot), self._mark(job, len(items)))
        with contextlib.suppress(ChannelBroken):
            # If the worker died, its exit (soon reported) re-routes this chunk.
            self.backend.send(slot, message)

    def _mark(self, job: Job, n: int) -> int:
        """What the worker writes per item of a chunk of ``n`` items of ``job``."""
        if job.timeout is not None:
            return MARK_TIMES
        if n > 1:
            per_item = job.chunker.seconds_per_item
            # One store per item costs ~40 ns: nothing next to an item of a
            # few microseconds, 10-20 % of the tiniest (~0.3 us). Those go
            # unmarked; a death there is traced by running the chunk again
            # one item at a time (see supervision.ReplaceWorker).
            if per_item == 0.0 or per_item >= self.mark_items_above:
                return MARK_INDEX
        return MARK_NONE


def pop_chunk(w: WorkerState, job: int, seq: int) -> Optional[Chunk]:
    """Take chunk ``seq`` of ``job`` out of ``w``'s queue (None if it is not there)."""
    for i, c in enumerate(w.fifo):
        if c is not RESERVED and c.job.id == job and c.seq == seq:
            del w.fifo[i]
            return c
    return None


def wrap_encode_error(exc: BaseException, device: str, slot: int, first: int) -> BaseException:
    """The error of items that could not be sent: the original, with where it happened."""
    where = (f"while sending items from index {first} to worker {slot} on device {device!r} "
             f"(items are pickled to reach a worker process)")
    if hasattr(exc, "add_note"):
        exc.add_note(where)
        return exc
    try:
        return type(exc)(f"{exc} ({where})")
    except Exception:  # noqa: BLE001 -- any class of the user's: its own error, unchanged
        return exc
