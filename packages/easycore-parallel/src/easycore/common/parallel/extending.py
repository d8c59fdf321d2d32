"""The seam for code that extends easycore-parallel from outside (easycore-torch, a back-end).

`easycore.common.parallel` holds what a user calls; this module holds, in one
place, the names that a framework building on the engine needs beyond that:
the seams' base classes (device policy, back-ends, transports, worker
programs), the engine and its jobs, the wire protocol, the worker's
exceptions, the other back-ends, and the helpers that every back-end shares. Everything else in
easycore-parallel's modules is private and may move between releases; an
import-linter contract (``.importlinter``) keeps easycore-torch to this module,
the package itself and `easycore.common.parallel.services`.

The [Extending](../extending.md#the-seam-easycorecommonparallelextending)
page says what each name is for. Importing this module does not import Ray:
`RayBackend` imports it when it starts.
"""

from __future__ import annotations

import warnings

from ._os.threads import budget as thread_budget
from .backends.base import Backend, BackendSpec, ChannelBroken, WorkerExited
from .backends.policy import DevicePolicy, default_start_method
from .backends.process import ProcessBackend
from .backends.ray import RayBackend
from .backends.thread import ThreadBackend
from .engine.chunking import AdaptiveChunker
from .engine.core import Engine, ItemError, Job, JobSink
from .options import check_options
from .progress import ProgressOption
from .seeding import RandomStreams
from .services.server import ServiceHost
from .transport.interface import DirectTransport, PickleTransport, Transport
from .transport.pickling import dumps_code, loads_code, names_main, reduce_main
from .transport.shared_memory import SharedMemoryTransport
from .worker.executor import HookFailed, RunnerProgram, Terminated, WorkerHandler, WorkerProgram

# The protocol's messages by direction, as the Extending page's table lists them.
from .worker.protocol import RunChunk, StopWorker  # caller to worker

# isort: split
from .worker.protocol import ChunkDone, ItemFailure, WorkerEnded, WorkerFailed, WorkerReady  # back
from .worker.slots import ItemSlot

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any

__all__ = [
    # the seams' base classes
    "DevicePolicy",
    "Backend",
    "BackendSpec",
    "ProcessBackend",
    "WorkerExited",
    "ChannelBroken",
    "WorkerProgram",
    "WorkerHandler",
    "Transport",
    "PickleTransport",
    "SharedMemoryTransport",
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


def __getattr__(name: str) -> Any:
    # 0.5.0's first pages named the worker's message handler ``Executor``; that
    # name is now ``concurrent.futures``' (``easycore.common.parallel.Executor``).
    if name == "Executor":
        warnings.warn("easycore.common.parallel.extending.Executor is deprecated: it is "
                      "WorkerHandler now (easycore.common.parallel.Executor is the "
                      "concurrent.futures executor)", DeprecationWarning, stacklevel=2)
        return WorkerHandler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
