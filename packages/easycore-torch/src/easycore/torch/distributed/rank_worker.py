"""What runs in each rank: the program of a rank's worker, and the steps it takes.

A rank is an ordinary easycore worker (a process of the process back-end, or
a Ray actor) running a `RankProgram`. Its init hook only prepares the device
(``setup_worker``); the rest arrives as *steps*, items of jobs that the caller
targets at chosen ranks through the engine (item k on rank k):

* `HostStore` (Ray, rank 0): open the rendezvous store on this node;
* `Join`: meet the others in one process group, and set ``cfg.dist``;
* `Init`: run a runner's ``producer_init`` (apart from `Join`, so that
  loading a model is not bound by the start-up timeout);
* `Call` (``spawn``): run ``fn(ctx, *args)``.

Any other item is a runner's and goes to its ``producer_work``. Steps do not
raise: a failure comes back as a `Failed` result carrying an
[`ErrorReport`][easycore.common.parallel.ErrorReport] whose hook names the
step ("joining the process group", "producer_init", ``fn``'s name), so that
the caller sees every rank's outcome and reports the root cause; the rank
stays up until the caller stops or kills everything. The end hook runs a
runner's ``producer_end`` and leaves the group. Each rank is a process of its
own, so the rank's state lives in this module.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional, Tuple

import torch
import torch.distributed as dist

from easycore.common.config import CfgNode
from easycore.common.parallel import ErrorReport, WorkerContext, WorkerProgram
from easycore.common.parallel.extending import HookFailed, Terminated, dumps_code, loads_code

from .context import DistContext
from .rendezvous import connect_store, is_loopback, open_store, use_loopback_interface

__all__ = ["Call", "Failed", "HostStore", "Init", "Join", "RankProgram", "Step", "leave_group"]


class Failed(NamedTuple):
    """A step that raised in a rank, as the result of its item."""

    report: ErrorReport


class _RankState:
    """This process's rank: its store, its context, whether ``producer_init`` ran."""

    def __init__(self) -> None:
        self.store: Any = None
        self.ctx: Optional[DistContext] = None
        self.initialised = False


_state = _RankState()


class Step:
    """One thing the caller asks a rank to do; a result or a `Failed`, never an exception."""

    def name(self) -> str:
        """str: what the rank was doing, for errors."""
        raise NotImplementedError

    def execute(self, program: RankProgram, ctx: WorkerContext) -> Any:
        raise NotImplementedError

    def run(self, program: RankProgram, ctx: WorkerContext) -> Any:
        try:
            return self.execute(program, ctx)
        except Terminated:  # the caller ends this rank: unwind
            raise
        except BaseException as exc:  # noqa: BLE001 (any error of a step is the rank's report)
            return Failed(ErrorReport.capture(self.name(), exc))


@dataclass(frozen=True)
class HostStore(Step):
    """Open the store in this rank (rank 0); returns ``(host, port)``.

    ``host`` None: the address Ray knows this node by (a Ray actor).
    """

    host: Optional[str]
    timeout: Optional[float]

    def name(self) -> str:
        return "opening the rendezvous store"

    def execute(self, program: RankProgram, ctx: WorkerContext) -> Tuple[str, int]:
        host = self.host
        if host is None:
            import ray

            host = ray.util.get_node_ip_address()
        _state.store, port = open_store(host, self.timeout)
        return host, port


@dataclass(frozen=True)
class Join(Step):
    """Join the process group as rank ``ctx.index``; ``port`` None: this rank hosts the store.

    Returns this rank's pid.
    """

    world_size: int
    backend: str
    host: str
    port: Optional[int]
    timeout: Optional[float]

    def name(self) -> str:
        return "joining the process group"

    def execute(self, program: RankProgram, ctx: WorkerContext) -> int:
        if is_loopback(self.host):
            use_loopback_interface()
        if self.port is not None:
            _state.store = connect_store(self.host, self.port, self.timeout)
        kwargs: dict = {}
        if self.timeout is not None:
            kwargs["timeout"] = datetime.timedelta(seconds=self.timeout)
        if ctx.device.startswith("cuda") and "nccl" in self.backend:
            kwargs["device_id"] = torch.device(ctx.device)  # NCCL connects now, not lazily
        dist.init_process_group(self.backend, store=_state.store, rank=ctx.index,
                                world_size=self.world_size, **kwargs)
        _state.ctx = DistContext(ctx.index, self.world_size, ctx.device, self.backend,
                                 dist.group.WORLD)
        if isinstance(ctx.cfg, CfgNode):
            _set_dist(ctx.cfg, _state.ctx)
        return os.getpid()


@dataclass(frozen=True)
class Init(Step):
    """Run the runner's ``producer_init`` in a rank that joined."""

    def name(self) -> str:
        return "producer_init"

    def execute(self, program: RankProgram, ctx: WorkerContext) -> None:
        _joined(ctx)
        program.hooks.producer_init(ctx.device, ctx.cfg)
        _state.initialised = True


@dataclass(frozen=True)
class Call(Step):
    """Run ``fn(ctx, *args)`` in a rank that joined; returns what it returns."""

    fn: bytes  #: pickled by [`dumps_code`][easycore.common.parallel.transport.pickling.dumps_code]
    args: Tuple[Any, ...]
    qualname: str

    @classmethod
    def make(cls, fn: Callable[..., Any], args: Tuple[Any, ...]) -> Call:
        """Pickle ``fn`` once: by reference if importable, else by value (cloudpickle).

        Raises:
            TypeError: ``fn`` is not callable or cannot be pickled.
        """
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        try:
            blob = dumps_code(fn)
        except Exception as exc:
            raise TypeError(
                f"cannot send {fn!r} to the ranks: {type(exc).__name__}: {exc}; define it at "
                "module level"
            ) from exc
        return cls(blob, tuple(args), getattr(fn, "__qualname__", None) or repr(fn))

    def name(self) -> str:
        return self.qualname

    def execute(self, program: RankProgram, ctx: WorkerContext) -> Any:
        return loads_code(self.fn)(_joined(ctx), *self.args)


def _joined(ctx: WorkerContext) -> DistContext:
    if _state.ctx is None:
        raise RuntimeError(f"the rank on {ctx.device!r} has not joined its process group")
    return _state.ctx


def _set_dist(cfg: CfgNode, ctx: DistContext) -> None:
    frozen = cfg.is_frozen()
    if frozen:
        cfg.freeze(False)
    try:
        cfg.dist = ctx
    finally:
        if frozen:
            cfg.freeze(True)


def leave_group() -> None:
    """Leave the process group and drop the store (a rank's last step)."""
    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    finally:
        _state.store = _state.ctx = None
        _state.initialised = False


class RankProgram(WorkerProgram):
    """The program of every rank's worker: device set-up, steps, a runner's hooks."""

    def __init__(self, hooks: Any = None, policy: Any = None) -> None:
        """
        Args:
            hooks (type or None): a runner class (``DistributedRunner``): its
                ``setup_worker``, ``producer_init``, ``producer_work`` and
                ``producer_end`` run in the ranks. None (``spawn``): steps only.
            policy (DevicePolicy or None): prepares a rank without ``hooks``
                for its device (``torch.cuda.set_device``).
        """
        self.hooks = hooks
        self.policy = policy

    @property
    def by_value(self) -> bool:
        """bool: the runner class lives in ``__main__``: send it by value (cloudpickle)."""
        return getattr(self.hooks, "__module__", None) in ("__main__", "__mp_main__")

    def init(self, ctx: WorkerContext) -> None:
        try:
            if self.hooks is not None:
                self.hooks.setup_worker(ctx.device)
            elif self.policy is not None:
                self.policy.setup_worker(ctx.device)
        except Terminated:
            raise
        except BaseException as exc:  # noqa: BLE001 (any error of user code is reported)
            raise HookFailed(ErrorReport.capture("setup_worker", exc)) from None

    def function(self, blob: Optional[bytes], ctx: WorkerContext) -> Callable[[Any], Any]:
        work = getattr(self.hooks, "producer_work", None)
        device, cfg = ctx.device, ctx.cfg

        def run(item: Any) -> Any:
            if isinstance(item, Step):
                return item.run(self, ctx)
            if work is None:
                raise TypeError(f"a rank of spawn got an item that is not a step: {item!r}")
            if _state.ctx is None:
                raise RuntimeError(f"the rank on {device!r} has not joined its process group")
            return work(device, cfg, item)

        return run

    def hook_name(self, blob: Optional[bytes]) -> str:
        return "producer_work"  # steps name themselves in their Failed reports

    def end(self, ctx: WorkerContext) -> None:
        try:
            if self.hooks is not None and _state.initialised:
                try:
                    self.hooks.producer_end(ctx.device, ctx.cfg)
                except Terminated:
                    raise
                except BaseException as exc:  # noqa: BLE001 (any error of user code is reported)
                    raise HookFailed(ErrorReport.capture("producer_end", exc)) from None
        finally:
            leave_group()
