"""The engine's core: jobs in, ``pump``, results out, close; how a job ends.

Runners, ``Pool``, ``BackgroundTask`` and ``JobQueue`` are all clients of
this one engine (they build it through [`start`][easycore.common.parallel.engine.door.start]).
A client makes a [`Job`][easycore.common.parallel.engine.job.Job] (a function
sent once to each worker that needs it, a source of items, a sink for
results) and the engine does the rest (see the data flow in
[`engine`][easycore.common.parallel.engine]):

* **Chunks and credits** (``credits``). Items travel in chunks sized by an
  [`AdaptiveChunker`][easycore.common.parallel.engine.chunking.AdaptiveChunker]; a
  worker holds at most ``credits`` chunks at a time, which bounds how far any
  input is read ahead. Jobs take turns for free credits.
* **Ordering** (``ordering``). An ordered job delivers chunks in input order;
  how far it runs ahead of its slowest chunk is bounded by the memory its
  reorder buffer holds (``reorder_bytes``), not by a number of chunks, so one
  slow item does not stall every worker.
* **Who runs what.** ``pump()`` reads the back-end, routes results to their
  jobs, checks task deadlines and hands out free credits. Any thread may call
  it; one does at a time. A runner's calling thread pumps itself (its consumer
  hooks run there); a pool runs a coordinator thread that pumps, and a
  blocking call whose job is the only one pumps for it itself meanwhile
  (``turns``).
* **Failures** (``supervision``), as the engine's policy says: with
  [`FailFast`][easycore.common.parallel.engine.supervision.FailFast] (the
  runners) the first error (an item that raised, a worker that died) is
  raised by ``pump``; with
  [`ReplaceWorker`][easycore.common.parallel.engine.supervision.ReplaceWorker]
  (pools) an item that raises fails alone, a worker that dies fails only the
  item it was running and is replaced, a task past its ``timeout`` fails with
  [`TaskTimeoutError`][easycore.common.parallel.TaskTimeoutError], and a job
  whose items killed ``max_deaths`` workers fails as a whole. A worker taken
  away (Ray: its node lost, or killed from outside) blames no item: what it
  held runs again (``max_node_losses`` bounds how often).

The [`Engine`][easycore.common.parallel.engine.core.Engine] holds its parts
over one [`EngineState`][easycore.common.parallel.engine.state.EngineState]:
a [`Dispatcher`][easycore.common.parallel.engine.credits.Dispatcher] and a
[`Supervisor`][easycore.common.parallel.engine.supervision.Supervisor], and it
is their [`Outcomes`][easycore.common.parallel.engine.state.Outcomes]: the one
place where a job ends and the engine breaks.

Jobs whose input is a lazy iterator (a generator may block) are fed only by
their owner's thread (``Engine.feed``); jobs over an in-memory list are fed by
whoever pumps. A lazy source that is a
[`BufferedInput`][easycore.common.parallel.engine.job.BufferedInput] is read
ahead by a thread of its own (``Pool.imap``'s input): then feeding never waits
in the user's iterator.
"""

from __future__ import annotations

import threading
import time
import weakref

from .._os import interrupts
from .._os import stacks as _stacks
from ..backends.base import Backend, BackendFailed, WorkerExited
from ..errors import ErrorReport, ParallelError, RunnerClosedError, WorkerError
from ..options import check_task_timeout
from ..worker.protocol import ChunkDone, WorkerEnded, WorkerFailed, WorkerReady
from .chunking import AdaptiveChunker
from .credits import Dispatcher
from .job import ItemError, Job, JobSink
from .ordering import deliver
from .state import RESERVED, EngineState, WorkerState, pop_chunk
from .supervision import FailFast, Policy, ReplaceWorker, Supervisor
from .turns import Turns

__all__ = ["Engine", "ItemError", "Job", "JobSink"]

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable, Dict, List, Literal, Optional

    from ..insights import Recorder


class Engine:
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
        policy: Optional[Policy] = None,
    ) -> None:
        """
        Args:
            backend (Backend): an unstarted back-end.
            credits (int): chunks a worker may hold at once.
            fail_fast (bool): without ``policy``: ``FailFast`` (raise the first
                error from ``pump``, runners), or ``ReplaceWorker`` (fail only
                what it touches and replace dead workers, pools).
            max_deaths (int): worker deaths one job may cause before it fails
                (``ReplaceWorker``).
            max_node_losses (int or None): lost nodes one job may see and carry on
                (``ReplaceWorker``; None: any number); see ``supervision``.
            maxtasksperchild (int or None): replace a worker after this many items.
            reorder_bytes (int): memory an ordered job may hold waiting for a slow chunk.
            on_idle (callable or None): called when nothing is in flight any more.
            policy (Policy or None): what a failure costs (None: as ``fail_fast`` says).
        """
        n_credits = max(1, int(credits))
        grants = getattr(backend.transport, "grants_per_worker", None)
        if isinstance(grants, int) and grants <= n_credits:
            # A worker runs up to ``credits`` chunks ahead of the grants it was
            # sent: with fewer free segments granted, every other result made
            # a new segment (page faults and all) instead of reusing one.
            backend.transport.grants_per_worker = n_credits + 1
        if policy is None:
            policy = FailFast() if fail_fast else ReplaceWorker(max_deaths, max_node_losses)
        self.state = state = EngineState(
            backend, credits=n_credits, maxtasksperchild=maxtasksperchild,
            reorder_bytes=self.reorder_bytes_default if reorder_bytes is None else reorder_bytes)
        #: the back-end whose workers run the jobs, its transport, its devices
        #: (one worker each) and the chunks a worker may hold at once
        self.backend, self.transport, self.devices = backend, backend.transport, backend.devices
        self.credits = n_credits
        self.policy = policy
        # The parts reach the engine weakly: with no cycle through them, an
        # engine nobody holds goes (and its back-end's pipes and mappings with
        # it) at once, not at a later garbage collection.
        outcomes = weakref.proxy(self)
        self.dispatcher = Dispatcher(state, outcomes)
        self.supervisor = Supervisor(state, outcomes, policy)
        self._next_job = 0
        self._pump_lock = threading.Lock()
        self._on_idle = on_idle
        #: whose turn it is to pump: a pool's coordinator, or a leading caller
        self.turns = Turns(state)
        #: True when the thread that submits jobs is the one that pumps (a
        #: runner's call): no wake-up through the pipe is needed then
        self.caller_pumps = False

    # ----------------------------------------------------- what clients read
    @property
    def linger(self) -> float:
        """float: seconds a lazy input may take to fill a chunk before it is sent."""
        return self.dispatcher.linger

    @property
    def recorder(self) -> Optional[Recorder]:
        """Recorder or None: insights, set by a client that asked for them."""
        return self.state.recorder

    @recorder.setter
    def recorder(self, recorder: Optional[Recorder]) -> None:
        self.state.recorder = recorder

    @property
    def broken(self) -> Optional[BaseException]:
        """The error that made the engine unusable (None while it works)."""
        return self.state.broken

    @property
    def closing(self) -> bool:
        """bool: whether a close was requested or done."""
        return self.state.closing

    # ---------------------------------------------------------------- start
    def start(self, wait: Literal["all", "first", "none"] = "all") -> None:
        """Start the back-end.

        Args:
            wait (str): ``"all"``: return once every worker is ready (a
                runner, whose constructor raises an init hook's error);
                ``"first"``: once one is, the others get work as their
                ``WorkerReady`` comes in (a pool: its first result need not
                wait for the slowest start); ``"none"``: as soon as the
                back-end can take work, and every worker it says can takes work
                now, reading it after its start (a runner without init hooks:
                nothing to wait for; under ``fork`` its first items spread over
                every worker, as a DataLoader's do; see ``Backend.start_nowait``).
        """
        state = self.state
        t0 = time.perf_counter()
        if wait == "first":
            readiness = state.backend.start_first()
        elif wait == "none":
            readiness = state.backend.start_nowait()
        else:
            state.backend.start()
            readiness = [True] * len(state.workers)
        if state.recorder is not None:
            state.recorder.started_all(time.perf_counter() - t0)
        state.first_starts = {w.slot for w, ready in zip(state.workers, readiness) if not ready}
        now = time.monotonic()
        for w, ready in zip(state.workers, readiness):
            w.ready, w.ready_at = ready, now
            if not ready and state.recorder is not None:
                state.recorder.restarting(w.slot)  # its start goes on until WorkerReady

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
        lead: bool = False,
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
                a worker death (default: as the policy says, ``keeps_items``).
            targets (list[int] or None): item k runs on worker ``targets[k]``.
            window (int or None): items taken from the source but not yet
                consumed (see [`consume`][easycore.common.parallel.engine.core.Engine.consume])
                at most: how a stream that nobody reads stops.
            lead (bool): the caller will wait for the job's end: it pumps for
                it (``lead``) if the job is the only one and the coordinator
                is parked; then ``state.led`` is the job (see ``turns``).

        Returns:
            Job:
        """
        check_task_timeout(timeout)
        state = self.state
        with interrupts.deferred(), state.lock:
            # Deferred: a Ctrl-C between reserving a credit and sending the
            # chunk would keep the credit for a chunk never sent.
            state.check_usable()
            job = Job(
                self._next_job, function, source, sink, ordered=ordered, lazy=lazy,
                timeout=timeout, chunker=chunker or AdaptiveChunker(),
                chunk_size=chunk_size,
                retry=self.policy.keeps_items if retry is None else retry, targets=targets,
                window=window, recorder=state.recorder,
            )
            self._next_job += 1
            sink.job = job  # before anything is sent: results may come back at once
            state.jobs[job.id] = job
            if job.complete():
                self.finish(job, None)
                return job
            state.active.append(job)
            led = lead and self.turns.claim(job)
            leader = state.led
            self.dispatcher.dispatch()
            # The coordinator must see a new job whose chunks it will send, or
            # time: not one whose first chunk is out without a deadline (its
            # result, or its worker's exit, wakes the coordinator, which then
            # sends the rest). Waking it for nothing costs a kept-alive call a
            # thread switch. A leading caller must see another's job at once:
            # it stops leading, and the coordinator sends it.
            wake = not led and (job.timeout is not None or job.seq == 0 or leader is not None)
            unpark = not led and leader is None and self.turns.parked
        if wake and not self.caller_pumps:
            state.backend.wakeup()
        if unpark:
            self.turns.unpark()
        return job

    def lead(self, job: Job, ready: Callable[[], bool]) -> None:
        """Pump for ``job`` until ``ready()``: the blocking call ``submit_job`` let lead.

        Stops early (the coordinator then pumps, and the caller waits as any
        other) when another job is submitted, or on a close or a break. Ctrl-C
        is held during one pump (``interrupts.SLICE`` seconds at most), then
        raised; the coordinator gets its turn back whatever ends the lead.

        Args:
            job (Job): the job, ``state.led``.
            ready (callable): whether the caller's result is there.
        """
        state, turns = self.state, self.turns
        recorder = state.recorder
        t0 = time.perf_counter()
        try:
            while not ready():
                with state.lock:  # (only end_lead, on the way out, clears state.led)
                    if turns.foreign(job) or state.closing or state.broken is not None:
                        return
                with interrupts.deferred():
                    self.pump(interrupts.SLICE, waiting=True)
        finally:
            if recorder is not None:  # insights: the caller waited for its result
                recorder.waiting_for_results += time.perf_counter() - t0
            self.end_lead(job)

    def end_lead(self, job: Job) -> None:
        """Give the pump back after leading ``job``, and send what waited; nothing if
        ``job`` is not led (so any way out of a blocking call may call it)."""
        state = self.state
        if state.led is not job:  # (only the caller of job's lead sets it to job)
            return
        with state.lock:
            if state.led is job:
                self.turns.leave(job)
                self.dispatcher.dispatch()

    def feed(self, job: Job, budget: Optional[float] = None) -> bool:
        """Pull and send a lazy job's items while credits allow (owner's thread);
        see [`Dispatcher.feed`][easycore.common.parallel.engine.credits.Dispatcher.feed].

        Returns:
            bool: whether the input can still give items (False: exhausted).
        """
        return self.dispatcher.feed(job, budget)

    def has_credit(self) -> bool:
        """Whether some worker could take a chunk now."""
        return self.dispatcher.has_credit()

    def cancel(self, job: Job, error: Optional[BaseException] = None) -> None:
        """Stop sending ``job``'s items; results still in flight are dropped.

        Args:
            job (Job):
            error (BaseException or None): what the job ends with (None: a
                cancellation the caller asked for, no error reported).
        """
        with self.state.lock:
            if job.done:
                return
            self.finish(job, error)

    def cancel_unsent(self, job: Job) -> bool:
        """Cancel ``job`` if none of its items was handed to a worker yet.

        Args:
            job (Job):

        Returns:
            bool: True if the job is cancelled and none of it will run; False
            if it ended already or some of it was sent (it runs on).
        """
        with self.state.lock:
            if job.done or job.outstanding or job.taken_items:
                return False
            self.finish(job, None)
            return True

    def consume(self, job: Job, n: int = 1) -> None:
        """The owner consumed ``n`` of ``job``'s results: its window moves on.

        Args:
            job (Job): a job made with a ``window``.
            n (int): results consumed.
        """
        with interrupts.deferred(), self.state.lock:
            job.consumed_items += n
            self.dispatcher.dispatch()
        if not self.caller_pumps:
            self.state.backend.wakeup()

    def worker_seconds(self) -> List[float]:
        """Seconds each worker slot spent running chunks so far (for statistics)."""
        with self.state.lock:
            return list(self.state.busy)

    # ----------------------------------------------------------------- pump
    def pump(self, timeout: Optional[float] = None, waiting: bool = False) -> None:
        """Read the back-end once, route what came, hand out credits.

        Args:
            timeout (float or None): seconds to wait for something to happen.
            waiting (bool): the pumping thread waits for a result itself (a
                runner's caller, a pool's leading call): it spins a moment
                first while one chunk is out (``_os.spin``).
        """
        state, supervisor = self.state, self.supervisor
        with self._pump_lock:
            supervisor.start_replacements()  # any left by a pump that raised
            deadline = supervisor.next_deadline()
            if deadline is not None:
                wait = max(0.0, deadline - time.monotonic())
                timeout = wait if timeout is None else min(timeout, wait)
            # A caller waiting for one call's answer spins for a moment before
            # it sleeps (``_os.spin``); not while a stream's chunks run, whose
            # workers need the CPU, nor a pool's coordinator (see there).
            state.backend.spin_in_poll = ((self.caller_pumps or waiting)
                                          and state.one_chunk_in_flight())
            recorder = state.recorder
            if recorder is not None and recorder.caller_pumps:  # insights
                t0 = time.perf_counter()
                events = state.backend.poll(timeout)
                recorder.waiting_for_results += time.perf_counter() - t0
            else:
                events = state.backend.poll(timeout)
            for slot, message in events:
                self._handle(slot, message)
            supervisor.start_replacements()  # outside the engine lock
            supervisor.check_deadlines()
            with state.lock:
                self.dispatcher.dispatch()
                if events and not state.jobs and not state.in_flight():
                    # (Not while a job runs: see after_chunk.) The last results
                    # were delivered while the delivering frames still held them:
                    # only now can segments their consumer dropped count as free,
                    # and an idle runner give them back.
                    self._transport_idle()

    def pump_until(self, stop: threading.Event) -> None:
        """Pump until ``stop`` is set: a client's coordinator thread (a pool's).

        Args:
            stop (threading.Event): set when the client stops.
        """
        while not stop.is_set():
            self.turns.park(stop)  # while a blocking call pumps for itself
            if stop.is_set():
                break
            try:
                self.pump(None)
            except BaseException:  # noqa: BLE001  # pragma: no cover - a bug; keep serving other jobs
                import traceback

                traceback.print_exc()

    def _handle(self, slot: int, message: Any) -> None:
        state = self.state
        feedback = getattr(message, "feedback", None)
        if feedback is not None:
            # Under the lock: another thread may be encoding items (a pool's
            # lazy input is fed by its reader), and both change segment lists.
            with state.lock:
                state.transport.on_worker_feedback(slot, feedback)
        kind = type(message)
        if kind is ChunkDone:
            self._on_chunk(slot, message)
        elif kind is WorkerExited:
            state.first_starts.discard(slot)  # a replacement's start is not a first one
            self.supervisor.on_exit(slot, message)
        elif kind is WorkerFailed:
            self.supervisor.on_worker_failed(slot, message)
        elif kind is BackendFailed:
            with state.lock:
                self.break_engine(message.error)
        elif kind is WorkerReady:
            w = state.workers[slot]
            w.ready, w.alive, w.ready_at = True, True, time.monotonic()
            state.first_starts.discard(slot)
            if state.recorder is not None:
                state.recorder.ready(slot)
        elif kind is WorkerEnded:
            pass

    def _fail_decode(self, job: Job, w: WorkerState, slot: int, exc: BaseException) -> None:
        """The job fails with why a chunk's results could not be decoded (lock held)."""
        err = ParallelError(
            f"results of worker {slot} on device {self.state.devices[slot]!r} could not be "
            f"decoded in the caller: {type(exc).__name__}: {exc}"
        )
        err.__cause__ = exc
        self.fail(job, err)
        self.after_chunk(w)

    def _on_chunk(self, slot: int, msg: ChunkDone) -> None:
        state = self.state
        w = state.workers[slot]
        with state.lock:
            chunk = pop_chunk(w, msg.job, msg.seq)
            w.last_at = time.monotonic()
            w.items_done += msg.n_items
            state.busy[slot] += msg.seconds
            recorder = state.recorder
            if recorder is not None:  # insights: one test per chunk when off
                recorder.chunk_done(slot, msg.n_items, msg.seconds, msg.working,
                                    msg.nbytes + (chunk.in_bytes if chunk is not None else 0))
            if recorder is not None or state.max_worker_memory is not None:
                self.supervisor.check_memory(w)  # before after_chunk: it may retire it
            job = chunk.job if chunk is not None else state.jobs.get(msg.job)
            # No item_payload_done here: the worker releases an input segment
            # when its last view dies (in this message's feedback, or later if
            # the function kept an input), and only then may it be reused.
            if job is None or job.done or chunk is None:
                if chunk is not None:
                    chunk.job.outstanding -= 1
                state.transport.discard(slot, msg.results)
                self.after_chunk(w)
                return
            job.outstanding -= 1
            # Items that travelled in shared memory count too, or chunks of big
            # inputs grow unbounded (every size a new segment size).
            job.chunker.observe(msg.n_items, msg.seconds, msg.nbytes + chunk.in_bytes)
            try:
                results = state.transport.decode_results(slot, msg.results)
            except KeyboardInterrupt:
                # A Ctrl-C (main thread: a runner's caller) is the user's, not the
                # results' fault; elsewhere, or where a Ctrl-C is held (a pool's
                # leading call), it came from unpickling, as below.
                if (threading.current_thread() is threading.main_thread()
                        and not interrupts.held()):
                    raise
                self._fail_decode(job, w, slot, KeyboardInterrupt())
                return
            except BaseException as exc:  # noqa: BLE001 -- the user's results (any unpickling
                # error of theirs, SystemExit too: raised here it would stop the
                # pumping thread and hang the job): the job's error, with its cause
                self._fail_decode(job, w, slot, exc)
                return
            failed: Dict[int, ItemError] = {}
            for failure in msg.failures:
                failed[failure.position] = ItemError(
                    self._item_error(slot, chunk.first + failure.position, failure.report)
                )
            if failed:
                ends = self.policy.chunk_failed(job, failed)
                if ends is not None:
                    self.fail(job, ends)
                    self.after_chunk(w)
                    return
            self.after_chunk(w)
        # Delivery runs the client's code: outside the lock (it may pump, or
        # take long), in this thread.
        self.deliver(job, chunk.first, results, failed, msg.nbytes + 64 * msg.n_items)

    def _item_error(self, slot: int, index: int, report: ErrorReport) -> BaseException:
        state = self.state
        err = WorkerError.from_report(report, state.devices[slot], slot, state.pid(slot))
        err.item = index  # type: ignore[attr-defined]
        return err

    # ------------------------------------------- outcomes (see state.Outcomes)
    def deliver(self, job: Job, first: int, results: List[Any],
                failed: Dict[int, ItemError], cost: int = 0) -> None:
        """Hand results to the job's sink (in input order if ordered: see
        ``ordering``) and end the job when they were its last (pump thread)."""
        deliver(job, first, results, failed, cost)
        with self.state.lock:
            if not job.done and job.complete():
                self.finish(job, None)

    def after_chunk(self, w: WorkerState) -> None:
        """A chunk of ``w`` came back: retire it if due; go idle if nothing runs (lock held)."""
        state = self.state
        self.supervisor.retire_if_due(w)
        if not state.in_flight():
            # Between jobs only: a job whose input is slower than its workers
            # empties the queues after every chunk, and giving its segments
            # back each time made every chunk create a new one.
            if not state.jobs:
                self._transport_idle()
            if self._on_idle is not None:
                self._on_idle()

    def fail(self, job: Job, error: BaseException) -> None:
        """End ``job`` with ``error`` unless it ended already (lock held)."""
        if not job.done:
            self.finish(job, error)

    def finish(self, job: Job, error: Optional[BaseException]) -> None:
        """End ``job``: its sink is told, its input dropped, the workers forget it (lock held)."""
        state = self.state
        job.done = True
        job.error = error
        job.release_input()
        if job in state.active:
            state.active.remove(job)
        state.jobs.pop(job.id, None)
        for w in state.workers:
            if job.id in w.jobs:
                w.jobs.discard(job.id)
                w.forget.append(job.id)
        try:
            job.sink.finish(error)
        finally:
            job.mark_finished()
            if not state.in_flight():
                self._transport_idle()

    def break_engine(self, error: BaseException) -> None:
        """The engine cannot go on: fail every job (lock held)."""
        state = self.state
        if state.broken is None:
            state.broken = error
        for job in list(state.jobs.values()):
            self.fail(job, error)

    def _transport_idle(self) -> None:
        """Nothing in flight: the transport may give back what it keeps for speed."""
        try:  # noqa: SIM105
            self.state.transport.idle()
        except Exception:  # noqa: BLE001 -- best effort (shared memory it could not
            pass  # unmap, a custom transport's own error): cleanup releases it at the end

    # ---------------------------------------------------------------- close
    def close(self, timeout: Optional[float] = None) -> None:
        """Stop the workers gracefully (their end hooks), within ``timeout`` seconds."""
        state = self.state
        with state.lock:
            state.closing = True
            for job in list(state.jobs.values()):
                self.fail(job, RunnerClosedError("the workers were closed"))
            # A replacement being started now must be in the back-end when it stops.
            self.supervisor.wait_for_starts()
        state.backend.stop(timeout)

    def request_close(self) -> None:
        """Make a running call end (with ``RunnerClosedError``); thread-safe."""
        self.state.closing = True
        self.state.backend.wakeup()

    def abort(self, where: bool = False) -> Dict[int, Any]:
        """End everything now; never raises.

        Args:
            where (bool): first read where the busy workers are (every one at
                once, ``abort_stack_timeout`` seconds at most): the jobs'
                ``RunnerClosedError`` says it, and it is returned.

        Returns:
            dict: ``{worker: Stack}`` of the busy workers read (empty without ``where``).
        """
        state = self.state
        state.closing = True
        found: Dict[int, Any] = {}
        if where:
            found = self._busy_stacks()
        message = "the workers were stopped"
        if found and _stacks.summary(found):
            message += f"; {_stacks.summary(found)}"
        try:
            with state.lock:
                for job in list(state.jobs.values()):
                    try:  # noqa: SIM105
                        self.fail(job, RunnerClosedError(message))
                    except Exception:  # noqa: BLE001 -- a sink's error: abort never raises,
                        pass  # and the other jobs and the workers must still end
        except Exception:  # noqa: BLE001 -- abort never raises: whatever failed above,
            pass  # the workers must still end
        state.backend.abort()
        return found

    #: seconds ``abort(where=True)`` waits for the busy workers' stacks (a Ctrl-C
    #: must stay prompt)
    abort_stack_timeout = 0.5

    def _busy_stacks(self) -> Dict[int, Any]:
        state = self.state
        try:
            with state.lock:
                busy = [w.slot for w in state.workers
                        if w.alive and any(c is not RESERVED for c in w.fifo)]
            if not busy:
                return {}
            found = state.backend.stacks(busy, self.abort_stack_timeout)
        except Exception:  # noqa: BLE001 -- abort never raises: no stacks then
            return {}
        return {w: s for w, s in found.items() if s is not None}
