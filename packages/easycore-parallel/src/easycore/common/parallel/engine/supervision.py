"""How a dead worker is replaced: deaths, what they cost, restarts and task deadlines.

The [`Engine`][easycore.common.parallel.engine.core.Engine] hands every worker
exit its back-end reports (``WorkerExited``), every hook failure
(``WorkerFailed``) and every pump's deadline check to one
[`Supervisor`][easycore.common.parallel.engine.supervision.Supervisor], a part
of the engine over its [`EngineState`][easycore.common.parallel.engine.state.EngineState]
that ends jobs only through the core's
[`Outcomes`][easycore.common.parallel.engine.state.Outcomes]. Its path:

1. **The exit is taken in** (``on_exit``, engine lock held): the worker's
   queue is taken back (its chunks, its credits, the functions it had) and
   the kill reason, if the engine killed it, is read. A slot whose worker
   dies before it finished its first chunk, with nothing it received at
   fault (before its init hooks returned, or within ``start_grace`` seconds
   after it said it was ready), ``start_deaths_limit`` times in a row ends
   the engine: every replacement would die the same way, and a pool would
   replace them for ever. A worker that lived idle longer than that is
   replaced whatever ended it, without counting. (Not
   ``max_deaths``: that is what one *job* may cost, and no job ran in a
   worker that never started; one such death may be a kill from outside.)
2. **What it ran is settled by a policy.** Which item was running is read
   from the worker's item slot (it writes ``(job, seq, item, started)``
   as it receives a chunk and before each item), unless the kill reason says.
   A worker *taken away* (``taken_away``: its back-end says its node was
   lost or it was killed from outside, as Ray does) blames no item and is no
   failed start: that is decided there and nowhere else. Then one of two
   strategies decides:

   * [`FailFast`][easycore.common.parallel.engine.supervision.FailFast] (runners):
     a death ends the call (the engine breaks, naming the item); a task past
     its deadline fails its job, and the runner keeps its workers.
   * [`ReplaceWorker`][easycore.common.parallel.engine.supervision.ReplaceWorker]
     (pools): only the running item fails; the rest of its chunk and the
     chunks queued behind it are requeued for other workers (work the worker
     never received costs nothing). A job whose items killed ``max_deaths``
     workers fails as a whole. A worker taken away fails nothing: all it held
     runs again (at least once: items may have run before the loss), and each
     job it held counts the node; one node more than ``max_node_losses`` fails
     the job with [`NodesLostError`][easycore.common.parallel.NodesLostError].
     (Runners still fail fast, with an error that names the lost node.)

   The policy also says what an item that *raised* costs (``chunk_failed``:
   its job, or that item alone) and whether a job keeps its items for a
   retry (``keeps_items``).
3. **The worker is replaced**, unless the engine broke or closes, and after a
   planned exit too (``maxtasksperchild``): the slot is queued for a restart
   under the lock, and the pumping thread starts the replacement *outside*
   the engine lock (``start_replacements``), so a thread feeding a lazy input
   is not held up by a start that may take seconds (``spawn``). The
   transport forgets what the dead worker held first. ``close`` waits for
   starts in flight, so that the back-end's stop sees every worker.
4. **Deadlines** (``task_timeout``): ``next_deadline`` tells the pump how
   long it may wait; ``check_deadlines`` kills a worker whose running item is
   past its job's timeout, with the kill reason ``("timeout", item)``, and
   step 1 takes it from there once its exit is reported. Before the kill,
   outside the engine lock, the worker's stack is read (``Backend.stacks``,
   every overdue worker at once, ``stack_timeout`` seconds at most): its
   ``TaskTimeoutError`` says where it was.

Back-ends only start, kill and restart one worker; what a death means is
decided here.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque

from .. import logs
from .._os.memory import format_bytes
from ..backends.base import ChannelBroken, WorkerExited
from ..errors import NodesLostError, ParallelError, TaskTimeoutError, WorkerError
from ..worker.protocol import StopWorker, WorkerFailed
from .job import Chunk, ItemError, Job
from .state import EngineState, Outcomes, WorkerState, pop_chunk

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Deque, Dict, List, Optional, Tuple

__all__ = ["FailFast", "Policy", "ReplaceWorker", "Supervisor", "taken_away"]



class Policy:
    """What a failure costs: an item that raised, a worker that died or overran (lock held)."""

    #: jobs keep a chunk's items until its results came back, to run them again
    #: after a worker death
    keeps_items: bool = False

    def chunk_failed(self, job: Job, failed: Dict[int, ItemError]) -> Optional[BaseException]:
        """Items of a chunk of ``job`` raised (``failed``: position -> error).

        Returns:
            BaseException or None: the error that ends ``job`` now, or None:
            the chunk's results go to its sink with those items failed.
        """
        raise NotImplementedError

    def lost(self, sup: Supervisor, w: WorkerState, chunks: List[Chunk], what: str,
             at: Optional[int], msg: WorkerExited) -> None:
        """``w`` is gone with ``chunks`` (the first one running).

        Args:
            sup (Supervisor): the supervisor (what was received, the errors, requeues).
            w (WorkerState): the slot.
            chunks (list): its chunks, in the order it ran them.
            what (str): "died", "lost" (taken away: see ``taken_away``), or
                "timeout" (the engine killed it).
            at (int or None): position in ``chunks[0]`` of the item running, if known.
            msg (WorkerExited): what the back-end reported.
        """
        raise NotImplementedError

    def hook_failed(self, sup: Supervisor, w: WorkerState, err: BaseException) -> None:
        """An init or end hook of ``w`` raised (its exit comes next)."""
        raise NotImplementedError


class Supervisor:
    """Worker exits, hook failures, restarts and task deadlines of one engine."""

    #: deaths in a row of one slot's worker before it finished a chunk (none
    #: an item's fault) that end the engine (its start is what kills it);
    #: fewer are replaced
    start_deaths_limit = 3
    #: seconds after its ``WorkerReady`` within which a worker's death (nothing
    #: it received at fault) is still a failed start; later, it is replaced
    #: without counting (a crash loop past it replaces once per this at most)
    start_grace = 1.0
    #: seconds to wait for the stacks of workers about to be killed
    stack_timeout = 1.0
    #: seconds between two readings of a worker's memory for insights (its USS
    #: takes milliseconds to read)
    memory_interval = 0.5

    def __init__(self, state: EngineState, outcomes: Outcomes, policy: Policy) -> None:
        """
        Args:
            state (EngineState): the engine's state.
            outcomes (Outcomes): how a job ends (the core).
            policy (Policy): what a failure costs: ``FailFast`` (runners) or
                ``ReplaceWorker`` (pools).
        """
        self.state = state
        self.outcomes = outcomes
        self.policy = policy
        self._replace: Deque[WorkerState] = deque()  # slots to restart, outside the lock
        self._starting = 0  # replacements being started now
        self._started = threading.Condition(state.lock)

    # ----------------------------------------------------------------- exits
    def on_exit(self, slot: int, msg: WorkerExited) -> None:
        """``slot``'s worker is gone: settle what it ran, plan its replacement."""
        state = self.state
        w = state.workers[slot]
        lost = taken_away(msg)
        with state.lock:
            if w.items_done:
                w.start_deaths = 0  # it finished a chunk: its start was no failed one
            elif (not (w.retiring or msg.expected or state.closing or lost)
                    and not self._blames_an_item(w) and not self._outlived_start(w)):
                # Died before it finished anything, and nothing it received
                # is at fault: before its init hooks returned, or right after
                # it said it was ready (a start that broke what the worker
                # needs, its task pipe say). Once may be bad luck (a kill);
                # again and again, every replacement would die the same way,
                # forever: as an init hook's error does, that ends the engine
                # (what a start that waited for it raised). A worker that
                # lived idle past its start and was then killed (from outside:
                # a user's kill, a scheduler) is no failed start: it is
                # replaced, however often, as a stdlib pool's would be.
                w.start_deaths += 1
                if w.start_deaths >= self.start_deaths_limit:
                    w.alive = False
                    self.outcomes.break_engine(self.death_error(w, msg))
                    return
            chunks, reason = self._take_back(w)
            if state.closing:
                return
            if reason is None and msg.expected:
                if w.retiring:
                    logs.logger.info("worker %d on device %r (pid %s) retired (%s); starting a "
                                "replacement", slot, state.devices[slot], msg.pid,
                                w.retired_for)
                    self._plan_restart(w)  # maxtasksperchild: a planned replacement
                return
            what, at = reason if reason is not None else ("lost" if lost else "died", None)
            if state.recorder is not None:
                state.recorder.lost(slot, what == "timeout")
            self.policy.lost(self, w, chunks, what, at, msg)
            replaced = state.broken is None
            if replaced:
                self._plan_restart(w)
            _log_loss(state.devices[slot], slot, msg, what, replaced)

    def _outlived_start(self, w: WorkerState) -> bool:
        """Whether ``w`` said it was ready ``start_grace`` seconds or more ago (lock held)."""
        return w.ready and time.monotonic() - w.ready_at >= self.start_grace

    def _blames_an_item(self, w: WorkerState) -> bool:
        """Whether ``w``'s death may be the fault of a chunk it holds: the engine
        killed it (a timeout), or it received the chunk at the head of its queue
        (or its back-end cannot tell). Lock held."""
        head = next((c for c in w.fifo if isinstance(c, Chunk)), None)
        if head is None:
            return False
        return w.kill_reason is not None or self.received(w, head)[0] is not False

    def _take_back(self, w: WorkerState) -> Tuple[List[Chunk], Optional[Tuple[str, Any]]]:
        """Empty a gone worker's queue: its chunks (in the order it ran them) and
        why it was killed (None: it was not)."""
        w.alive, w.ready = False, False
        reason, w.kill_reason = w.kill_reason, None
        if reason is None:
            w.kill_stack = None
        chunks = [c for c in w.fifo if isinstance(c, Chunk)]  # not the places reserved
        w.fifo.clear()
        w.jobs.clear()
        w.forget.clear()
        for c in chunks:
            c.job.outstanding -= 1
            self.state.transport.item_payload_done(w.slot, c.payload)
        return chunks, reason

    def on_worker_failed(self, slot: int, msg: WorkerFailed) -> None:
        """A hook raised in ``slot``'s worker (not an item: those come with their chunk)."""
        state = self.state
        err = WorkerError.from_report(msg.report, state.devices[slot], slot, state.pid(slot))
        with state.lock:
            w = state.workers[slot]
            if msg.job is None:  # an init or end hook: the worker exits next
                self.policy.hook_failed(self, w, err)
                return
            chunk = pop_chunk(w, msg.job, msg.seq if msg.seq is not None else -1)
            job = chunk.job if chunk is not None else state.jobs.get(msg.job)
            if chunk is not None:
                chunk.job.outstanding -= 1  # its inputs: released by the worker
            self.outcomes.after_chunk(w)
            if job is not None:
                self.outcomes.fail(job, err)

    # ------------------------------------------------------- what was lost
    def received(self, w: WorkerState, chunk: Chunk) -> Tuple[Optional[bool], Optional[int]]:
        """Whether ``w`` received ``chunk``, by its item slot, and which item of it ran.

        Returns:
            tuple: (True, item or None if unmarked), (False, None) if its slot
            names another chunk, (None, None) if the back-end cannot tell.
        """
        prog = self.state.backend.item_slot(w.slot)
        if prog is None:
            return None, None
        if prog[0] == chunk.job.id and prog[1] == chunk.seq:
            return True, (prog[2] if prog[2] >= 0 else None)
        return False, None

    def death_error(self, w: WorkerState, msg: WorkerExited,
                    items: Optional[List[int]] = None) -> BaseException:
        """The error that says ``w``'s worker died (the back-end words it)."""
        return self.state.backend.death_error(w.slot, msg, items)

    def timeout_error(self, w: WorkerState, msg: WorkerExited, index: int,
                      job: Job) -> TaskTimeoutError:
        """The error of item ``index`` of ``job``, which overran its timeout on ``w``."""
        stack, w.kill_stack = w.kill_stack, None
        return TaskTimeoutError(self.state.devices[w.slot], w.slot, msg.pid, index,
                                job.timeout or 0, stack)

    def requeue(self, job: Job, first: int, items: Optional[List[Any]], n: int) -> None:
        """Items a dead worker did not finish go back to their job, for other workers."""
        state = self.state
        if job.done:
            return
        if items is None:
            # Not kept (fail-fast jobs never get here): nothing to run again.
            self.outcomes.fail(job, ParallelError(f"items {first}..{first + n - 1} were lost"))
            return
        job.requeue(first, items)
        if state.recorder is not None:
            state.recorder.retries += len(items)
        if job not in state.active:
            state.active.append(job)

    # -------------------------------------------------------------- restarts
    def retire_if_due(self, w: WorkerState) -> None:
        """``maxtasksperchild``: stop a worker that ran its share once its queue is empty
        (its exit, expected, then plans its replacement)."""
        state = self.state
        limit = state.maxtasksperchild
        if limit is not None and w.items_done >= limit and not w.retiring:
            w.retiring = True
        if w.retiring and not w.fifo and w.alive and w.ready:
            w.ready = False
            with contextlib.suppress(ChannelBroken):  # gone already: its exit is reported
                state.backend.send(w.slot, StopWorker(state.transport.feedback(w.slot)))

    def check_memory(self, w: WorkerState) -> None:
        """A chunk of ``w`` came back (lock held): insights read its memory now and
        then; past ``max_worker_memory`` it is retired, and replaced before it
        runs another item (it holds one chunk at a time then: see ``door.start``)."""
        state = self.state
        recorder, limit = state.recorder, state.max_worker_memory
        if recorder is not None:
            now = time.monotonic()
            if now >= w.memory_at:
                w.memory_at = now + self.memory_interval
                reading = state.backend.memory(w.slot, unique=True)
                if reading is not None:
                    recorder.memory(w.slot, reading.peak_rss, reading.uss)
        if limit is None or w.retiring:
            return
        rss = state.backend.resident(w.slot)
        if rss is None or rss <= limit:
            return
        w.retiring = True  # retire_if_due stops it once its chunk is back (now)
        w.retired_for = "max_worker_memory"
        if recorder is not None:
            recorder.memory_replaced(w.slot, rss)
        logs.logger.warning(
            "worker %d (pid %s, device %r) holds %s of resident memory, over "
            "max_worker_memory=%s: it is replaced before its next item",
            w.slot, state.pid(w.slot), state.devices[w.slot], format_bytes(rss),
            format_bytes(limit))

    def _plan_restart(self, w: WorkerState) -> None:
        """Queue ``w``'s slot for a fresh worker (lock held; see ``start_replacements``)."""
        w.retiring, w.retired_for = False, "maxtasksperchild"
        w.items_done = 0  # the replacement's own count (maxtasksperchild)
        if self.state.recorder is not None:
            self.state.recorder.restarting(w.slot)
        self._replace.append(w)

    def start_replacements(self) -> None:
        """Start the planned replacements (pumping thread, engine lock NOT held).

        A start may take seconds (``spawn`` imports the program anew): other
        threads feed and submit meanwhile; the slot takes work once its
        ``WorkerReady`` comes in.
        """
        state = self.state
        while self._replace:
            with state.lock:
                if not self._replace:
                    return
                w = self._replace.popleft()
                if state.closing or state.broken is not None:
                    continue
                # Its mappings died with it: whatever it held is free memory
                # now (under the lock: the transport is shared with senders).
                state.transport.worker_gone(w.slot)
                self._starting += 1
            error: Optional[Exception] = None
            try:
                state.backend.restart(w.slot)
            except Exception as exc:  # noqa: BLE001 -- any failure to start ends the engine, named
                error = exc
            finally:
                with state.lock:
                    self._starting -= 1
                    self._started.notify_all()
                    if error is None:
                        w.alive = True
                    else:
                        self.outcomes.break_engine(ParallelError(
                            f"worker {w.slot} on device {state.devices[w.slot]!r} could not be "
                            f"restarted: {type(error).__name__}: {error}"))

    def wait_for_starts(self) -> None:
        """Until no replacement is being started (engine lock held; ``close`` calls it)."""
        while self._starting:
            self._started.wait()

    # ------------------------------------------------------------- deadlines
    def next_deadline(self) -> Optional[float]:
        """When the earliest running task passes its timeout (``time.monotonic``), if any."""
        best = None
        for w in self.state.workers:
            timed = _timed_head(w)
            if timed is None:
                continue
            head, timeout = timed
            d = self._started_at(w, head)[0] + timeout
            best = d if best is None else min(best, d)
        return best

    def check_deadlines(self) -> None:
        """Kill every worker whose running task is past its job's timeout, after
        reading where it is (its stack, for the ``TaskTimeoutError``)."""
        state = self.state
        now = time.monotonic()
        overdue: List[WorkerState] = []
        with state.lock:
            for w in state.workers:
                if w.kill_reason is not None or not w.alive:
                    continue
                timed = _timed_head(w)
                if timed is None or timed[0].job.done:
                    continue
                head, timeout = timed
                started, item = self._started_at(w, head)
                # Untracked, the whole chunk shares the limit (chunks are small then).
                limit = timeout * (1 if item is not None else max(1, head.n))
                if now - started <= limit:
                    continue
                w.kill_reason = ("timeout", item)  # no more work for it from now on
                overdue.append(w)
        if not overdue:
            return
        # Outside the lock (up to stack_timeout): other threads submit meanwhile.
        # This thread is the one that polls, so no result of theirs is read
        # before the kill: a task that ends now still counts as overdue.
        try:
            found = state.backend.stacks([w.slot for w in overdue], self.stack_timeout)
        except Exception:  # noqa: BLE001 -- a back-end's failure to read stacks must not
            found = {}  # keep a stuck worker alive
        with state.lock:
            for w in overdue:
                w.kill_stack = found.get(w.slot)
                try:  # noqa: SIM105
                    state.backend.kill(w.slot)
                except Exception:  # noqa: BLE001 -- whatever a back-end's kill raises (it may
                    pass  # be gone already, or unable to kill), the pumping must go on

    def running_for(self) -> Dict[int, float]:
        """Seconds the item each busy worker runs now has been running (``insights``'
        "stalled" verdict); the whole chunk's time where items are not tracked."""
        now = time.monotonic()
        out: Dict[int, float] = {}
        with self.state.lock:
            for w in self.state.workers:
                head = w.fifo[0] if w.fifo else None
                if isinstance(head, Chunk) and w.alive and not head.job.done:
                    out[w.slot] = now - self._started_at(w, head)[0]
        return out

    def _started_at(self, w: WorkerState, head: Chunk) -> Tuple[float, Optional[int]]:
        """When ``head``'s running item started, and which item it is (None: not known)."""
        prog = self.state.backend.item_slot(w.slot)
        if (prog is not None and prog[0] == head.job.id and prog[1] == head.seq
                and prog[2] >= 0):
            return prog[3], prog[2]
        # Not started yet by the worker's own account: it starts after the
        # chunk before it came back, and not before it was sent.
        return max(head.sent_at, w.last_at), None


def taken_away(msg: WorkerExited) -> bool:
    """Whether a worker was taken away (its node lost, killed from outside, as its
    back-end tells) rather than ended by what it ran: the one place that decides
    whether a death is an item's fault. Such a death blames no item and counts
    against no ``max_deaths`` (nor as a failed start).

    Args:
        msg (WorkerExited): what the back-end reported.

    Returns:
        bool:
    """
    return msg.cause is not None and msg.cause.infrastructure


def _timed_head(w: WorkerState) -> Optional[Tuple[Chunk, float]]:
    """The chunk ``w`` runs now and its job's timeout, if it has one."""
    head = w.fifo[0] if w.fifo else None
    if not isinstance(head, Chunk) or head.job.timeout is None:
        return None  # nothing, a place reserved, or no timeout
    return head, head.job.timeout


class FailFast(Policy):
    """Runners: the first error ends the call. An item that raised fails its job; a
    death breaks the engine; a task past its deadline fails its job (and the jobs
    queued behind it), the worker is replaced and the runner keeps going."""

    keeps_items = False

    def chunk_failed(self, job: Job, failed: Dict[int, ItemError]) -> Optional[BaseException]:
        return failed[min(failed)].exc

    def hook_failed(self, sup: Supervisor, w: WorkerState, err: BaseException) -> None:
        sup.outcomes.break_engine(err)

    def lost(self, sup: Supervisor, w: WorkerState, chunks: List[Chunk], what: str,
             at: Optional[int], msg: WorkerExited) -> None:
        outcomes = sup.outcomes
        if not chunks or what == "lost":
            if what != "timeout":
                # Lost too: a runner fails fast, with an error that names the node.
                outcomes.break_engine(sup.death_error(w, msg))
            return
        running, queued = chunks[0], chunks[1:]
        job = running.job
        got: Optional[bool] = True
        if at is None:
            got, at = sup.received(w, running)
        if what == "timeout":
            err: BaseException = sup.timeout_error(w, msg, running.first + (at or 0), job)
            outcomes.fail(job, err)
            for c in queued:
                if c.job is not job:
                    outcomes.fail(c.job, err)
            return
        if got is False:
            # Dead before it received them (idle, killed from outside meanwhile):
            # none of the call's items ran there, and the error names none.
            outcomes.break_engine(sup.death_error(w, msg))
            return
        job.deaths += 1
        items = ([running.first + at] if at is not None
                 else list(range(running.first, running.first + running.n)))
        outcomes.break_engine(sup.death_error(w, msg, items))


class ReplaceWorker(Policy):
    """Pools: an item that raised fails alone; a death fails the running item alone,
    the rest runs elsewhere and the worker is replaced; a job whose items killed
    ``max_deaths`` workers fails. A worker taken away (``taken_away``) fails
    nothing: what it held runs again; a job that lost workers on more than
    ``max_node_losses`` nodes fails with ``NodesLostError``."""

    keeps_items = True

    def __init__(self, max_deaths: int = 3, max_node_losses: Optional[int] = 10) -> None:
        """
        Args:
            max_deaths (int): worker deaths one job may cause before it fails.
            max_node_losses (int or None): lost nodes one job may see and carry on
                (None: any number).
        """
        self.max_deaths = max_deaths
        self.max_node_losses = max_node_losses

    def chunk_failed(self, job: Job, failed: Dict[int, ItemError]) -> Optional[BaseException]:
        return None

    def hook_failed(self, sup: Supervisor, w: WorkerState, err: BaseException) -> None:
        if not w.ready:  # a start that failed: every replacement would fail the same way
            sup.outcomes.break_engine(err)

    def lost(self, sup: Supervisor, w: WorkerState, chunks: List[Chunk], what: str,
             at: Optional[int], msg: WorkerExited) -> None:
        if what == "lost":  # no item at fault: all it held runs again, elsewhere
            self._count_lost_node(sup, w, chunks, msg)
            for c in chunks:
                sup.requeue(c.job, c.first, c.items, c.n)
            return
        if not chunks:
            return  # it died idle: nothing was lost
        running, queued = chunks[0], chunks[1:]
        job = running.job
        if at is None:
            received, at = sup.received(w, running)
            if received is False and what == "died":
                # It never received the chunk at the head of its queue: it
                # died idle (killed from outside) and these were sent before
                # its death was seen. Nothing of them ran, no item is at
                # fault: all go to other workers, no death counts.
                for c in chunks:
                    sup.requeue(c.job, c.first, c.items, c.n)
                return
            if (received and at is None and what == "died" and running.n > 1
                    and running.items is not None and job.deaths + 1 < self.max_deaths):
                # It received the chunk; which item killed it is unknown (tiny
                # items go unmarked). The chunk runs again one item at a time,
                # elsewhere: the guilty item then fails alone.
                job.deaths += 1
                for k, item in enumerate(running.items):
                    sup.requeue(job, running.first + k, [item], 1)
                for c in queued:
                    sup.requeue(c.job, c.first, c.items, c.n)
                return
        err: BaseException
        if what == "timeout":
            failed_items = [running.first + (at or 0)]
            err = sup.timeout_error(w, msg, failed_items[0], job)
        else:
            failed_items = ([running.first + at] if at is not None
                            else list(range(running.first, running.first + running.n)))
            err = sup.death_error(w, msg, failed_items)
            job.deaths += 1
        # The innocent go to other workers: queued chunks, and the running
        # chunk's other items (those before ``at`` ran, but their results died
        # with the worker).
        for c in queued:
            sup.requeue(c.job, c.first, c.items, c.n)
        if at is not None and running.items is not None:
            before, after = running.items[:at], running.items[at + 1 :]
            if before:
                sup.requeue(job, running.first, before, len(before))
            if after:
                sup.requeue(job, running.first + at + 1, after, len(after))
        if what != "timeout" and job.deaths >= self.max_deaths:
            sup.outcomes.fail(job, err)
            return
        if not job.done:
            # Under the lock, on the pumping thread: a pool's sinks only store
            # results, they do not call back into the engine.
            failed = {k: ItemError(err) for k in range(len(failed_items))}
            if at is not None:
                sup.outcomes.deliver(job, failed_items[0], [None], failed)
            else:
                sup.outcomes.deliver(job, running.first, [None] * running.n, failed)

    def _count_lost_node(self, sup: Supervisor, w: WorkerState, chunks: List[Chunk],
                         msg: WorkerExited) -> None:
        """``w`` was taken away with ``chunks``: each job among them counts its node;
        one past ``max_node_losses`` fails with ``NodesLostError``."""
        cause = msg.cause
        assert cause is not None
        # A node counts once however many of a job's workers it held; a worker
        # killed from outside counts on its own.
        key = cause.node_id if cause.kind == "node lost" and cause.node_id else (
            f"{cause.node_id} (worker {w.slot}, pid {msg.pid}, {cause.kind})")
        limit = self.max_node_losses
        for job in dict.fromkeys(c.job for c in chunks):
            job.lost_nodes.setdefault(key, cause)
            if limit is not None and len(job.lost_nodes) > limit:
                sup.outcomes.fail(job, NodesLostError(job.lost_nodes, limit))


def _log_loss(device: str, slot: int, msg: WorkerExited, what: str, replaced: bool) -> None:
    """Log a worker lost (``what``: "died", "timeout" or another kill reason)."""
    then = "starting a replacement" if replaced else "not replaced (the engine is broken)"
    if what == "timeout":
        logs.logger.warning("worker %d on device %r (pid %s) killed: a task ran longer than its "
                       "task_timeout; %s", slot, device, msg.pid, then)
    else:
        logs.logger.warning("worker %d on device %r (pid %s) %s (exit code %s); %s", slot, device,
                       msg.pid, "died" if what == "died" else f"killed ({what})",
                       msg.exitcode, then)
