"""The engine's state: what its parts share, under one lock, and what they ask of the core.

The [`Engine`][easycore.common.parallel.engine.core.Engine] is made of parts
over one [`EngineState`][easycore.common.parallel.engine.state.EngineState]:
the dispatcher (``credits``: who gets the next chunk), the supervisor
(``supervision``: deaths, replacements, deadlines) and the core (``core``:
jobs in, ``pump``, results out). Each part reads and changes the state
through its public fields, under ``state.lock``; none reaches into another
part. How a job ends (it failed, it finished, a chunk's results go to its
sink, the engine broke) is the core's business: the other parts ask for it
through the narrow [`Outcomes`][easycore.common.parallel.engine.state.Outcomes]
interface, which the core implements.

Per worker slot the state keeps a
[`WorkerState`][easycore.common.parallel.engine.state.WorkerState]: its fifo
of chunks in the order the worker runs them, including places *reserved*
(``RESERVED``) for a chunk still being taken and encoded.
"""

from __future__ import annotations

import enum
import threading
from collections import deque

from .._hints import Protocol
from ..backends.base import Backend
from ..errors import RunnerClosedError
from .job import Chunk, ItemError, Job

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Deque, Dict, Final, List, Optional, Set, Tuple, Union

    from ..insights import Recorder

__all__ = ["RESERVED", "EngineState", "Outcomes", "Reserved", "WorkerState", "pop_chunk"]


class Reserved(enum.Enum):
    """A place in a worker's fifo whose credit is taken for a chunk not yet sent."""

    PLACE = 0


#: Holds a worker's credit while its chunk is taken and encoded (see
#: ``Dispatcher.reserve``); ``Dispatcher.send`` puts the chunk in its place,
#: ``Dispatcher.unreserve`` gives it back.
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
        "kill_stack",
        "last_at",
        "memory_at",
        "ready",
        "ready_at",
        "retired_for",
        "retiring",
        "slot",
        "start_deaths",
    )

    def __init__(self, slot: int) -> None:
        self.slot = slot
        self.ready = False
        self.ready_at = 0.0  # when the engine learnt it was ready (time.monotonic())
        # chunks sent (and places reserved), in the order it runs them
        self.fifo: Deque[Union[Chunk, Reserved]] = deque()
        self.jobs: set = set()  # jobs whose function it has
        self.forget: List[int] = []
        self.items_done = 0
        self.retiring = False
        self.retired_for = "maxtasksperchild"  # or "max_worker_memory": for the log
        self.last_at = 0.0  # when it last finished a chunk
        self.kill_reason: Optional[Tuple[str, Any]] = None
        self.kill_stack: Any = None  # where it was when the engine killed it
        self.memory_at = 0.0  # when insights last read its memory
        self.alive = True
        self.start_deaths = 0  # deaths in a row before a chunk came back (failed starts)


def pop_chunk(w: WorkerState, job: int, seq: int) -> Optional[Chunk]:
    """Take chunk ``seq`` of ``job`` out of ``w``'s queue (None if it is not there)."""
    for i, c in enumerate(w.fifo):
        if c is not RESERVED and c.job.id == job and c.seq == seq:
            del w.fifo[i]
            return c
    return None


class EngineState:
    """What the engine's parts share; every field is read and changed under ``lock``."""

    def __init__(self, backend: Backend, *, credits: int,  # noqa: A002 -- the engine's word
                 maxtasksperchild: Optional[int], reorder_bytes: int) -> None:
        """
        Args:
            backend (Backend): the back-end whose workers run the jobs.
            credits (int): chunks a worker may hold at once.
            maxtasksperchild (int or None): replace a worker after this many items.
            reorder_bytes (int): memory an ordered job may hold waiting for a slow chunk.
        """
        self.backend = backend
        self.transport: Any = backend.transport
        self.credits = credits
        self.maxtasksperchild = maxtasksperchild
        self.reorder_bytes = reorder_bytes
        #: one per worker slot
        self.workers = [WorkerState(i) for i in range(len(backend.devices))]
        #: jobs not finished, by id
        self.jobs: Dict[int, Job] = {}
        #: jobs with items left to send, in turn order
        self.active: List[Job] = []
        #: scheduling state and the transport (reentrant: a sink may cancel its job)
        self.lock = threading.RLock()
        #: a close was requested or done
        self.closing = False
        #: the error that made the engine unusable (None while it works)
        self.broken: Optional[BaseException] = None
        #: seconds each worker slot spent running chunks
        self.busy = [0.0] * len(backend.devices)
        #: insights: set by a client that asked for them (None: nothing is counted)
        self.recorder: Optional[Recorder] = None
        #: bytes of resident memory past which a worker is replaced (None: no limit)
        self.max_worker_memory: Optional[int] = None
        #: slots whose first start is not over (see ``Dispatcher.share_left``)
        self.first_starts: Set[int] = set()
        #: the job a blocking caller pumps for (see ``turns``): no other job's
        #: chunks are sent meanwhile
        self.led: Optional[Job] = None

    @property
    def devices(self) -> List[str]:
        """list[str]: the back-end's devices, one per worker slot."""
        return self.backend.devices

    def pid(self, slot: int) -> Optional[int]:
        """The process id of ``slot``'s worker, where the back-end has one."""
        pids = self.backend.pids
        return pids[slot] if slot < len(pids) else None

    def in_flight(self) -> bool:
        """Whether some worker holds a chunk (or a place reserved for one)."""
        return any(w.fifo for w in self.workers)

    def one_chunk_in_flight(self) -> bool:
        """Whether exactly one chunk is out (a kept-alive call's, say); read without the lock."""
        n = 0
        for w in self.workers:
            n += len(w.fifo)
            if n > 1:
                return False
        return n == 1

    def check_usable(self) -> None:
        """Raise what keeps the engine from taking work: its break, or its close."""
        if self.broken is not None:
            raise self.broken
        if self.closing:
            raise RunnerClosedError("the workers are closing or closed")


class Outcomes(Protocol):
    """How jobs end: what the dispatcher and the supervisor ask of the core.

    The core ([`Engine`][easycore.common.parallel.engine.core.Engine]) is the
    one place that ends a job (its sink told, its input dropped, the workers
    told to forget its function) and that breaks the engine. Every method is
    called with ``state.lock`` held, except ``deliver`` (see there).
    """

    def fail(self, job: Job, error: BaseException) -> None:
        """End ``job`` with ``error``, unless it ended already."""

    def finish(self, job: Job, error: Optional[BaseException]) -> None:
        """End ``job``: every item delivered (``error`` None), or it failed."""

    def deliver(self, job: Job, first: int, results: List[Any],
                failed: Dict[int, ItemError], cost: int = 0) -> None:
        """Hand results to ``job``'s sink (in order if ordered) and end the job if
        they were its last. Runs the client's code: called outside the lock,
        except by the supervisor for a pool's failed items (its sinks only store)."""

    def after_chunk(self, w: WorkerState) -> None:
        """A chunk of ``w`` came back (or failed): retire it if due, go idle if nothing runs."""

    def break_engine(self, error: BaseException) -> None:
        """The engine cannot go on: every job fails with ``error``, and so does new work."""
