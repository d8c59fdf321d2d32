"""The engine: many jobs over one set of workers, and what happens when things fail.

This module is the engine's front (jobs in, ``pump``, results out, close);
its three other jobs each have a module of their own: ``dispatch`` (credits:
who gets the next chunk), ``ordering`` (how results are ordered) and
``supervision`` (how a dead worker is replaced, task deadlines); a job and
its sink are in ``job``.
(Over 400 lines: what is left is one job, the engine's state under one lock,
and about a third of it is the docstrings of the clients' entry points.)

Runners, ``Pool``, ``BackgroundTask`` and ``JobQueue`` are all clients of
this one engine. A client makes a [`Job`][easycore.common.parallel.engine.core.Job]
(a function sent once to each worker that needs it, a source of items, a
sink for results) and the engine does the rest:

* **Chunks and credits** (``dispatch``). Items travel in chunks sized by an
  [`AdaptiveChunker`][easycore.common.parallel.engine.chunking.AdaptiveChunker]; a
  worker holds at most ``credits`` chunks at a time, which bounds how far any
  input is read ahead. Jobs take turns for free credits.
* **Ordering** (``ordering``). An ordered job delivers chunks in input order; how far it
  runs ahead of its slowest chunk is bounded by the memory its reorder buffer
  holds (``reorder_bytes``), not by a number of chunks, so one slow item
  does not stall every worker.
* **Who runs what.** ``pump()`` reads the back-end, routes results to their
  jobs, checks task deadlines and hands out free credits. Any thread may call
  it; one does at a time. A runner's calling thread pumps itself (its consumer
  hooks run there); a pool runs a coordinator thread that pumps.
* **Failures** (``supervision``). With ``fail_fast`` (the runners) the first error (an item
  that raised, a worker that died) is raised by ``pump``. Otherwise (pools)
  an item that raises fails alone; a worker that dies fails only the item it
  was running, as its item slot says (the rest of its chunk and the
  chunks queued behind it go to other workers; work it never received costs
  nothing) and is replaced; a task past its ``timeout`` fails with
  [`TaskTimeoutError`][easycore.common.parallel.TaskTimeoutError], its worker
  is killed and replaced, and the other jobs go on. A job whose items killed
  ``max_deaths`` workers fails as a whole. A worker taken away (Ray: its node
  lost, or killed from outside) blames no item: what it held runs again.

Jobs whose input is a lazy iterator (a generator may block) are fed only by
their owner's thread (``Engine.feed``); jobs over an in-memory list are fed by
whoever pumps. A lazy source may offer ``take(n) -> (items, ended)``, which
never blocks (``Pool.imap``'s input, read ahead by a thread of its own): then
feeding never waits in the user's iterator.
"""

from __future__ import annotations

import threading
import time
import typing
from typing import Any, Callable, Dict, List, Literal, Optional

from .._os import interrupts
from ..backends.base import Backend, BackendFailed, WorkerExited
from ..errors import ErrorReport, ParallelError, RunnerClosedError, WorkerError
from ..options import check_task_timeout
from ..worker.protocol import ChunkDone, WorkerEnded, WorkerFailed, WorkerReady
from .chunking import AdaptiveChunker
from .dispatch import Dispatch, WorkerState, pop_chunk
from .job import ItemError, Job, JobSink
from .ordering import deliver
from .supervision import Supervisor

__all__ = ["Engine", "ItemError", "Job", "JobSink"]

if typing.TYPE_CHECKING:
    from ..insights import Recorder


class Engine(Dispatch):
    """Jobs over one back-end's workers; see the module docstring."""

    #: how long one pump waits at most when nothing happens
    tick = 0.25
    #: memory an ordered job may hold waiting for a late chunk (each item counts
    #: at least 64 bytes)
    reorder_bytes_default = 64 << 20

    def __init__(
        self,
        backend: Backend,
        *,
        credits: int = 3,  # noqa: A002 -- the engine's word for it, a public keyword
        fail_fast: bool = True,
        max_deaths: int = 3,
        max_node_losses: Optional[int] = 10,
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
            max_node_losses (int or None): lost nodes one job may see and carry on
                (None: any number); see ``supervision``.
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
        self._workers = [WorkerState(i) for i in range(len(backend.devices))]
        self._jobs: Dict[int, Job] = {}
        self._active: List[Job] = []  # jobs with items left to send, in turn order
        self._next_job = 0
        self._lock = threading.RLock()  # scheduling state and the transport
        self._pump_lock = threading.Lock()
        self._supervisor = Supervisor(self, fail_fast=fail_fast, max_deaths=max_deaths,
                                      max_node_losses=max_node_losses)
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
    def start(self, wait: Literal["all", "first", "none"] = "all") -> None:
        """Start the back-end.

        Args:
            wait (str): ``"all"``: return once every worker is ready (a
                runner, whose constructor raises an init hook's error);
                ``"first"``: once one is, the others get work as their
                ``WorkerReady`` comes in (a pool: its first result need not
                wait for the slowest start); ``"none"``: at once, and every
                worker takes work now, reading it after its start (a runner
                without init hooks: nothing to wait for, and its first items
                spread over every worker, as a DataLoader's do).
        """
        t0 = time.perf_counter()
        if wait == "first":
            readiness = self.backend.start_first()
        elif wait == "none":
            self.backend.start_nowait()
            readiness = [True] * len(self._workers)
        else:
            self.backend.start()
            readiness = [True] * len(self._workers)
        if self.recorder is not None:
            self.recorder.started_all(time.perf_counter() - t0)
        for w, ready in zip(self._workers, readiness):
            w.ready = ready

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
                consumed (see [`consume`][easycore.common.parallel.engine.core.Engine.consume])
                at most: how a stream that nobody reads stops.

        Returns:
            Job:
        """
        check_task_timeout(timeout)
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


    # ----------------------------------------------------------------- pump
    def pump(self, timeout: Optional[float] = None) -> None:
        """Read the back-end once, route what came, hand out credits.

        Args:
            timeout (float or None): seconds to wait for something to happen.
        """
        with self._pump_lock:
            self._supervisor.start_replacements()  # any left by a pump that raised
            deadline = self._supervisor.next_deadline()
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
            self._supervisor.start_replacements()  # outside the engine lock
            self._supervisor.check_deadlines()
            with self._lock:
                self._dispatch()
                if events and not self._jobs and not any(w.fifo for w in self._workers):
                    # (Not while a job runs: see _after_chunk.) The last results
                    # were delivered while the delivering frames still held them:
                    # only now can segments their consumer dropped count as free,
                    # and an idle runner give them back.
                    self._transport_idle()

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
            self._supervisor.on_exit(slot, message)
        elif kind is WorkerFailed:
            self._supervisor.on_worker_failed(slot, message)
        elif kind is BackendFailed:
            with self._lock:
                self._break(message.error)
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
            chunk = pop_chunk(w, msg.job, msg.seq)
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
            except Exception as exc:  # noqa: BLE001 -- the user's results (any unpickling
                # error of theirs): reported as the job's error, with its cause
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
        """Hand results to the job's sink (in input order if ordered: see
        ``ordering``) and end the job when they were its last (pump thread)."""
        deliver(job, first, results, failed, cost)
        with self._lock:
            if not job.done and job.complete():
                self._finish(job, None)

    def _after_chunk(self, w: WorkerState) -> None:
        self._supervisor.retire_if_due(w)
        if not any(x.fifo for x in self._workers):
            # Between jobs only: a job whose input is slower than its workers
            # empties the queues after every chunk, and giving its segments
            # back each time made every chunk create a new one.
            if not self._jobs:
                self._transport_idle()
            if self._on_idle is not None:
                self._on_idle()

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
                self._transport_idle()

    def _transport_idle(self) -> None:
        """Nothing in flight: the transport may give back what it keeps for speed."""
        try:  # noqa: SIM105
            self.transport.idle()
        except Exception:  # noqa: BLE001 -- best effort (shared memory it could not
            pass  # unmap, a custom transport's own error): cleanup releases it at the end

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
            # A replacement being started now must be in the back-end when it stops.
            self._supervisor.wait_for_starts()
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
                    try:  # noqa: SIM105
                        self._fail(job, RunnerClosedError("the workers were stopped"))
                    except Exception:  # noqa: BLE001 -- a sink's error: abort never raises,
                        pass  # and the other jobs and the workers must still end
        except Exception:  # noqa: BLE001 -- abort never raises: whatever failed above,
            pass  # the workers must still end
        self.backend.abort()

