"""The seam for code that extends easycore-parallel from outside (easycore-torch, a back-end).

`easycore.common.parallel` holds what a user calls; this module holds, in one
place, the names that a framework building on the engine needs beyond that:
the engine and its jobs, the wire protocol, the worker's exceptions, the other
back-ends, and the helpers that every back-end shares. Everything else in
easycore-parallel's modules is private and may move between releases; an
import-linter contract (``.importlinter``) keeps easycore-torch to this module,
the package itself and `easycore.common.parallel.services`.

The [Extending](../extending.md#the-seam-easycorecommonparallelextending)
page says what each name is for. Importing this module does not import Ray:
`RayBackend` imports it when it starts.
"""

from ._os.threads import budget as thread_budget
from .backends.base import check_options
from .backends.policy import default_start_method
from .backends.ray import RayBackend
from .backends.thread import ThreadBackend
from .engine.chunking import AdaptiveChunker
from .engine.core import Engine, ItemError, Job, JobSink
from .progress import ProgressOption
from .seeding import RandomStreams
from .services.server import ServiceHost
from .transport.base import DirectTransport
from .transport.pickling import dumps_code, loads_code, names_main, reduce_main
from .worker.executor import HookFailed, RunnerProgram, Terminated
from .worker.protocol import (
    ChunkDone,
    ItemFailure,
    RunChunk,
    StopWorker,
    WorkerEnded,
    WorkerFailed,
    WorkerReady,
)
from .worker.slots import ItemSlot

__all__ = [
    # the engine
    "Engine",
    "Job",
    "JobSink",
    "ItemError",
    "AdaptiveChunker",
    # the wire protocol
    "RunChunk",
    "StopWorker",
    "WorkerReady",
    "ChunkDone",
    "ItemFailure",
    "WorkerFailed",
    "WorkerEnded",
    # workers
    "RunnerProgram",
    "HookFailed",
    "Terminated",
    # back-ends and what they share
    "ItemSlot",
    "ThreadBackend",
    "RayBackend",
    "DirectTransport",
    "check_options",
    "default_start_method",
    "thread_budget",
    "dumps_code",
    "loads_code",
    "names_main",
    "reduce_main",
    # clients' building blocks
    "ProgressOption",
    "RandomStreams",
    "ServiceHost",
]
