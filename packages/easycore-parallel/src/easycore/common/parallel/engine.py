"""The engine: many jobs over one set of workers, and what happens when things fail.

Runners, ``Pool``, ``BackgroundTask`` and ``JobQueue`` are all clients of
this one engine. A client makes a [`Job`][easycore.common.parallel.engine.Job]
(a function sent once to each worker that needs it, a source of items, a
sink for results) and the engine does the rest:

* **Chunks and credits.** Items travel in chunks sized by an
  [`AdaptiveChunker`][easycore.common.parallel.chunking.AdaptiveChunker]; a
  worker holds at most ``credits`` chunks at a time, which bounds how far any
  input is read ahead. Jobs take turns for free credits.
* **Ordering.** An ordered job delivers chunks in input order; how far it
  runs ahead of its slowest chunk is bounded by the memory its reorder buffer
  holds (``reorder_bytes``), not by a number of chunks, so one slow item
  does not stall every worker.
* **Who runs what.** ``pump()`` reads the back-end, routes results to their
  jobs, checks task deadlines and hands out free credits. Any thread may call
  it; one does at a time. A runner's calling thread pumps itself (its consumer
  hooks run there); a pool runs a coordinator thread that pumps.
* **Failures.** With ``fail_fast`` (the runners) the first error (an item
  that raised, a worker that died) is raised by ``pump``. Otherwise (pools)
  an item that raises fails alone; a worker that dies fails only the item it
  was running, as its item slot says (the rest of its chunk and the
  chunks queued behind it go to other workers; work it never received costs
  nothing) and is replaced; a task past its ``timeout`` fails with
  [`TaskTimeoutError`][easycore.common.parallel.TaskTimeoutError], its worker
  is killed and replaced, and the other jobs go on. A job whose items killed
  ``max_deaths`` workers fails as a whole.

Jobs whose input is a lazy iterator (a generator may block) are fed only by
their owner's thread (``Engine.feed``); jobs over an in-memory list are fed by
whoever pumps. A lazy source may offer ``take(n) -> (items, ended)``, which
never blocks (``Pool.imap``'s input, read ahead by a thread of its own): then
feeding never waits in the user's iterator.
"""

from __future__ import annotations

import enum
import threading
import time
import typing
from collections import deque
from itertools import islice
from typing import Any, Callable, Deque, Dict, Final, Iterator, List, Optional, Tuple, Union

from . import interrupts
from .backend import Backend, ChannelBroken, WorkerExited
from .chunking import AdaptiveChunker
from .errors import (
    ErrorReport,
    ParallelError,
    RunnerClosedError,
    TaskTimeoutError,
    WorkerError,
)
from .protocol import (
    ChunkDone,
    RunChunk,
    StopWorker,
    WorkerEnded,
    WorkerFailed,
    WorkerReady,
)
from .slots import MARK_INDEX, MARK_NONE, MARK_TIMES

__all__ = ["Engine", "Job", "JobSink", "ItemError"]

if typing.TYPE_CHECKING:
    from .insights import Recorder


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


class _Chunk:
    """A chunk in flight (caller side)."""

    __slots__ = ("job", "seq", "first", "items", "n", "payload", "worker", "sent_at", "cost",
                 "in_bytes")

    def __init__(self, job: Job, seq: int, first: int, items: Optional[List[Any]], n: int) -> None:
        self.job = job
        self.seq = seq
        self.first = first  # index of the first item in the job's input
        self.items = items  # kept for a retry when the job allows it
        self.n = n
        self.payload: Any = None
        self.worker = -1
        self.sent_at = 0.0
        self.cost = 0  # bytes counted against the job's reorder buffer
        self.in_bytes = 0  # bytes the items moved (a worker sees only the pipe's share)


class Job:
    """One function over a stream of items, run by an
    [`Engine`][easycore.common.parallel.engine.Engine]."""

    def __init__(
        self,
        engine: Engine,
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
    ) -> None:
        self.engine = engine
        self.id = job_id
        self.function = function
        self.sink = sink
        self.ordered = ordered
        self.lazy = lazy
        self.timeout = timeout
        self.chunker = chunker
        self.chunk_size = chunk_size
        self.retry = retry
        self.targets = targets  # broadcast: item k runs on worker targets[k]
        self.window = window  # items taken but not yet consumed, at most
        self.consumed_items = 0
        self._source = source
        self._iterator: Optional[Iterator] = iter(source) if lazy else None
        self._next_index = 0
        self._total = None if lazy else len(source)
        self.exhausted = self._total == 0
        self._retry: Deque[Tuple[int, List[Any]]] = deque()
        self.outstanding = 0  # chunks sent or reserved, not yet received back
        self.seq = 0
        self.delivered_items = 0
        self.taken_items = 0
        self.deaths = 0
        self.done = False
        self.finished = threading.Event()  # set with done, for threads that wait
        self.error: Optional[BaseException] = None
        self.pull_cap = chunker.max_items
        # ordered delivery, by input index (retried items come back in pieces)
        self._pending: Dict[int, Tuple[List[Any], Dict[int, ItemError], int]] = {}
        self._next_index_out = 0
        self.buffered = 0  # bytes waiting in the reorder buffer

    # --------------------------------------------------------------- source
    def has_work(self) -> bool:
        """Whether a chunk could be taken now (ignoring credits)."""
        return bool(self._retry) or not self.exhausted

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
        take = getattr(self._iterator, "take", None)
        if take is not None:
            # A source read ahead by a thread of its own (``Pool.imap``'s):
            # ``take(n)`` never blocks, so feeding never waits in the user's
            # iterator; it returns what is there and whether the input ended.
            items, ended = take(size)
        else:
            items = list(islice(self._iterator, size))
            ended = len(items) < size
        elapsed = time.perf_counter() - t0
        recorder = self.engine.recorder
        if recorder is not None:  # insights
            recorder.reading_input += elapsed
        if elapsed > 0 and items and take is None:
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

    @property
    def total(self) -> Optional[int]:
        return self._total if self.exhausted or not self.lazy else None

    # -------------------------------------------------------------- results
    def complete(self) -> bool:
        """Whether every item was delivered."""
        return self.exhausted and not self._retry and self.outstanding == 0 and not self._pending


class _Reserved(enum.Enum):
    """A place in a worker's fifo whose credit is taken for a chunk not yet sent."""

    PLACE = 0


#: Holds a worker's credit while its chunk is taken and encoded (see ``_reserve``);
#: ``_send`` puts the chunk in its place, ``_unreserve`` gives it back.
_RESERVED: Final = _Reserved.PLACE


class _Worker:
    """The engine's view of one worker slot."""

    __slots__ = ("slot", "ready", "fifo", "jobs", "forget", "items_done", "retiring", "last_at",
                 "kill_reason", "alive", "restarts", "lock", "start_deaths")

    def __init__(self, slot: int) -> None:
        self.slot = slot
        self.ready = False
        # chunks sent (and places reserved), in the order it runs them
        self.fifo: Deque[Union[_Chunk, _Reserved]] = deque()
        self.jobs: set = set()  # jobs whose function it has
        self.forget: List[int] = []
        self.items_done = 0
        self.retiring = False
        self.last_at = 0.0  # when it last finished a chunk
        self.kill_reason: Optional[Tuple[str, Any]] = None
        self.alive = True
        self.restarts = 0
        self.start_deaths = 0  # deaths in a row before the init hooks returned
        self.lock = threading.Lock()


class Engine:
    """Jobs over one back-end's workers; see the module docstring."""

    #: seconds a lazy input may take to fill a chunk before it is sent
    linger = 0.02
    #: how long one pump waits at most when nothing happens
    tick = 0.25
    #: seconds per item above which workers write each item's index (see ``_mark``)
    mark_items_above = 5e-6
    #: memory an ordered job may hold waiting for a late chunk (each item counts
    #: at least 64 bytes)
    reorder_bytes_default = 64 << 20

    def __init__(
        self,
        backend: Backend,
        *,
        credits: int = 3,
        fail_fast: bool = True,
        max_deaths: int = 3,
        maxtasksperchild: Optional[int] = None,
        reorder_bytes: Optional[int] = None,
        on_idle: Optional[Callable[[], None]] = None,
    ) -> None:
        """
        Args:
            backend (Backend): an unstarted back-end.
            credits (int): chunks a worker may hold at once.
            fail_fast (bool): raise the first error from ``pump`` (runners), or
                fail only what it touches and replace dead workers (pools).
            max_deaths (int): worker deaths one job may cause before it fails.
            maxtasksperchild (int or None): replace a worker after this many items.
            reorder_bytes (int): memory an ordered job may hold waiting for a slow chunk.
            on_idle (callable or None): called when nothing is in flight any more.
        """
        self.backend = backend
        self.transport = backend.transport
        self.credits = max(1, int(credits))
        grants = getattr(self.transport, "grants_per_worker", None)
        if isinstance(grants, int) and grants <= self.credits:
            # A worker runs up to ``credits`` chunks ahead of the grants it was
            # sent: with fewer free segments granted, every other result made
            # a new segment (page faults and all) instead of reusing one.
            self.transport.grants_per_worker = self.credits + 1
        self.fail_fast = fail_fast
        self.max_deaths = max_deaths
        self.maxtasksperchild = maxtasksperchild
        self.reorder_bytes = self.reorder_bytes_default if reorder_bytes is None else reorder_bytes
        self._workers = [_Worker(i) for i in range(len(backend.devices))]
        self._jobs: Dict[int, Job] = {}
        self._active: List[Job] = []  # jobs with items left to send, in turn order
        self._next_job = 0
        self._lock = threading.RLock()  # scheduling state and the transport
        self._pump_lock = threading.Lock()
        self._closing = False
        self._broken: Optional[BaseException] = None
        self._rr = 0
        self._on_idle = on_idle
        self._busy = [0.0] * len(backend.devices)
        #: insights: set by a client that asked for them (None: nothing is counted)
        self.recorder: Optional[Recorder] = None
        #: True when the thread that submits jobs is the one that pumps (a
        #: runner's call): no wake-up through the pipe is needed then
        self.caller_pumps = False

    # ---------------------------------------------------------------- start
    def start(self, first_only: bool = False) -> None:
        """Start the back-end; every worker is ready when this returns.

        Args:
            first_only (bool): return once one worker is ready; the others get
                work as their ``WorkerReady`` comes in (what a pool does: its
                first result need not wait for the slowest start).
        """
        t0 = time.perf_counter()
        if first_only:
            for w, ready in zip(self._workers, self.backend.start_first()):
                w.ready = ready
            if self.recorder is not None:
                self.recorder.started_all(time.perf_counter() - t0)
            return
        self.backend.start()
        if self.recorder is not None:
            self.recorder.started_all(time.perf_counter() - t0)
        for w in self._workers:
            w.ready = True

    @property
    def devices(self) -> List[str]:
        return self.backend.devices

    @property
    def broken(self) -> Optional[BaseException]:
        """The error that made the engine unusable (None while it works)."""
        return self._broken

    # ----------------------------------------------------------------- jobs
    def submit_job(
        self,
        function: Optional[bytes],
        source: Any,
        sink: JobSink,
        *,
        ordered: bool = False,
        lazy: bool = False,
        timeout: Optional[float] = None,
        chunker: Optional[AdaptiveChunker] = None,
        chunk_size: Optional[int] = None,
        retry: Optional[bool] = None,
        targets: Optional[List[int]] = None,
        window: Optional[int] = None,
    ) -> Job:
        """Create a job and start sending its chunks.

        Args:
            function (bytes or None): the job's function as the workers' program reads it.
            source (Sequence or Iterable): the items (``lazy``: any iterable,
                fed by the owner's thread through ``Engine.feed``).
            sink (JobSink): receives the results.
            ordered (bool): deliver in input order.
            lazy (bool): ``source`` is an iterator that may block.
            timeout (float or None): seconds one item may run.
            chunker (AdaptiveChunker or None): chunk sizes (a fresh one by default).
            chunk_size (int or None): a fixed chunk size instead.
            retry (bool or None): keep items so that they can run again after
                a worker death (default: not ``fail_fast``).
            targets (list[int] or None): item k runs on worker ``targets[k]``.
            window (int or None): items taken from the source but not yet
                consumed (see [`consume`][easycore.common.parallel.engine.Engine.consume])
                at most: how a stream that nobody reads stops.

        Returns:
            Job:
        """
        if timeout is not None and not (timeout > 0):
            raise ValueError(f"task_timeout must be a positive number of seconds, got {timeout!r}")
        with interrupts.deferred(), self._lock:
            # Deferred: a Ctrl-C between reserving a credit and sending the
            # chunk would keep the credit for a chunk never sent.
            self._check_usable()
            job = Job(
                self, self._next_job, function, source, sink, ordered=ordered, lazy=lazy,
                timeout=timeout, chunker=chunker or AdaptiveChunker(),
                chunk_size=chunk_size,
                retry=(not self.fail_fast) if retry is None else retry, targets=targets,
                window=window,
            )
            self._next_job += 1
            sink.job = job  # before anything is sent: results may come back at once
            self._jobs[job.id] = job
            if job.complete():
                self._finish(job, None)
                return job
            self._active.append(job)
            self._dispatch()
        if not self.caller_pumps:
            self.backend.wakeup()  # the coordinator sees the new job
        return job

    def _check_usable(self) -> None:
        if self._broken is not None:
            raise self._broken
        if self._closing:
            raise RunnerClosedError("the workers are closing or closed")

    def cancel(self, job: Job, error: Optional[BaseException] = None) -> None:
        """Stop sending ``job``'s items; results still in flight are dropped.

        Args:
            job (Job):
            error (BaseException or None): what the job ends with (None: a
                cancellation the caller asked for, no error reported).
        """
        with self._lock:
            if job.done:
                return
            self._finish(job, error)

    def cancel_unsent(self, job: Job) -> bool:
        """Cancel ``job`` if none of its items was handed to a worker yet.

        Args:
            job (Job):

        Returns:
            bool: True if the job is cancelled and none of it will run; False
            if it ended already or some of it was sent (it runs on).
        """
        with self._lock:
            if job.done or job.outstanding or job.taken_items:
                return False
            self._finish(job, None)
            return True

    def consume(self, job: Job, n: int = 1) -> None:
        """The owner consumed ``n`` of ``job``'s results: its window moves on.

        Args:
            job (Job): a job made with a ``window``.
            n (int): results consumed.
        """
        with interrupts.deferred(), self._lock:
            job.consumed_items += n
            self._dispatch()
        if not self.caller_pumps:
            self.backend.wakeup()

    def worker_seconds(self) -> List[float]:
        """Seconds each worker slot spent running chunks so far (for statistics)."""
        with self._lock:
            return list(self._busy)

    @property
    def closing(self) -> bool:
        """bool: whether a close was requested or done."""
        return self._closing

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
    def _usable(self, w: _Worker) -> bool:
        if not (w.ready and w.alive and not w.retiring and w.kill_reason is None):
            return False
        if self.maxtasksperchild is not None:
            # Never more in flight than the worker may still run: queued
            # chunks would run past maxtasksperchild before it retires.
            queued = sum(1 if c is _RESERVED else c.n for c in w.fifo)
            return w.items_done + queued < self.maxtasksperchild
        return True

    def _reserve(self, job: Job) -> Optional[int]:
        """A worker with a free credit for ``job`` (credit taken), or None."""
        if job.ordered and job.buffered > self.reorder_bytes:
            return None
        if job.window is not None and job.taken_items - job.consumed_items >= job.window:
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
                w.fifo.append(_RESERVED)
                return w.slot
            return None
        best = None
        n = len(self._workers)
        for k in range(n):
            w = self._workers[(self._rr + k) % n]
            if self._usable(w) and len(w.fifo) < self.credits:
                if best is None or len(w.fifo) < len(best.fifo):
                    best = w
        if best is None:
            return None
        self._rr = (best.slot + 1) % n
        job.outstanding += 1
        best.fifo.append(_RESERVED)
        return best.slot

    def _size_for(self, job: Job, slot: int) -> int:
        """The next chunk's size for ``job`` on worker ``slot`` (credit reserved; lock held)."""
        size = job.next_size()
        if self.maxtasksperchild is not None:
            w = self._workers[slot]
            queued = sum(1 if c is _RESERVED else c.n for c in w.fifo) - 1  # less this credit
            size = max(1, min(size, self.maxtasksperchild - w.items_done - queued))
        return size

    def _unreserve(self, slot: int, job: Job) -> None:
        w = self._workers[slot]
        try:
            w.fifo.remove(_RESERVED)
        except ValueError:
            pass
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
        if job.seq == 0 and not job.sink.claim():
            self._unreserve(slot, job)
            self._finish(job, None)
            return
        chunk = _Chunk(job, job.seq, first, items if job.retry else None, len(items))
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
            self._finish(job, _wrap_encode_error(exc, self.devices[slot], slot, first))
            return
        chunk.payload = payload
        chunk.worker = slot
        chunk.sent_at = time.monotonic()
        # Replace the reserved place: the fifo is in the order the worker runs.
        idx = w.fifo.index(_RESERVED)
        w.fifo[idx] = chunk
        if self.recorder is not None:
            self.recorder.chunk_sent(len(items))
        message = RunChunk(job.id, chunk.seq, payload, function, forget,
                           transport.feedback(slot), self._mark(job, len(items)))
        try:
            self.backend.send(slot, message)
        except ChannelBroken:
            pass  # the worker died: its exit, soon reported, re-routes this chunk

    def _mark(self, job: Job, n: int) -> int:
        """What the worker writes per item of a chunk of ``n`` items of ``job``."""
        if job.timeout is not None:
            return MARK_TIMES
        if n > 1:
            per_item = job.chunker.seconds_per_item
            # One store per item costs ~40 ns: nothing next to an item of a
            # few microseconds, 10-20 % of the tiniest (~0.3 us). Those go
            # unmarked; a death there is traced by running the chunk again
            # one item at a time (see _lost_running).
            if per_item == 0.0 or per_item >= self.mark_items_above:
                return MARK_INDEX
        return MARK_NONE

    # ----------------------------------------------------------------- pump
    def pump(self, timeout: Optional[float] = None) -> None:
        """Read the back-end once, route what came, hand out credits.

        Args:
            timeout (float or None): seconds to wait for something to happen.
        """
        with self._pump_lock:
            deadline = self._next_deadline()
            if deadline is not None:
                wait = max(0.0, deadline - time.monotonic())
                timeout = wait if timeout is None else min(timeout, wait)
            recorder = self.recorder
            if recorder is not None and recorder.caller_pumps:  # insights
                t0 = time.perf_counter()
                events = self.backend.poll(timeout)
                recorder.waiting_for_results += time.perf_counter() - t0
            else:
                events = self.backend.poll(timeout)
            for slot, message in events:
                self._handle(slot, message)
            self._check_timeouts()
            with self._lock:
                self._dispatch()
                if events and not self._jobs and not any(w.fifo for w in self._workers):
                    # (Not while a job runs: see _after_chunk.) The last results
                    # were delivered while the delivering frames still held them:
                    # only now can segments their consumer dropped count as free,
                    # and an idle runner give them back.
                    try:
                        self.transport.idle()
                    except Exception:
                        pass

    def _handle(self, slot: int, message: Any) -> None:
        feedback = getattr(message, "feedback", None)
        if feedback is not None:
            # Under the lock: another thread may be encoding items (a pool's
            # lazy input is fed by its reader), and both change segment lists.
            with self._lock:
                self.transport.on_worker_feedback(slot, feedback)
        kind = type(message)
        if kind is ChunkDone:
            self._on_chunk(slot, message)
        elif kind is WorkerExited:
            self._on_exit(slot, message)
        elif kind is WorkerFailed:
            self._on_worker_failed(slot, message)
        elif kind is WorkerReady:
            w = self._workers[slot]
            w.ready, w.alive = True, True
            if self.recorder is not None:
                self.recorder.ready(slot)
        elif kind is WorkerEnded:
            pass

    def _on_chunk(self, slot: int, msg: ChunkDone) -> None:
        w = self._workers[slot]
        with self._lock:
            chunk = _pop_chunk(w, msg.job, msg.seq)
            w.last_at = time.monotonic()
            w.items_done += msg.n_items
            self._busy[slot] += msg.seconds
            recorder = self.recorder
            if recorder is not None:  # insights: one test per chunk when off
                recorder.chunk_done(slot, msg.n_items, msg.seconds, msg.working,
                                    msg.nbytes + (chunk.in_bytes if chunk is not None else 0))
            job = chunk.job if chunk is not None else self._jobs.get(msg.job)
            # No item_payload_done here: the worker releases an input segment
            # when its last view dies (in this message's feedback, or later if
            # the function kept an input), and only then may it be reused.
            if job is None or job.done or chunk is None:
                if chunk is not None:
                    chunk.job.outstanding -= 1
                self.transport.discard(slot, msg.results)
                self._after_chunk(w)
                return
            job.outstanding -= 1
            # Items that travelled in shared memory count too, or chunks of big
            # inputs grow unbounded (every size a new segment size).
            job.chunker.observe(msg.n_items, msg.seconds, msg.nbytes + chunk.in_bytes)
            try:
                results = self.transport.decode_results(slot, msg.results)
            except Exception as exc:
                err = ParallelError(
                    f"results of worker {slot} on device {self.devices[slot]!r} could not be "
                    f"decoded in the caller: {type(exc).__name__}: {exc}"
                )
                err.__cause__ = exc
                self._fail(job, err)
                self._after_chunk(w)
                return
            failed: Dict[int, ItemError] = {}
            for failure in msg.failures:
                failed[failure.position] = ItemError(
                    self._item_error(job, slot, chunk.first + failure.position, failure.report)
                )
            if failed and self.fail_fast:
                first_bad = min(failed)
                self._fail(job, failed[first_bad].exc)
                self._after_chunk(w)
                return
            self._after_chunk(w)
        # Delivery runs the client's code: outside the lock (it may pump, or
        # take long), in this thread.
        self._deliver(job, chunk.first, results, failed, msg.nbytes + 64 * msg.n_items)

    def _item_error(self, job: Job, slot: int, index: int, report: ErrorReport) -> BaseException:
        pid = self.backend.pids[slot] if slot < len(self.backend.pids) else None
        err = WorkerError.from_report(report, self.devices[slot], slot, pid)
        err.item = index  # type: ignore[attr-defined]
        return err

    def _deliver(self, job: Job, first: int, results: List[Any],
                 failed: Dict[int, ItemError], cost: int = 0) -> None:
        """Hand results to the job's sink, in input order if ordered (pump thread)."""
        if not job.ordered:
            job.sink.deliver(first, results, failed)
            job.delivered_items += len(results)
        else:
            job._pending[first] = (results, failed, cost)
            job.buffered += cost
            while job._next_index_out in job._pending and not job.done:
                start = job._next_index_out
                res, fail, c = job._pending.pop(start)
                job.buffered -= c
                job._next_index_out = start + len(res)
                job.sink.deliver(start, res, fail)
                job.delivered_items += len(res)
        with self._lock:
            if not job.done and job.complete():
                self._finish(job, None)

    def _after_chunk(self, w: _Worker) -> None:
        if (self.maxtasksperchild is not None and w.items_done >= self.maxtasksperchild
                and not w.retiring):
            w.retiring = True
        if w.retiring and not w.fifo and w.alive and w.ready:
            w.ready = False
            try:
                self.backend.send(w.slot, StopWorker(self.transport.feedback(w.slot)))
            except ChannelBroken:
                pass
        if not any(x.fifo for x in self._workers):
            # Between jobs only: a job whose input is slower than its workers
            # empties the queues after every chunk, and giving its segments
            # back each time made every chunk create a new one.
            if not self._jobs:
                try:
                    self.transport.idle()
                except Exception:
                    pass
            if self._on_idle is not None:
                self._on_idle()

    def _on_worker_failed(self, slot: int, msg: WorkerFailed) -> None:
        device = self.devices[slot]
        pid = self.backend.pids[slot] if slot < len(self.backend.pids) else None
        err = WorkerError.from_report(msg.report, device, slot, pid)
        with self._lock:
            w = self._workers[slot]
            if msg.job is None:  # an init or end hook: the worker exits next
                if self.fail_fast or not w.ready:
                    self._break(err)
                return
            chunk = _pop_chunk(w, msg.job, msg.seq if msg.seq is not None else -1)
            job = chunk.job if chunk is not None else self._jobs.get(msg.job)
            if chunk is not None:
                chunk.job.outstanding -= 1  # its inputs: released by the worker, as above
            self._after_chunk(w)
            if job is not None and not job.done:
                self._fail(job, err)

    def _on_exit(self, slot: int, msg: WorkerExited) -> None:
        w = self._workers[slot]
        with self._lock:
            if not (w.ready or w.retiring or msg.expected or self._closing or w.fifo):
                # Died before its init hooks returned. Once may be bad luck (a
                # kill); again and again, every replacement would die the same
                # way, forever: as an init hook's error does, that ends the
                # engine (what a start that waited for it raised).
                w.start_deaths += 1
                if w.start_deaths >= self.max_deaths:
                    w.alive = False
                    self._break(self.backend.death_error(slot, msg))
                    return
            elif w.ready:
                w.start_deaths = 0
            w.alive, w.ready = False, False
            reason, w.kill_reason = w.kill_reason, None
            chunks = [c for c in w.fifo if c is not _RESERVED]
            w.fifo.clear()
            w.jobs.clear()
            w.forget.clear()
            for c in chunks:
                c.job.outstanding -= 1
                self.transport.item_payload_done(slot, c.payload)
            if self._closing:
                return
            if reason is None and (msg.expected and w.retiring):
                self._restart(w)  # maxtasksperchild: a planned replacement
                return
            if reason is not None:
                self._lost_running(w, chunks, reason, msg)
            elif msg.expected:
                return
            else:
                self._lost_running(w, chunks, ("died", None), msg)
            if self._broken is None and not self._closing:
                self._restart(w)

    def _lost_running(self, w: _Worker, chunks: List[_Chunk], reason: Tuple[str, Any],
                      msg: WorkerExited) -> None:
        """A worker is gone with ``chunks``: fail what it ran, re-route the rest (lock held)."""
        slot, device = w.slot, self.devices[w.slot]
        what, at = reason
        if self.recorder is not None:
            self.recorder.lost(slot, what == "timeout")
        if not chunks:
            if what == "died":
                self._died(w, self.backend.death_error(slot, msg))
            return
        running, queued = chunks[0], chunks[1:]
        job = running.job
        if at is None:
            # Which item was running: the worker writes its item slot when
            # it receives a chunk (item -1) and before each item.
            prog = self.backend.item_slot(slot)
            if prog is not None and prog[0] == job.id and prog[1] == running.seq:
                at = prog[2] if prog[2] >= 0 else None
                if (at is None and what == "died" and not self.fail_fast and running.n > 1
                        and running.items is not None and job.deaths + 1 < self.max_deaths):
                    # It received the chunk; which item killed it is unknown
                    # (tiny items go unmarked). The chunk runs again one item
                    # at a time, elsewhere: the guilty item then fails alone.
                    job.deaths += 1
                    for k, item in enumerate(running.items):
                        self._requeue(job, running.first + k, [item], 1)
                    for c in queued:
                        self._requeue(c.job, c.first, c.items, c.n)
                    return
            elif prog is not None and what == "died" and not self.fail_fast:
                # It never received the chunk at the head of its queue: it
                # died idle (killed from outside) and these were sent before
                # its death was seen. Nothing of them ran, no item is at
                # fault: all go to other workers, no death counts.
                for c in chunks:
                    self._requeue(c.job, c.first, c.items, c.n)
                return
        err: BaseException
        if what == "timeout":
            index = running.first + (at or 0)
            err = TaskTimeoutError(device, slot, msg.pid, index, job.timeout or 0)
            failed_items = [index]
        else:
            if at is not None:
                failed_items = [running.first + at]
            else:
                failed_items = list(range(running.first, running.first + running.n))
            err = self.backend.death_error(slot, msg, failed_items)
            job.deaths += 1
            if self.fail_fast:
                self._died(w, err)
                return
        if self.fail_fast:  # a timeout: the call fails, the runner keeps its workers
            self._fail(job, err)
            for c in queued:
                if c.job is not job:
                    self._fail(c.job, err)
            return
        # The innocent go to other workers: queued chunks, and the running
        # chunk's other items (those before ``at`` ran, but their results died
        # with the worker).
        for c in queued:
            self._requeue(c.job, c.first, c.items, c.n)
        if at is not None and running.items is not None:
            before, after = running.items[:at], running.items[at + 1 :]
            if before:
                self._requeue(job, running.first, before, len(before))
            if after:
                self._requeue(job, running.first + at + 1, after, len(after))
        if what != "timeout" and job.deaths >= self.max_deaths:
            self._fail(job, err)
            return
        if not job.done:
            failed = {k: ItemError(err) for k in range(len(failed_items))}
            if at is not None:
                self._deliver_locked(job, failed_items[0], [None], failed)
            else:
                self._deliver_locked(job, running.first, [None] * running.n, failed)

    def _deliver_locked(self, job: Job, first: int, results: List[Any],
                        failed: Dict[int, ItemError]) -> None:
        # Called with the lock held, from the pump thread: the sinks of pools
        # only store results, they do not call back into the engine.
        self._deliver(job, first, results, failed)

    def _died(self, w: _Worker, err: BaseException) -> None:
        if self.fail_fast:
            self._break(err)

    def _requeue(self, job: Job, first: int, items: Optional[List[Any]], n: int) -> None:
        if job.done:
            return
        if items is None:
            # Not kept (fail-fast jobs never get here): nothing to run again.
            self._fail(job, ParallelError(f"items {first}..{first + n - 1} were lost"))
            return
        job.requeue(first, items)
        if self.recorder is not None:
            self.recorder.retries += len(items)
        if job not in self._active:
            self._active.append(job)

    def _restart(self, w: _Worker) -> None:
        w.retiring = False
        w.items_done = 0  # the replacement's own count (maxtasksperchild)
        w.restarts += 1
        if self.recorder is not None:
            self.recorder.restarting(w.slot)
        try:
            self.backend.restart(w.slot)
            w.alive = True
        except Exception as exc:
            self._break(ParallelError(
                f"worker {w.slot} on device {self.devices[w.slot]!r} could not be restarted: "
                f"{type(exc).__name__}: {exc}"))

    # ------------------------------------------------------------- timeouts
    def _next_deadline(self) -> Optional[float]:
        best = None
        for w in self._workers:
            if not w.fifo:
                continue
            head = w.fifo[0]
            if head is _RESERVED or head.job.timeout is None:
                continue
            started = self._started(w, head)
            d = started + head.job.timeout
            best = d if best is None else min(best, d)
        return best

    def _started(self, w: _Worker, head: _Chunk) -> float:
        prog = self.backend.item_slot(w.slot)
        if _runs(prog, head):
            return prog[3]  # type: ignore[index]
        # Not started yet by the worker's own account: it starts after the
        # chunk before it came back, and not before it was sent.
        return max(head.sent_at, w.last_at)

    def _check_timeouts(self) -> None:
        now = time.monotonic()
        with self._lock:
            for w in self._workers:
                if not w.fifo or w.kill_reason is not None or not w.alive:
                    continue
                head = w.fifo[0]
                if head is _RESERVED or head.job.timeout is None or head.job.done:
                    continue
                prog = self.backend.item_slot(w.slot)
                tracked = _runs(prog, head)
                started = prog[3] if prog is not None and tracked else max(head.sent_at,
                                                                            w.last_at)
                # Untracked, the whole chunk shares the limit (chunks are small then).
                limit = head.job.timeout * (1 if tracked else max(1, head.n))
                if now - started <= limit:
                    continue
                w.kill_reason = ("timeout", prog[2] if prog is not None and tracked else None)
                try:
                    self.backend.kill(w.slot)
                except Exception:
                    pass

    # --------------------------------------------------------------- ending
    def _fail(self, job: Job, error: BaseException) -> None:
        if not job.done:
            self._finish(job, error)

    def _finish(self, job: Job, error: Optional[BaseException]) -> None:
        job.done = True
        job.error = error
        # Its inputs are the caller's: a finished job (a pool keeps the last
        # ones it ran) must not keep them, or the memory they hold, alive.
        job._source = job._iterator = None
        job._retry.clear()
        if job in self._active:
            self._active.remove(job)
        self._jobs.pop(job.id, None)
        for w in self._workers:
            if job.id in w.jobs:
                w.jobs.discard(job.id)
                w.forget.append(job.id)
        try:
            job.sink.finish(error)
        finally:
            job.finished.set()
            if not any(x.fifo for x in self._workers):
                try:
                    self.transport.idle()
                except Exception:
                    pass

    def _break(self, error: BaseException) -> None:
        """The engine cannot go on: fail every job (lock held)."""
        if self._broken is None:
            self._broken = error
        for job in list(self._jobs.values()):
            self._fail(job, error)

    def close(self, timeout: Optional[float] = None) -> None:
        """Stop the workers gracefully (their end hooks), within ``timeout`` seconds."""
        with self._lock:
            self._closing = True
            for job in list(self._jobs.values()):
                self._fail(job, RunnerClosedError("the workers were closed"))
        self.backend.stop(timeout)

    def request_close(self) -> None:
        """Make a running call end (with ``RunnerClosedError``); thread-safe."""
        self._closing = True
        self.backend.wakeup()

    def abort(self) -> None:
        """End everything now; never raises."""
        self._closing = True
        try:
            with self._lock:
                for job in list(self._jobs.values()):
                    try:
                        self._fail(job, RunnerClosedError("the workers were stopped"))
                    except Exception:
                        pass
        except Exception:
            pass
        self.backend.abort()


def _runs(prog: Optional[Tuple[int, int, int, float]], head: _Chunk) -> bool:
    """Whether an item slot says that an item of ``head`` runs (since ``prog[3]``)."""
    return (prog is not None and prog[0] == head.job.id and prog[1] == head.seq
            and prog[2] >= 0)


def _pop_chunk(w: _Worker, job: int, seq: int) -> Optional[_Chunk]:
    for i, c in enumerate(w.fifo):
        if c is not _RESERVED and c.job.id == job and c.seq == seq:
            del w.fifo[i]
            return c
    return None


def _wrap_encode_error(exc: BaseException, device: str, slot: int, first: int) -> BaseException:
    """The error of items that could not be sent: the original, with where it happened."""
    where = (f"while sending items from index {first} to worker {slot} on device {device!r} "
             f"(items are pickled to reach a worker process)")
    if hasattr(exc, "add_note"):
        exc.add_note(where)
        return exc
    try:
        return type(exc)(f"{exc} ({where})")
    except Exception:
        return exc
