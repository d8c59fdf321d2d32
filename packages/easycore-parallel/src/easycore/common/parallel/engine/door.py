"""The one door from a client to the engine: [`start`][easycore.common.parallel.engine.door.start].

Runners, ``Pool`` (and through it ``BackgroundTask`` and ``JobQueue``) build
their engine here and nowhere else: a back-end made from the client's
options and its device policy
([`backend_for`][easycore.common.parallel.engine.door.backend_for]), then an
engine over it with a failure policy (``FailFast`` for runners,
``ReplaceWorker`` for pools), started. The clients import nothing from
``backends`` (an import-linter contract, ``clients-through-the-door``, holds
it): what they name of that layer (the back-end table, the device policy,
the spec, whether workers are forked) they take from here.
"""

from __future__ import annotations

import contextlib
import threading

from .._lazy import exports
from .._os import inherit, interrupts
from ..backends.base import Backend, BackendSpec
from ..backends.policy import BACKENDS, DevicePolicy, build_backend

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable, Dict, List, Literal, Mapping, Optional, Union

    from ..insights import Insights, Recorder
    from ..options import WorkerOptions
    from .core import Engine
    from .supervision import FailFast, Policy, ReplaceWorker

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendSpec",
    "Coordinator",
    "DevicePolicy",
    "FailFast",
    "Policy",
    "ReplaceWorker",
    "backend_for",
    "forked",
    "recorder",
    "WorkerStacks",
    "stacks",
    "stalled",
    "start",
]

# The engine's own modules load when a client starts an engine, not with the
# door: every runner's module imports the door (its class attributes name the
# back-end table and the device policy), and a runner's ``spawn`` or
# ``forkserver`` worker imports its runner's module.
__getattr__, __dir__ = exports(__name__, {
    name: "easycore.common.parallel.engine.supervision"
    for name in ("FailFast", "Policy", "ReplaceWorker")})

#: what ``stacks`` says of a live worker whose stack could not be read
NO_STACK = ("(no stack: the worker did not answer in time, or its back-end cannot read "
            "stacks; Ray's `ray stack` can)")


def backend_for(backends: Mapping[str, Union[type, str]], options: WorkerOptions,
                spec: BackendSpec) -> Backend:
    """A fresh, unstarted back-end for a client: ``options.backend`` of ``backends``,
    built from ``spec`` (its ``policy`` picks the start method and the transport).

    Args:
        backends (dict): the client's table (a copy of ``BACKENDS``).
        options (WorkerOptions): the client's checked options (the back-end's
            name and its own options).
        spec (BackendSpec): the program, devices, cfg, device policy, start
            method, threads.

    Returns:
        Backend:

    Raises:
        ValueError: an unknown back-end; TypeError: an option it does not take.
    """
    return build_backend(backends, options.backend, spec, options.backend_options)


def start(backend: Backend, options: WorkerOptions, policy: Policy, *,
          wait: Literal["all", "first", "none"], recorder: Optional[Recorder] = None,
          caller_pumps: bool = False) -> Engine:
    """The engine a client runs on: over ``backend``, with ``policy``, started.

    Args:
        backend (Backend): an unstarted back-end (``backend_for``, or a
            runner's ``make_backend()``).
        options (WorkerOptions): credits (``queue_scale``), ``maxtasksperchild``
            and ``max_worker_memory``.
        policy (Policy): what a failure costs: ``FailFast()`` (runners) or
            ``ReplaceWorker(options.max_deaths, options.max_node_losses)`` (pools).
        wait (str): see [`Engine.start`][easycore.common.parallel.engine.core.Engine.start].
        recorder (Recorder or None): insights, counted from the start (None: off).
        caller_pumps (bool): the thread that submits is the one that pumps (a runner).

    Returns:
        Engine: started; if the start raised, the back-end cleaned up after itself.

    Raises:
        ValueError: ``max_worker_memory`` with a back-end that cannot measure it.
    """
    limit = options.max_worker_memory
    assert not isinstance(limit, str)  # WorkerOptions made it bytes
    if limit is not None and not backend.measures_memory:
        raise ValueError(
            f"max_worker_memory needs worker processes whose memory this machine can read "
            f"(backend='process' on Linux); backend={options.backend!r} cannot")
    backend.launch()  # spawned workers boot while the engine's modules load
    try:  # (whatever raises from here, a Ctrl-C included, ends the launched workers)
        from .core import Engine

        # With a memory limit a worker holds one chunk at a time: one over the
        # limit is replaced before its next item, none queued behind it.
        engine = Engine(backend, credits=1 if limit is not None else options.credits,
                        maxtasksperchild=options.maxtasksperchild, policy=policy)
        engine.state.max_worker_memory = limit
        engine.recorder = recorder  # before the start: start-up counts
        engine.caller_pumps = caller_pumps
        if recorder is not None:
            recorder.caller_pumps = caller_pumps
        engine.start(wait=wait)
    except BaseException:
        backend.abort()  # (idempotent: a start that failed has already aborted)
        raise
    return engine


def recorder(devices: List[str]) -> Recorder:
    """A client's insights recorder, over its workers' devices; ``insights`` is
    imported only by a client asked for insights (a short script's start-up)."""
    from ..insights import Recorder

    return Recorder(devices)


def stacks(engine: Optional[Engine], timeout: float = 1.0) -> Dict[int, str]:
    """Where each live worker of ``engine`` is now: every client's ``stacks()``.

    Read without stopping them (see ``_os.stacks``),
    all at once, in ``timeout`` seconds at most.

    Args:
        engine (Engine or None): a client's engine (None: closed, no workers).
        timeout (float): seconds to wait for every answer together.

    Returns:
        dict: ``{worker: its stack as text}``, every thread, innermost frame
        first; ``NO_STACK`` for a worker that did not answer.
    """
    if engine is None:
        return {}
    state = engine.state
    with state.lock:
        live = [w.slot for w in state.workers if w.alive]
    found = state.backend.stacks(live, timeout)
    return {slot: str(found[slot]) if found.get(slot) is not None else NO_STACK
            for slot in live}


#: an item running this many times a typical item's time (and a second at
#: least) makes the insights' verdict "stalled"
STALLED = 10.0


def stalled(engine: Engine, insights: Insights) -> Insights:
    """``insights`` with its ``stalled`` item, if one runs far longer than the items
    so far: the worker, how long, and the function it is in (its stack is read).

    Args:
        engine (Engine): the client's engine.
        insights (Insights): a snapshot of its recorder.

    Returns:
        Insights: the same object.
    """
    items = sum(w.items for w in insights.workers)
    if items == 0:
        return insights
    typical = sum(w.working for w in insights.workers) / items
    running = engine.supervisor.running_for()
    if not running:
        return insights
    slot = max(running, key=running.__getitem__)
    seconds = running[slot]
    if seconds < max(1.0, STALLED * typical):
        return insights
    found = engine.backend.stacks([slot], 0.5).get(slot)
    frame = None if found is None else found.innermost()
    insights.stalled = {"worker": slot, "pid": engine.state.pid(slot), "seconds": seconds,
                        "typical": typical, "where": str(frame) if frame is not None else ""}
    return insights


class WorkerStacks:
    """The ``stacks()`` of the clients that hold an engine (``_engine``): Pool, runners."""

    def stacks(self, timeout: float = 1.0) -> Dict[int, str]:
        """Where each worker is now: the first thing to call when a run seems stuck.

        Every live worker's Python stack (every thread, innermost frame
        first: function, file, line), read without stopping it, even while it
        runs C code that holds the GIL. Never local variables or data. Workers
        still starting, and Ray actors, say they could not answer.

        Args:
            timeout (float): seconds to wait for the answers (all at once).

        Returns:
            dict: ``{worker: its stack as text}``.
        """
        return stacks(getattr(self, "_engine", None), timeout)


def forked(engine: Any) -> bool:
    """Whether ``engine``'s workers are forked from this process (they inherit what
    ``inherit.keep`` registered)."""
    return inherit.forked(engine.backend)


def blocking_call(engine: Engine, coordinator: Coordinator, submitted: threading.local,
                  start: Callable[[], Any]) -> Any:
    """A client's blocking call: submit its job (``start()``) and wait for its result.

    The call leads its job (pumps for it, ``Engine.lead``) where the engine let it:
    ``submitted.lead`` is True while ``start()`` runs, for the client's submit to
    pass on. A Ctrl-C (or any error) once the job exists cancels it, wherever it
    lands: while the result is waited for, or between the job's submission and
    the wait (a job left running there ran on until its result was
    garbage-collected, ahead of the client's next calls).

    Args:
        engine (Engine): the client's engine.
        coordinator (Coordinator): the client's coordinator (started on the way out).
        submitted (threading.local): ``sink``: the sink of the job the client's
            submit made in this thread (its ``job`` set by the engine before a
            Ctrl-C can land); ``lead``: see above.
        start (callable): submits the job; returns what ``get()`` gives the result.

    Returns:
        Any: the result.
    """
    result = sink = led = job = None
    submitted.sink, submitted.lead = None, True
    try:
        result = start()
        sink = submitted.sink
        led = engine.state.led
        if sink is not None and led is not None and sink.job is led:
            engine.lead(led, result.ready)
        return result.get()
    except BaseException:
        sink = submitted.sink
        job = sink.job if sink is not None else None
        if job is not None and not job.done:
            engine.cancel(job)
        raise
    finally:
        sink, submitted.sink, submitted.lead = submitted.sink, None, False
        if sink is not None and sink.job is not None:
            engine.end_lead(sink.job)  # (a Ctrl-C before the lead began, too)
            coordinator.start()  # for what comes next (idle deaths, async jobs)
        # The error raised keeps this frame (its traceback): not what holds the
        # error (the result, its sink, its job), or the cycle keeps them, and
        # the pool with its workers, until a garbage collection.
        result = sink = led = job = None


class Coordinator:
    """The thread that pumps a client's engine until ``stop`` is set (a pool's
    results, callbacks and replacements come from it), started with the
    client's first job.

    Not in the client's constructor: there, just after the workers were
    forked, the new thread waited for a CPU they were booting on (2 ms of a
    fresh pool's start on two cores, twice its first ``apply``).
    """

    def __init__(self, engine: Engine, name: str) -> None:
        """
        Args:
            engine (Engine): the engine to pump.
            name (str): the thread's name.
        """
        #: set to stop the thread (it returns within its back-end's ``tick``,
        #: or at once after a ``wakeup``: ``halt`` does both)
        self.stop = threading.Event()
        # The thread holds the engine, not the client: a pool nobody references
        # is collected, and its __del__ stops the workers.
        self._thread = threading.Thread(target=engine.pump_until, args=(self.stop,),
                                        name=name, daemon=True)
        self._wakeup = engine.state.backend.wakeup
        self._unpark = engine.turns.unpark
        self._lock = threading.Lock()
        self._started = False

    def halt(self) -> None:
        """Tell the thread to end, and wake its back-end's ``poll`` so that it ends
        now: a back-end of someone else's may wait in ``poll`` until woken, with no
        tick of its own, and its ``abort`` need not end that wait."""
        self.stop.set()
        self._unpark()  # (parked while blocking calls pumped for themselves)
        with contextlib.suppress(Exception):  # a back-end already torn down
            self._wakeup()

    def start(self) -> None:
        """Start the thread if it is not running yet (any thread may call it)."""
        if not self._started:
            with self._lock, interrupts.deferred():
                # (Deferred: a Ctrl-C inside Thread.start, once the thread runs,
                # would leave it started but not marked, to be started again.)
                if not self._started:
                    self._thread.start()
                    self._started = True

    def join(self, timeout: Optional[float] = None) -> None:
        """Wait for the thread's end (after ``stop``); at once if it never started
        or if called from the thread itself.

        Args:
            timeout (float or None): seconds; None waits for ever.
        """
        if self._started and threading.current_thread() is not self._thread:
            interrupts.join(self._thread, timeout)
