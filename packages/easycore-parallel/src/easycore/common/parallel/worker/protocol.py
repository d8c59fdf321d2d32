"""The wire protocol between the caller and its workers, in one place.

Every message is a small named tuple: it pickles by reference to its class
plus its fields, reads as words in the code on both sides, and is the same
for every back-end (a process pipe, a thread queue, a Ray actor call).

Caller to worker:

* [`RunChunk`][easycore.common.parallel.worker.protocol.RunChunk]: run a chunk of a job's items;
* [`StopWorker`][easycore.common.parallel.worker.protocol.StopWorker]: run the worker's
  end hook and exit.

Worker to caller:

* [`WorkerReady`][easycore.common.parallel.worker.protocol.WorkerReady]: the init hooks ran;
* [`ChunkDone`][easycore.common.parallel.worker.protocol.ChunkDone]: a chunk's results
  (and the failures of single items);
* [`WorkerFailed`][easycore.common.parallel.worker.protocol.WorkerFailed]: an init or end
  hook raised, or a message could not be read;
* [`WorkerEnded`][easycore.common.parallel.worker.protocol.WorkerEnded]: the end hook ran,
  the worker exits.

Payloads (``RunChunk.items``, ``ChunkDone.results``) are whatever the
back-end's transport made of the objects (shared-memory references, in-band
pickles, or a short list of plain values itself, which the message's own
pickle then carries: see [`inline`][easycore.common.parallel.transport.inline]);
the protocol does not look inside them.
"""

from __future__ import annotations

from .._named_tuples import NamedTuple
from ..errors import ErrorReport

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any

__all__ = [
    "ChunkDone",
    "ItemFailure",
    "RunChunk",
    "StopWorker",
    "WorkerEnded",
    "WorkerFailed",
    "WorkerReady",
]


class RunChunk(NamedTuple):
    """Run ``items`` with job ``job``'s function, in order."""

    job: int  #: the job's id, unique for the engine's lifetime
    seq: int  #: the chunk's number within its job
    items: Any  #: the transport's payload of the list of items
    #: the job's function, sent with the first chunk of the job a worker gets
    #: (None afterwards: the worker keeps it until told to forget the job)
    function: bytes | None
    #: ids of finished jobs whose functions the worker may drop
    forget: tuple[int, ...]
    #: the transport's data for the worker, or None (the shared-memory
    #: transport's ``transport.CallerFeedback``)
    feedback: Any
    #: what the worker writes to its item slot per item: ``MARK_NONE`` (the
    #: chunk's receipt only), ``MARK_INDEX`` (a death then costs one item) or
    #: ``MARK_TIMES`` (task timeouts); see [`slots`][easycore.common.parallel.worker.slots]
    mark: int


class StopWorker(NamedTuple):
    """Run the end hook, then exit."""

    feedback: Any = None  #: as ``RunChunk.feedback``


class WorkerReady(NamedTuple):
    """The init hooks returned: the worker takes chunks now."""

    pid: int | None


class ItemFailure(NamedTuple):
    """One item of a chunk raised; the others have results."""

    position: int  #: position of the item in its chunk
    report: ErrorReport


class ChunkDone(NamedTuple):
    """The results of one chunk, one per item; failed items hold None."""

    job: int
    seq: int
    results: Any  #: the transport's payload of the list of results
    n_items: int
    seconds: float  #: time the worker spent on the chunk, for the chunker
    #: bytes moved (inputs and results; an estimate for a list that travelled
    #: inline), for the chunker
    nbytes: int
    failures: list[ItemFailure]
    #: the transport's data for the caller, or None (the shared-memory
    #: transport's ``transport.WorkerFeedback``)
    feedback: Any
    #: of ``seconds``, the time in the job's function (user code); the rest
    #: moved data (insights). 0.0: not measured apart (all counts as work).
    working: float = 0.0


class WorkerFailed(NamedTuple):
    """A hook that is not per item (init, end) raised, or a message was unreadable."""

    job: int | None
    seq: int | None
    report: ErrorReport


class WorkerEnded(NamedTuple):
    """The end hook ran; the worker exits next."""

    feedback: Any = None  #: as ``ChunkDone.feedback``
