"""Credits and dispatch: which worker gets a job's next chunk, and sending it.

A worker holds at most ``credits`` chunks (sent, or reserved while a lazy
input fills one): that bounds how far any input is read ahead, and a chunk
queued behind a slow one waits on one worker only. Free credits go to the
jobs in turn ([`dispatch`][easycore.common.parallel.engine.credits.Dispatcher.dispatch],
for inputs in memory, by whoever pumps) or to a lazy job's owner
([`feed`][easycore.common.parallel.engine.credits.Dispatcher.feed]: its
iterator may block, so only its own thread reads it). A reservation holds a
worker's place in its fifo while the chunk is taken and encoded (outside the
engine lock for a lazy input), so that the fifo is always in the order the
worker runs its chunks.

A chunk goes to the least loaded worker; among those, to the one that took
the last chunk. One call after another thus runs on one worker, whose process
is awake and looking for the next call (see [`spin`][easycore.common.parallel._os.spin]),
while a batch of chunks still spreads over every worker.

The [`Dispatcher`][easycore.common.parallel.engine.credits.Dispatcher] is one
part of the engine over its [`EngineState`][easycore.common.parallel.engine.state.EngineState];
a job that ends while it is sent is ended through the core's
[`Outcomes`][easycore.common.parallel.engine.state.Outcomes].
"""

from __future__ import annotations

import contextlib
import time

from .._os import interrupts
from ..backends.base import ChannelBroken
from ..transport.big_calls import BIG_CALL, warn_if_big_items
from ..worker.protocol import RunChunk
from ..worker.slots import MARK_INDEX, MARK_NONE, MARK_TIMES
from .job import Chunk, Job
from .ordering import may_run_ahead
from .state import RESERVED, EngineState, Outcomes, WorkerState

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, List, Optional

__all__ = ["Dispatcher", "wrap_encode_error"]


class Dispatcher:
    """Hands out the engine's credits and sends chunks (one per engine)."""

    #: seconds a lazy input may take to fill a chunk before it is sent
    linger = 0.02
    #: seconds per item above which workers write each item's index (see ``mark``)
    mark_items_above = 5e-6

    def __init__(self, state: EngineState, outcomes: Outcomes) -> None:
        """
        Args:
            state (EngineState): the engine's state.
            outcomes (Outcomes): how a job ends (the core).
        """
        self.state = state
        self.outcomes = outcomes
        self._last = 0  # the worker taken last: the first of the least loaded (see above)

    def has_credit(self) -> bool:
        """Whether some worker could take a chunk now."""
        state = self.state
        with state.lock:
            return any(self.usable(w) and len(w.fifo) < state.credits for w in state.workers)

    def feed(self, job: Job, budget: Optional[float] = None) -> bool:
        """Pull and send a lazy job's items while credits allow (owner's thread).

        Args:
            job (Job): a job made with ``lazy=True``.
            budget (float or None): stop after about this many seconds (default
                ``linger``), so that the caller gets to deliver results.

        Returns:
            bool: whether the input can still give items (False: exhausted).
        """
        state = self.state
        stop_at = time.perf_counter() + (self.linger if budget is None else budget)
        while not job.done:
            if time.perf_counter() > stop_at:
                return job.has_work()
            with state.lock:
                state.check_usable()
                if not job.has_work():
                    return False
                worker = self.reserve(job)
                if worker is None:
                    return True
                size = self.size_for(job, worker)
            try:
                # The user's iterator may block: a Ctrl-C here gives the credit back.
                first, items = job.pull(size, self.linger)
            except BaseException:
                with state.lock:
                    self.unreserve(worker, job)
                raise
            with interrupts.deferred(), state.lock:
                if not items or job.done:
                    self.unreserve(worker, job)
                    if not job.done and job.complete():
                        self.outcomes.finish(job, None)
                    if not items and not job.exhausted and not job.done:
                        return True  # a read-ahead source has nothing for now
                    continue
                self.send(job, worker, first, items)
        return False

    # ------------------------------------------------------------- credits
    def usable(self, w: WorkerState) -> bool:
        """Whether ``w`` may be given a chunk now (ready, alive, not retiring or killed)."""
        if not (w.ready and w.alive and not w.retiring and w.kill_reason is None):
            return False
        limit = self.state.maxtasksperchild
        if limit is not None:
            # Never more in flight than the worker may still run: queued
            # chunks would run past maxtasksperchild before it retires.
            queued = sum(1 if c is RESERVED else c.n for c in w.fifo)
            return w.items_done + queued < limit
        return True

    def reserve(self, job: Job) -> Optional[int]:
        """A worker with a free credit for ``job`` (credit taken), or None (lock held)."""
        state = self.state
        if state.led is not None and job is not state.led:
            return None  # a caller pumps for its own job: its thread gets no other's results
        if not may_run_ahead(job, state.reorder_bytes):
            return None
        if (job.window is not None and not job.retrying
                and job.taken_items - job.consumed_items >= job.window):
            # (Items to run again were taken already: the window does not hold
            # them back, or a full window of lost items would wait for ever.)
            return None
        if job.targets is not None:
            target = job.next_target()
            if target is None:
                return None
            w = state.workers[target]
            if self.usable(w) and len(w.fifo) < state.credits:
                job.outstanding += 1
                w.fifo.append(RESERVED)
                return w.slot
            return None
        best = None
        n = len(state.workers)
        for k in range(n):
            w = state.workers[(self._last + k) % n]
            if (self.usable(w) and len(w.fifo) < state.credits
                    and (best is None or len(w.fifo) < len(best.fifo))
                    and self.share_left(job, w) != 0):
                best = w
        if best is None:
            return None
        self._last = best.slot
        job.outstanding += 1
        best.fifo.append(RESERVED)
        return best.slot

    def share_left(self, job: Job, w: WorkerState) -> Optional[int]:
        """How many more of ``job``'s items ``w`` may hold now; None: no limit (lock held).

        While a worker's first start is not over, a ready worker holds at most
        its share of a job over a known input (``ceil(items / workers)``): the
        rest waits for the workers still starting instead of queueing behind
        the first one ready. Two long items given to a pool just made then run
        on two workers, as the standard library's do, not one after the other
        on the first (``spawn``, ``forkserver``). A worker holds more as it
        finishes what it held; a replacement's start does not count. A chunk
        of a ``chunksize`` given is never cut: the worker takes it whole while
        it holds less than its share. Meanwhile a worker that holds another
        job's chunk takes none of this job's: a short call made while a long
        one runs waits for a worker still starting (or for this one to finish),
        not behind the long one.
        """
        if not self.state.first_starts:
            return None
        if any(c is not RESERVED and c.job is not job for c in w.fifo):
            return 0
        total = job.total
        if total is None:
            return None
        held = sum(c.n for c in w.fifo if c is not RESERVED and c.job is job)
        return max(0, -(-total // len(self.state.workers)) - held)

    def size_for(self, job: Job, slot: int) -> int:
        """The next chunk's size for ``job`` on worker ``slot`` (credit reserved; lock held)."""
        size = job.next_size()
        left = self.share_left(job, self.state.workers[slot])
        if left is not None and job.chunk_size is None:  # a chunksize given is kept
            size = max(1, min(size, left))
        limit = self.state.maxtasksperchild
        if limit is not None:
            w = self.state.workers[slot]
            queued = sum(1 if c is RESERVED else c.n for c in w.fifo) - 1  # less this credit
            size = max(1, min(size, limit - w.items_done - queued))
        return size

    def unreserve(self, slot: int, job: Job) -> None:
        """Give back the credit ``reserve`` took for ``job`` on ``slot`` (lock held)."""
        w = self.state.workers[slot]
        if RESERVED in w.fifo:  # not if its worker exited meanwhile (its queue was emptied)
            w.fifo.remove(RESERVED)
        job.outstanding -= 1

    # ------------------------------------------------------------- dispatch
    def dispatch(self) -> None:
        """Hand free credits to jobs over in-memory inputs, in turn (lock held)."""
        state = self.state
        if state.closing or state.broken is not None:
            return
        active = state.active
        progress = True
        while progress and active:
            progress = False
            for job in list(active):
                if job.done or not job.has_work():
                    if job in active and (job.done or job.exhausted):
                        active.remove(job)
                    continue
                if job.lazy and not job.retrying:
                    continue  # fed by its owner's thread
                worker = self.reserve(job)
                if worker is None:
                    continue
                first, items = job.take(self.size_for(job, worker))
                if not items:
                    self.unreserve(worker, job)
                    continue
                self.send(job, worker, first, items)
                progress = True

    def send(self, job: Job, slot: int, first: int, items: List[Any]) -> None:
        """Encode and send a chunk to a worker whose credit is reserved (lock held)."""
        state = self.state
        w = state.workers[slot]
        if RESERVED not in w.fifo:
            # Its worker exited while a lazy input filled the chunk (outside
            # the lock), which cleared its queue: the items go to another.
            self.unreserve(slot, job)
            job.requeue(first, items)
            if job not in state.active:
                state.active.append(job)
            return
        if job.seq == 0 and not job.sink.claim():
            self.unreserve(slot, job)
            self.outcomes.finish(job, None)
            return
        chunk = Chunk(job, job.seq, first, items if job.retry else None, len(items))
        job.seq += 1
        function = None
        if job.id not in w.jobs:
            function = job.function
            w.jobs.add(job.id)
        forget, w.forget = tuple(w.forget), []
        transport = state.transport
        try:
            payload, chunk.in_bytes = transport.encode_items(slot, items)
        except BaseException as exc:
            # The credit goes back, whatever it was (a Ctrl-C raised from an
            # item's __reduce__, too): a credit kept for a chunk never sent
            # wedges the worker's queue.
            self.unreserve(slot, job)
            job.seq -= 1
            if not isinstance(exc, Exception):
                self.outcomes.finish(job, exc)
                raise
            self.outcomes.finish(job, wrap_encode_error(exc, state.devices[slot], slot, first))
            return
        if chunk.in_bytes > BIG_CALL:  # said once per type (and not for the pickle's sake)
            warn_if_big_items(items, first, chunk.in_bytes)
        chunk.payload = payload
        chunk.worker = slot
        chunk.sent_at = time.monotonic()
        # Replace the reserved place: the fifo is in the order the worker runs.
        idx = w.fifo.index(RESERVED)
        w.fifo[idx] = chunk
        if state.recorder is not None:
            state.recorder.chunk_sent(len(items))
            if isinstance(function, bytes):  # insights: what each worker is sent
                state.recorder.bytes[slot] += len(function)
        message = RunChunk(job.id, chunk.seq, payload, function, forget,
                           transport.feedback(slot), self.mark(job, len(items)))
        with contextlib.suppress(ChannelBroken):
            # If the worker died, its exit (soon reported) re-routes this chunk.
            state.backend.send(slot, message)

    def mark(self, job: Job, n: int) -> int:
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
