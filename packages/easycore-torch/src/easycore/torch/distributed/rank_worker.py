"""What runs in each rank: the messages a rank obeys, and the hooks that obey them.

A rank is an ordinary easycore worker (a process of the process back-end or
a Ray actor) whose runner class is `RankHooks`. The caller talks to
it with chunks of one item each, sent to that worker only:

* `HostStore` (Ray only, rank 0): open the rendezvous store on this node;
* `Join`: run the user's ``setup_worker``, meet the others in one
  process group and set ``cfg.dist``;
* `Init`: run the user's ``producer_init`` (apart from `Join`, so that
  loading a model is not bound by the start-up timeout);
* `Call` (``spawn``): run ``fn(ctx, *args)``.

Any other item is the user's and goes to the user's ``producer_work``.
These steps do not raise: a failure comes back as a `Failed` result
carrying an [`ErrorReport`][easycore.common.parallel.ErrorReport] whose hook
names the step ("joining the process group", "producer_init", ``fn``'s name),
and the rank stays up until the caller stops everything. Each rank is a
process of its own, so the rank's state lives in this module.
"""

from __future__ import annotations

import datetime
import os
import pickle
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional, Tuple

import torch
import torch.distributed as dist

from easycore.common.config import CfgNode
from easycore.common.parallel import ErrorReport
from easycore.torch.parallel import BaseRunner

from .context import DistContext
from .rendezvous import connect_store, is_loopback, open_store, use_loopback_interface

__all__ = ["ByValue", "Call", "Failed", "HostStore", "Init", "Join", "RankHooks"]


class Failed(NamedTuple):
    """A step that raised in a rank, as the result of its chunk."""

    report: ErrorReport


class _RankState:
    """This process's rank: its store, its context and the user's hook class."""

    def __init__(self) -> None:
        self.store: Any = None
        self.ctx: Optional[DistContext] = None
        self.hooks: Any = None  # the user's runner class


_state = _RankState()


class _Message:
    """A step the caller asks one rank to take."""

    def run(self, device: str, cfg: CfgNode) -> Any:
        raise NotImplementedError


@dataclass
class HostStore(_Message):
    """Open the store in this rank (rank 0 of a Ray launch); returns ``(host, port)``."""

    host: Optional[str]
    timeout: Optional[float]

    def run(self, device: str, cfg: CfgNode) -> Any:
        try:
            host = self.host
            if host is None:  # the address Ray knows this node by
                import ray

                host = ray.util.get_node_ip_address()
            _state.store, port = open_store(host, self.timeout)
        except BaseException as exc:
            return Failed(ErrorReport.capture("opening the rendezvous store", exc))
        return host, port


@dataclass
class Join(_Message):
    """Run the user's ``setup_worker``, join the process group, set ``cfg.dist``."""

    rank: int
    world_size: int
    backend: str
    host: str
    port: Optional[int]  # None: this rank already hosts the store
    timeout: Optional[float]
    hooks: Any  # the user's runner class

    def run(self, device: str, cfg: CfgNode) -> Any:
        try:
            if is_loopback(self.host):
                use_loopback_interface()
            self.hooks.setup_worker(device)
            if self.port is not None:
                _state.store = connect_store(self.host, self.port, self.timeout)
            kwargs: dict = {}
            if self.timeout is not None:
                kwargs["timeout"] = datetime.timedelta(seconds=self.timeout)
            if device.startswith("cuda") and "nccl" in self.backend:
                kwargs["device_id"] = torch.device(device)  # NCCL connects now, not lazily
            dist.init_process_group(
                self.backend, store=_state.store, rank=self.rank, world_size=self.world_size,
                **kwargs,
            )
        except BaseException as exc:
            return Failed(ErrorReport.capture("joining the process group", exc))
        ctx = DistContext(self.rank, self.world_size, device, self.backend, dist.group.WORLD)
        _state.ctx, _state.hooks = ctx, self.hooks
        _set_dist(cfg, ctx)
        return ("joined", os.getpid())


@dataclass
class Init(_Message):
    """Run the user's ``producer_init`` in a rank that joined."""

    def run(self, device: str, cfg: CfgNode) -> Any:
        try:
            _state.hooks.producer_init(device, cfg)
        except BaseException as exc:
            return Failed(ErrorReport.capture("producer_init", exc))
        return ("ready",)


def _set_dist(cfg: CfgNode, ctx: DistContext) -> None:
    frozen = cfg.is_frozen()
    if frozen:
        cfg.freeze(False)
    try:
        cfg.dist = ctx
    finally:
        if frozen:
            cfg.freeze(True)


class ByValue:
    """A function pickled by value (cloudpickle): lambdas, closures, notebook code."""

    def __init__(self, fn: Any) -> None:
        import cloudpickle

        self.name = getattr(fn, "__qualname__", None) or repr(fn)
        self.blob = cloudpickle.dumps(fn)

    def load(self) -> Any:
        return pickle.loads(self.blob)  # cloudpickle's output is plain pickle data


@dataclass
class Call(_Message):
    """Run ``fn(ctx, *args)`` in a rank that joined; returns what it returns."""

    fn: Any
    args: Tuple[Any, ...]

    def run(self, device: str, cfg: CfgNode) -> Any:
        fn = self.fn
        name = fn.name if isinstance(fn, ByValue) else getattr(fn, "__qualname__", repr(fn))
        try:
            if isinstance(fn, ByValue):
                fn = fn.load()
            return fn(_state.ctx, *self.args)
        except BaseException as exc:
            return Failed(ErrorReport.capture(name, exc))


def leave_group() -> None:
    """Leave the process group and drop the store (a rank's last step)."""
    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    finally:
        _state.store = _state.ctx = _state.hooks = None


class RankHooks(BaseRunner):
    """The runner class of every rank's worker; never instantiated.

    A torch runner, so each rank's device is set up as in
    `easycore.torch.parallel` (``torch.cuda.set_device``, one CPU thread)
    before the user's class does its own setup in `Join`.
    """

    @staticmethod
    def producer_work(device: str, cfg: CfgNode, data: Any) -> Any:
        if isinstance(data, _Message):
            return data.run(device, cfg)
        hooks = _state.hooks
        if hooks is None:
            raise RuntimeError(f"the rank on {device!r} has not joined its process group")
        return hooks.producer_work(device, cfg, data)

    @staticmethod
    def producer_end(device: str, cfg: CfgNode) -> None:
        try:
            if _state.hooks is not None:
                _state.hooks.producer_end(device, cfg)
        finally:
            leave_group()
