"""The Ray back-end's worker: an actor that answers the protocol's messages.

Made a Ray actor class by [`RayBackend`][easycore.common.parallel.backends.ray.RayBackend]
(``ray.remote(RayWorker)``); Ray's workers import this module, not the back-end.
"""

from __future__ import annotations

import os

from .._os import threads as _threads
from ..errors import ErrorReport
from ..worker.executor import PassThrough, WorkerContext, WorkerHandler

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, List, Optional, Tuple

__all__ = ["RayWorker", "init_failed_report"]


class RayWorker:
    """One worker; made a Ray actor class by
    [`RayBackend.start`][easycore.common.parallel.backends.ray.RayBackend]: it
    answers the protocol's messages with a
    [`WorkerHandler`][easycore.common.parallel.worker.executor.WorkerHandler]."""

    def __init__(self, program: Any, index: int, device: str, cfg: Any, context: Any,
                 n_threads: Optional[int]) -> None:
        self.n_threads = n_threads
        if n_threads is not None:
            _threads.limit_threads(n_threads)
        self.executor = WorkerHandler(program, WorkerContext(index, device, cfg, context),
                                       transport=_ObjectStore())

    def _keep_thread_env(self) -> None:
        # Older Ray releases (2.9 and 2.10 among them) set OMP_NUM_THREADS to the
        # actor's num_cpus before every task, actor tasks included, and removed
        # it afterwards (newer ones do so for plain tasks only): set again, per
        # call, what __init__ set, so the hooks see the budget under every
        # admitted Ray.
        if self.n_threads is not None:
            _threads.set_thread_env(self.n_threads)

    def where(self) -> tuple:
        import ray

        ctx = ray.get_runtime_context()
        return os.getpid(), ctx.get_node_id(), ray.util.get_node_ip_address()

    def start(self) -> Any:
        self._keep_thread_env()
        return self.executor.start()

    def handle(self, message: Any) -> Any:
        self._keep_thread_env()
        return self.executor.handle(message)


class _ObjectStore(PassThrough):
    """The actor's half of the transport: Ray's object store moves the results."""

    def encode_results(self, results: List[Any]) -> Tuple[Any, int]:
        # For the chunker only: the bytes of top-level arrays and tensors.
        return results, sum(getattr(r, "nbytes", 0) or 0 for r in results
                            if not isinstance(r, int))


def init_failed_report(exc: Exception) -> ErrorReport:
    """The report of an actor Ray could not build (``actor_init_failed``): most often the
    runner's module is not importable on the node.

    Args:
        exc (Exception): Ray's error.

    Returns:
        ErrorReport: for the step ``"creating the actor"``.
    """
    return ErrorReport(
        "creating the actor", type(exc).__name__,
        "the actor could not be built from the runner class and cfg; are they importable on "
        "every node (see runtime_env in ray_init_kwargs)?", str(exc), None,
    )
