"""How torch workers start: the start method, on ``torch.multiprocessing``.

Two things in the caller's process do not survive ``fork``:

* **CUDA.** A forked child cannot use CUDA once the parent initialised it
  ("Cannot re-initialize CUDA in forked subprocess"), and whether the parent
  did is not up to the runner (a model moved to the GPU, a ``torch.cuda`` call
  in a library). So as soon as one device is CUDA the workers start with
  ``spawn``: fresh interpreters, which import your module (hence the
  ``if __name__ == "__main__":`` guard) and initialise CUDA themselves.
  ``start_method="forkserver"`` is honoured too (its server is a fresh
  process as well); ``"fork"`` is refused with a ``ValueError``.
* **OpenMP's thread pool.** torch's CPU kernels run on GNU OpenMP, which
  cannot be forked: if the caller already ran a multi-threaded torch op (any
  large tensor operation does), a forked child that starts a multi-threaded
  op of its own waits for pool threads that do not exist, forever. A child
  that runs torch with *one* intra-op thread never uses the pool. So CPU
  workers whose thread budget (``cpu_threads``; by default
  ``max(1, cpus // workers)``) is one may be forked, which starts them in
  milliseconds rather than the seconds importing torch takes; CPU workers
  with a budget above one, or None (torch's default), start with ``spawn``
  instead, and an explicit ``"fork"`` is refused.

Otherwise (CPU devices, one thread each) the start method is whatever the
runner was given, else the platform's default, exactly as in
``easycore.common.parallel`` (which avoids ``fork`` while a Ray driver is up).

The context comes from ``torch.multiprocessing``, whose reducers are what
pickles tensors in the arguments of a spawned worker (the runner's ``cfg``):
CPU tensors move through shared memory, CUDA tensors through CUDA IPC.
"""

from __future__ import annotations

from multiprocessing.context import BaseContext
from typing import Optional, Sequence

import torch.multiprocessing as torch_mp

from easycore.common.parallel.extending import default_start_method

from .devices import is_cuda

__all__ = ["get_context", "select_start_method"]

_METHODS = ("fork", "spawn", "forkserver")


def select_start_method(
    devices: Sequence[str], requested: Optional[str], cpu_threads: Optional[int]
) -> str:
    """Pick the start method for workers on ``devices``; see the module docstring.

    Args:
        devices (list[str]): canonical device strings, one per worker.
        requested (str or None): the runner's ``start_method`` (or its class's
            ``default_start_method``); None lets this function choose.
        cpu_threads (int or None): intra-op threads of each CPU worker.

    Returns:
        str: "fork", "spawn" or "forkserver".

    Raises:
        ValueError: ``requested`` is unknown, or is "fork" where fork is unsafe.
    """
    if requested is not None and requested not in _METHODS:
        raise ValueError(f"unknown start_method {requested!r}; expected one of {_METHODS}")
    gpus = [d for d in devices if is_cuda(d)]
    threaded = cpu_threads != 1 and len(gpus) < len(devices)
    if requested == "fork":
        if gpus:
            raise ValueError(
                f"start_method='fork' cannot run CUDA devices {gpus}: CUDA cannot be used "
                "in a forked process; use 'spawn' (the default when a device is CUDA) or "
                "'forkserver'"
            )
        if threaded:
            raise ValueError(
                f"start_method='fork' with cpu_threads={cpu_threads!r}: a forked worker "
                "running torch on more than one thread can hang (OpenMP does not survive "
                "fork); use cpu_threads=1, or start_method 'spawn' or 'forkserver'"
            )
        return "fork"
    if requested is not None:
        return requested
    if gpus or threaded:
        return "spawn"
    # The platform's default (or what set_start_method chose), without fixing
    # it; not fork while a Ray driver is up.
    return default_start_method()


def get_context(method: str) -> BaseContext:
    """The ``torch.multiprocessing`` context for a start method.

    Args:
        method (str): "fork", "spawn" or "forkserver".

    Returns:
        multiprocessing.context.BaseContext:
    """
    return torch_mp.get_context(method)
