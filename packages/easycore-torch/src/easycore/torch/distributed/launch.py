"""``spawn``: run a function on every rank of a fresh process group, get the results.

The ranks are easycore's own workers: local processes (``launcher="process"``)
or Ray actors (``launcher="ray"``), built from a
[`BackendSpec`][easycore.common.parallel.BackendSpec] with torch's device
policy, formed into one process group by a
`GroupBackend`, and
driven by a fail-fast [`Engine`][easycore.common.parallel.engine.core.Engine]:
one job whose item k (a `Call`) runs on rank k. Everything is started and
stopped within the call: nothing outlives it, and a failing rank ends it at
once.
"""

from __future__ import annotations

import time
from typing import Any, Callable, List, Optional, Sequence, Union

from easycore.common.config import CfgNode
from easycore.common.parallel import BackendSpec, ProcessBackend
from easycore.common.parallel.extending import Engine, thread_budget
from easycore.torch.parallel import TorchDevicePolicy
from easycore.torch.parallel.devices import DeviceLike, canonical_device, is_cuda

from .group_backend import GroupBackend
from .rank_worker import Call, RankProgram
from .steps import run_steps

__all__ = ["default_devices", "spawn"]

LAUNCHERS = ("process", "ray")
#: seconds a successful call waits for the ranks to leave the group when it has no timeout
STOP_TIMEOUT = 30.0


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


def _make_group(
    devices: List[str], backend: str, timeout: Optional[float], launcher: str,
    start_method: Optional[str], options: dict,
) -> GroupBackend:
    """The unstarted back-end of the ranks (nothing starts here: bad options fail first)."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"unknown launcher {launcher!r}; expected one of {LAUNCHERS}")
    host = options.pop("host", None)
    policy = TorchDevicePolicy()
    # CPU ranks run torch on one thread (they may then be forked); GPU ranks
    # share the CPUs.
    threads = thread_budget("auto", len(devices)) if any(map(is_cuda, devices)) else 1
    spec = BackendSpec(RankProgram(policy=policy), devices, CfgNode(), policy, start_method,
                       threads)
    inner: Any
    if launcher == "process":
        if options:
            raise TypeError(f"unexpected options for launcher='process': {sorted(options)}")
        for device in devices:
            policy.check_available(device)
        inner = ProcessBackend.from_spec(spec)
    else:
        if start_method is not None:
            raise ValueError("start_method concerns launcher='process' only")
        ray_options = {k: options.pop(k) for k in ("address", "ray_init_kwargs") if k in options}
        if options:
            raise TypeError(f"unexpected options for launcher='ray': {sorted(options)}")
        from easycore.common.parallel.extending import RayBackend

        inner = RayBackend.from_spec(spec, **ray_options)
    return GroupBackend(inner, backend=backend, timeout=timeout, host=host,
                        local_ranks=launcher == "process")


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
            function is sent by reference; a lambda, a closure or code of
            ``__main__`` by value (cloudpickle), once per rank.
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
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be positive or None, got {timeout!r}")
    call = Call.make(fn, tuple(args))
    group = _make_group(devs, backend, timeout, launcher, start_method, dict(launcher_options))
    deadline = None if timeout is None else started + timeout
    engine = Engine(group, credits=1, fail_fast=True)
    engine.start()  # forms the group; kills every rank itself if it fails
    try:
        ranks = list(range(world_size))
        results = run_steps(engine, [call] * world_size, ranks, deadline,
                            f"spawn({call.qualname})", timeout)
        remaining = STOP_TIMEOUT if deadline is None else max(5.0, deadline - time.monotonic())
        engine.close(remaining)  # every rank leaves the group and exits
    except BaseException:
        engine.abort()
        raise
    return results
