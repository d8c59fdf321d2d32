"""The back-end seam: who runs the workers, and how messages reach them.

The engine ([`engine`][easycore.common.parallel.engine.core]: jobs, chunking,
credits, ordering, errors, timeouts) talks only to this interface, so where
workers live is replaceable: [`ProcessBackend`][easycore.common.parallel.ProcessBackend]
(one process per device), [`ThreadBackend`][easycore.common.parallel.backends.thread.ThreadBackend]
(threads, no pickling) and [`RayBackend`][easycore.common.parallel.backends.ray.RayBackend]
(one Ray actor per device).

Every worker slot ``0 .. len(devices) - 1`` runs one
[`WorkerHandler`][easycore.common.parallel.worker.executor.WorkerHandler] at a time; the
messages are those of [`protocol`][easycore.common.parallel.worker.protocol].
All methods are called in the caller's process:

* ``start()``: start every worker and wait until each ran its init hooks;
  raise [`WorkerError`][easycore.common.parallel.WorkerError] /
  [`WorkerDiedError`][easycore.common.parallel.WorkerDiedError] (after
  cleaning up) if one fails. ``start_first()``: the same, but return once
  one worker is ready (pools hand it work while the others start).
  ``start_nowait()``: start them and return as soon as work can go to them;
  each reads what it was sent once its init returned (runners without init
  hooks).
* ``send(worker, message)``: hand a [`RunChunk`][easycore.common.parallel.worker.protocol.RunChunk]
  to a worker. Never blocks on a busy worker (what the pipe cannot take yet
  is buffered); raises [`ChannelBroken`][easycore.common.parallel.ChannelBroken]
  if the worker is gone. Thread-safe.
* ``poll(timeout)``: wait up to ``timeout`` seconds for messages; return
  ``(worker, message)`` pairs, where message is a protocol message or a
  [`WorkerExited`][easycore.common.parallel.backends.base.WorkerExited] (with the
  [`DeathCause`][easycore.common.parallel.errors.DeathCause] where the back-end
  knows it), or a [`BackendFailed`][easycore.common.parallel.backends.base.BackendFailed]
  that ends the engine. May return
  early and empty (on ``wakeup``, or so that a waiting thread gets back to
  Python code and Ctrl-C is handled). One thread polls at a time.
* ``wakeup()``: make a blocked ``poll`` return; thread-safe.
* ``kill(worker)``: end one worker now (a task overran its timeout); its exit
  is reported by ``poll``. ``restart(worker)``: start a fresh worker in the
  slot of one that exited; its ``WorkerReady`` comes through ``poll``.
* ``stop(timeout)``: graceful end: the end hooks everywhere, everything joined
  within ``timeout`` seconds in all, then released; raises the first error.
* ``abort()``: end everything now, release every resource, never raise.
"""

from __future__ import annotations

import abc
import time

from .._named_tuples import NamedTuple
from .._os.inherit import MainCode
from .._os.memory import Reading
from .._os.stacks import Stack
from ..errors import DeathCause, WorkerDiedError, WorkerError
from ..worker.protocol import WorkerFailed, WorkerReady
from ..worker.slots import ItemSlot

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

__all__ = [
    "Backend",
    "BackendSpec",
    "ChannelBroken",
    "WorkerExited",
    "BackendFailed",
    "startup_error",
    "wait_ended",
    "wait_ready",
]


class ChannelBroken(OSError):
    """A message could not be handed to a worker (it is gone)."""


class WorkerExited(NamedTuple):
    """A worker's process (or actor) is gone."""

    pid: Optional[int]
    exitcode: Optional[int]
    #: the back-end ended it (stop, kill, abort): not a death to report
    expected: bool
    #: what the back-end knows about the cause (Ray's message, say)
    reason: str = ""
    #: why it is gone, where the back-end can tell (Ray: a lost node, a kill from
    #: outside, or its own process); None: its own process, as far as is known
    cause: Optional[DeathCause] = None


class BackendFailed(NamedTuple):
    """Reported by ``poll``: the back-end cannot go on (Ray: no node had room for any
    worker within ``capacity_timeout``); the engine ends with ``error``."""

    error: BaseException


class Backend(abc.ABC):
    """Runs [`WorkerHandler`][easycore.common.parallel.worker.executor.WorkerHandler]s on
    a set of devices."""

    #: devices, one worker each, in order
    devices: List[str]
    #: the transport the engine encodes items and decodes results with
    transport: Any
    #: whether ``memory`` reads the workers' memory (``max_worker_memory`` needs it)
    measures_memory: bool = False
    #: whether ``from_spec`` takes a spec whose ``cfg`` is None (a pool made without
    #: one): passed on as it is, the workers' programs make an empty ``CfgNode``
    #: if a function asks for it; other back-ends get that ``CfgNode`` in the spec
    takes_no_cfg: bool = False
    #: whether the next ``poll`` may spin for a moment before it sleeps (see
    #: [`spin`][easycore.common.parallel._os.spin]), set by the engine before each
    #: poll: where the thread that polls is the one waiting for the results (a
    #: runner's caller) and one chunk is out (a kept-alive call). Not for a pool's
    #: coordinator, which hands results to another thread that then needs the
    #: interpreter lock a spinning coordinator keeps taking
    spin_in_poll: bool = False
    #: ``__main__``'s functions and classes when the workers started (process
    #: back-ends; see [`main_code`][easycore.common.parallel._os.inherit.main_code])
    main_code: Optional[MainCode] = None

    @classmethod
    def from_spec(cls, spec: BackendSpec, **options: Any) -> Backend:
        """A fresh, unstarted back-end for ``spec``: how every client builds one.

        Each back-end takes its own keyword options (Ray's ``address``) and
        refuses the others, naming them
        ([`check_options`][easycore.common.parallel.options.check_options]).

        Args:
            spec (BackendSpec): the program, devices, cfg, device policy,
                start method, thread budget.
            **options: the back-end's own keyword arguments.

        Returns:
            Backend:
        """
        raise NotImplementedError(f"{cls.__name__} does not say how it is built from a spec")

    def launch(self) -> None:
        """Start the workers' processes now, without waiting for any (this default:
        nothing; the start does it).

        Called by the client before it builds its engine, so that workers whose
        start is long (a fresh interpreter's) boot meanwhile; ``start``,
        ``start_first`` or ``start_nowait`` then waits for them as it would
        have. A client that fails before it starts calls ``abort``.
        """
        return None

    @abc.abstractmethod
    def start(self) -> None:
        """Start the workers and wait until each one's init hooks returned."""

    def start_first(self) -> List[bool]:
        """Start the workers; return once one is ready (this default: once all are).

        A back-end that can hand work to its first ready worker while the
        others still start says so here; the others report ``WorkerReady``
        through ``poll``.

        Returns:
            list[bool]: per slot, whether that worker is ready now.
        """
        self.start()
        return [True] * len(self.devices)

    def start_nowait(self) -> List[bool]:
        """Start the workers and return as soon as work can go to them (this default:
        once all are ready).

        A back-end whose workers read their messages in order, after their
        init hooks, may take work for them at once; each one's ``WorkerReady``
        (or its failure) comes through ``poll``.

        Returns:
            list[bool]: per slot, whether that worker may be given work now (the
                others get it once their ``WorkerReady`` came).
        """
        self.start()
        return [True] * len(self.devices)

    @abc.abstractmethod
    def send(self, worker: int, message: Any) -> None:
        """Hand ``message`` to ``worker``; never blocks on a busy worker."""

    @abc.abstractmethod
    def poll(self, timeout: Optional[float]) -> List[Tuple[int, Any]]:
        """Wait up to ``timeout`` seconds (None: until something happens).

        Args:
            timeout (float or None):

        Returns:
            list: ``(worker, message)`` pairs, maybe none.
        """

    @abc.abstractmethod
    def wakeup(self) -> None:
        """Make a concurrent or the next [`poll`][easycore.common.parallel.Backend.poll] return."""

    def kill(self, worker: int) -> None:
        """End ``worker`` now; ``poll`` reports its exit (expected)."""
        raise NotImplementedError(f"{type(self).__name__} cannot kill one worker")

    def restart(self, worker: int) -> None:
        """Start a fresh worker in the slot of one that exited."""
        raise NotImplementedError(f"{type(self).__name__} cannot restart a worker")

    def death_error(self, worker: int, exited: WorkerExited,
                    items: Optional[List[int]] = None) -> BaseException:
        """The error that says ``worker`` died (Ray's names the node, say).

        Args:
            worker (int): the slot.
            exited (WorkerExited): what ``poll`` reported.
            items (list[int] or None): input indices of what it was running.

        Returns:
            BaseException:
        """
        return WorkerDiedError(self.devices[worker], worker, exited.pid, exited.exitcode, items)

    def item_slot(self, worker: int) -> Optional[ItemSlot]:
        """What ``worker`` last wrote to its [item slot][easycore.common.parallel.worker.slots]
        (which item runs, since when); None: this back-end keeps none."""
        return None

    def memory(self, worker: int, unique: bool = False) -> Optional[Reading]:
        """What ``worker`` holds in memory now (and at its peak).

        Args:
            worker (int): the slot.
            unique (bool): also its USS (costly: read it seldom).

        Returns:
            Reading or None: None: gone, or a back-end that cannot tell (this default).
        """
        return None

    def resident(self, worker: int) -> Optional[int]:
        """``worker``'s resident memory (RSS) now, in bytes, read cheaply (after
        every chunk, for ``max_worker_memory``); None: cannot tell (this default)."""
        return None

    def stacks(self, workers: Optional[Iterable[int]] = None,
               timeout: float = 1.0) -> Dict[int, Optional[Stack]]:
        """Where each worker is now, read without stopping it (see
        ``_os.stacks``).

        Args:
            workers (iterable of int or None): the slots to ask (None: all).
            timeout (float): seconds to wait for all of them together.

        Returns:
            dict: ``{worker: Stack or None}`` (None: gone, not started far
            enough, or a back-end that cannot tell; this default).
        """
        return {w: None for w in (range(len(self.devices)) if workers is None else workers)}

    @abc.abstractmethod
    def stop(self, timeout: Optional[float] = None) -> None:
        """Run the end hooks everywhere and release everything.

        Args:
            timeout (float or None): seconds for the whole stop; after that the
                workers are killed and ``TimeoutError`` is raised.
        """

    @abc.abstractmethod
    def abort(self) -> None:
        """End the workers now and release everything; never raises."""

    @property
    def pids(self) -> List[Optional[int]]:
        """list: process ids of the workers, where the back-end has them."""
        return [None] * len(self.devices)


class BackendSpec(NamedTuple):
    """What any back-end needs to start its workers."""

    #: the program every worker runs
    #: ([`WorkerProgram`][easycore.common.parallel.worker.executor.WorkerProgram])
    program: Any
    devices: List[str]
    cfg: Any  #: each worker gets its own copy (None: none given, see ``takes_no_cfg``)
    policy: Any  #: the [`DevicePolicy`][easycore.common.parallel.backends.policy.DevicePolicy]
    start_method: Optional[str] = None
    threads: Optional[int] = None  #: each worker's thread budget (None: leave alone)
    contexts: Optional[List[Any]] = None  #: per-worker context (Pool's worker_contexts)
    item_slots: bool = False  #: keep item slots (which item runs: deaths, task timeouts)


def startup_error(backend: Backend, slot: int, message: Any,
                  pid: Optional[int]) -> Optional[BaseException]:
    """What a message from a starting worker means for its start: the error to raise
    (an init hook failed: its ``WorkerError``; the worker died: its death), or None.

    Args:
        backend (Backend): the back-end starting the worker.
        slot (int): the worker.
        message (Any): what it reported (not its ``WorkerReady``).
        pid (int or None): its process id, for the error.

    Returns:
        BaseException or None:
    """
    if isinstance(message, WorkerFailed):
        return WorkerError.from_report(message.report, backend.devices[slot], slot, pid)
    if isinstance(message, WorkerExited) and not message.expected:
        return backend.death_error(slot, message)
    if isinstance(message, BackendFailed):
        return message.error
    return None


def wait_ready(backend: Backend, waiting: Set[int], pid: Callable[[int], Optional[int]],
               restart: Optional[Callable[[int], None]] = None) -> None:
    """Poll ``backend`` until every worker in ``waiting`` reported ``WorkerReady``.

    The start-up loop of the back-ends that wait for all their workers; a
    failure raises its ``startup_error``.

    Args:
        backend (Backend): a back-end whose workers are starting.
        waiting (set of int): the workers still to report; emptied as they do.
        pid (callable): ``pid(worker)``: its process id, for the errors.
        restart (callable or None): ``restart(worker)`` starts again a worker
            taken away while it started (its ``DeathCause`` is infrastructure:
            Ray's node lost; another node may have room). None: such a death
            fails the start as any other does.
    """
    while waiting:
        # A whole batch is handled each time: a failure that came with the
        # awaited WorkerReady is not left unread.
        for slot, message in backend.poll(None):
            if isinstance(message, WorkerReady):
                waiting.discard(slot)
                continue
            if (restart is not None and isinstance(message, WorkerExited)
                    and message.cause is not None and message.cause.infrastructure):
                restart(slot)
                continue
            error = startup_error(backend, slot, message, pid(slot))
            if error is not None:
                raise error


def wait_ended(backend: Backend, running: Callable[[], bool], timeout: Optional[float],
               handle: Callable[[int, Any], None], errors: List[BaseException]) -> None:
    """Poll ``backend`` until ``running()`` is False, for ``timeout`` seconds at most.

    The graceful-stop loop of every back-end: the workers were asked to run
    their end hooks; ``handle(worker, message)`` takes what they report meanwhile
    (and adds to ``errors`` what the stop will raise).

    Args:
        backend (Backend): a back-end whose workers are ending.
        running (callable): whether some worker has not ended yet.
        timeout (float or None): seconds in all (None: no limit).
        handle (callable): called with each ``(worker, message)`` polled.
        errors (list): the stop's errors; a ``TimeoutError`` is added when the
            time ran out first.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while running():
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            errors.append(TimeoutError(
                f"the workers' end hooks did not finish within {timeout} s"))
            return
        for slot, message in backend.poll(remaining):
            handle(slot, message)
