"""``spawn``: run a function on every rank of a fresh process group, get the results.

The ranks are easycore's own workers (`group_backend`): local processes
(``launcher="process"``) or Ray actors (``launcher="ray"``), started, joined
into one process group, given one call each, and stopped, all within the
call. Nothing outlives it, and a failing rank ends it at once.
"""

from __future__ import annotations

import pickle
import time
from typing import Any, Callable, List, Optional, Sequence, Union

from easycore.common.config import CfgNode
from easycore.common.parallel import ProcessBackend
from easycore.torch.parallel import BaseRunner, TensorTransport, check_device
from easycore.torch.parallel.context import get_context, select_start_method
from easycore.torch.parallel.devices import DeviceLike, canonical_device, is_cuda

from .group_backend import GroupBackend
from .rank_worker import ByValue, Call, RankHooks

__all__ = ["spawn", "default_devices"]

LAUNCHERS = ("process", "ray")
#: seconds a successful call waits for the ranks to leave the group when it has no timeout
STOP_TIMEOUT = 30.0


class SpawnRanks(BaseRunner):
    """The hooks of a ``spawn`` rank: the torch runner's device setup, nothing else."""


def default_devices(world_size: int, backend: str) -> List[str]:
    """One device per rank: ``cuda:0 ... cuda:N-1`` for NCCL, else ``"cpu"``.

    Args:
        world_size (int):
        backend (str): the ``torch.distributed`` backend.

    Returns:
        list[str]:
    """
    if "nccl" in backend:
        return [f"cuda:{r}" for r in range(world_size)]
    return ["cpu"] * world_size


def _check_devices(
    world_size: int, devices: Optional[Sequence[DeviceLike]], backend: str
) -> List[str]:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if devices is None:
        return default_devices(world_size, backend)
    if isinstance(devices, (str, bytes)):
        raise TypeError(f"devices must be a list of devices, one per rank, got {devices!r}")
    out = [canonical_device(d) for d in devices]
    if len(out) != world_size:
        raise ValueError(
            f"devices has {len(out)} entries for world_size={world_size}: give one per rank"
        )
    if backend == "nccl":
        cpus = [r for r, d in enumerate(out) if not is_cuda(d)]
        if cpus:
            raise ValueError(
                f"backend='nccl' needs a CUDA device on every rank; rank {cpus[0]} has "
                f"{out[cpus[0]]!r} (use backend='gloo', or 'cpu:gloo,cuda:nccl')"
            )
    return out


def _portable(fn: Callable[..., Any]) -> Any:
    """``fn`` itself if it pickles by reference, else ``fn`` by value (cloudpickle)."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {fn!r}")
    try:
        pickle.dumps(fn)
        return fn
    except Exception as exc:
        try:
            return ByValue(fn)
        except ImportError:
            raise TypeError(
                f"cannot send {fn!r} to the ranks: {exc}; define it at module level, "
                "or install cloudpickle to send lambdas and closures"
            ) from exc


def _make_group(
    devices: List[str], backend: str, timeout: Optional[float], launcher: str,
    start_method: Optional[str], options: dict,
) -> GroupBackend:
    host = options.pop("host", None)
    if launcher == "process":
        if options:
            raise TypeError(f"unexpected options for launcher='process': {sorted(options)}")
        for device in devices:
            check_device(device)
        method = select_start_method(devices, start_method, SpawnRanks.cpu_threads)
        inner: Any = ProcessBackend(
            RankHooks, devices, CfgNode(), get_context(method), TensorTransport()
        )
        return GroupBackend(inner, SpawnRanks, backend=backend, timeout=timeout, host=host,
                            host_in_caller=True)
    if launcher == "ray":
        if start_method is not None:
            raise ValueError("start_method concerns launcher='process' only")
        address = options.pop("address", None)
        ray_init_kwargs = options.pop("ray_init_kwargs", None)
        if options:
            raise TypeError(f"unexpected options for launcher='ray': {sorted(options)}")
        from easycore.common.parallel.ray_backend import RayBackend

        inner = RayBackend(RankHooks, devices, CfgNode(), address, ray_init_kwargs)
        return GroupBackend(inner, SpawnRanks, backend=backend, timeout=timeout, host=host,
                            host_in_caller=False)
    raise ValueError(f"unknown launcher {launcher!r}; expected one of {LAUNCHERS}")


def spawn(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    backend: str = "gloo",
    devices: Optional[Sequence[Union[str, Any]]] = None,
    timeout: Optional[float] = 60.0,
    launcher: str = "process",
    start_method: Optional[str] = None,
    **launcher_options: Any,
) -> List[Any]:
    """Run ``fn(ctx, *args)`` on ``world_size`` ranks of one process group.

    Starts one easycore worker per rank, joins them into a
    ``torch.distributed`` process group on a free port (a store the caller
    opens on ``127.0.0.1``, port 0), calls ``fn`` on every rank with its
    [`DistContext`][easycore.torch.distributed.DistContext], and returns what
    the ranks returned, in rank order. Every rank has left the group and
    ended when it returns or raises.

    It fails fast: a rank that raises ends the call with a ``WorkerError``
    naming the rank, its device and its traceback, and the other ranks are
    killed at once rather than left waiting in a collective for torch's
    timeout; a rank that dies raises ``WorkerDiedError``; a call still
    running after ``timeout`` seconds raises ``TimeoutError``. When one rank's
    failure makes others fail (a peer's collective sees "Connection closed
    by peer"), the root cause is the one reported.

    Args:
        fn (callable): called as ``fn(ctx, *args)`` in every rank; its result
            comes back (CPU tensors through shared memory). A module-level
            function is sent by reference; a lambda or closure by value when
            cloudpickle is installed.
        world_size (int): number of ranks.
        *args: further arguments of ``fn``, the same for every rank (pickled).
        backend (str): the ``torch.distributed`` backend: "gloo" (CPUs, and
            CUDA tensors for some collectives), "nccl" (one GPU per rank), or
            torch's "cpu:gloo,cuda:nccl".
        devices (list or None): one device per rank ("cpu", "cuda:N"); None:
            ``cuda:0 ... cuda:N-1`` for NCCL, else "cpu" for every rank. A GPU
            rank makes its device current (``torch.cuda.set_device``); a CPU
            rank runs torch on one thread.
        timeout (float or None): seconds the whole call may take, start-up
            included; also the process group's timeout for each collective.
            None: no limit for the call (torch's default for collectives).
        launcher (str): "process" (local worker processes) or "ray" (one Ray
            actor per rank, rank 0's node hosting the store; see
            ``launcher_options``).
        start_method (str or None): for "process": "fork", "spawn" or
            "forkserver"; None: ``spawn`` when a device is CUDA, else the
            platform's default (as the torch runners choose).
        **launcher_options: ``host`` (str): the address the store listens on,
            default ``127.0.0.1`` (for "ray": the address Ray knows rank 0's
            node by, loopback for a Ray that easycore started); a
            non-loopback host also lets gloo and NCCL choose their network
            interface. For "ray" also ``address`` and ``ray_init_kwargs``, as
            for the runners' Ray back-end.

    Returns:
        list: ``fn``'s result on each rank, in rank order.

    Raises:
        WorkerError: a rank raised (or failed to join); names rank and device.
        WorkerDiedError: a rank died.
        TimeoutError: the call took longer than ``timeout``.
        ValueError: bad ``world_size``, ``devices``, ``launcher`` or
            ``start_method``, or a GPU this machine does not have.

    Examples:
        ```python
        # requires: torch
        import torch
        import torch.distributed as dist
        from easycore.torch.distributed import spawn

        def gather_ranks(ctx, scale):
            out = [torch.zeros(1) for _ in range(ctx.world_size)]
            dist.all_gather(out, torch.tensor([ctx.rank * scale]), group=ctx.group)
            return torch.cat(out)

        if __name__ == "__main__":
            print(spawn(gather_ranks, 3, 10.0))  # three tensors [0., 10., 20.]
        ```
    """
    started = time.monotonic()
    devs = _check_devices(world_size, devices, backend)
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout must be positive or None, got {timeout!r}")
    message_fn = _portable(fn)
    group = _make_group(devs, backend, timeout, launcher, start_method, dict(launcher_options))
    deadline = None if timeout is None else started + timeout
    name = getattr(fn, "__qualname__", None) or repr(fn)
    group.start()  # aborts (kills every rank) itself if it raises
    try:
        calls = {rank: Call(message_fn, tuple(args)) for rank in range(world_size)}
        answers = group.run_each(calls, deadline, f"spawn({name})")
        remaining = STOP_TIMEOUT if deadline is None else max(5.0, deadline - time.monotonic())
        group.stop(remaining)
    except BaseException:
        group.abort()
        raise
    return [answers[rank] for rank in range(world_size)]
