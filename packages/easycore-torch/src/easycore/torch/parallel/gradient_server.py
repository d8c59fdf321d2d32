"""Asynchronous SGD through a parameter server: the gradient server.

machin's ``PushPullGradServer``, kept to its idea and rid of its faults:
clients push gradients, the server reduces them (sum or mean) in batches and
applies an optimizer to the model it manages, clients pull the new
parameters. Unlike machin's, no gradient is ever dropped (a full queue makes
``push_gradients`` wait, or raise ``queue.Full``, as configured), a partial
batch is applied after ``flush_after`` seconds, and the managed model stays
on its device.

The server is a service (``Service.start``) on easycore-torch's runner, so
its device is checked, CUDA starts it with ``spawn`` and ``torch.cuda`` is
set to its device. Inside it, the service thread takes calls (queueing
gradients, answering pulls) while a reducer thread applies batches; a lock
keeps pulls from seeing half a step.

With ``reducers=N`` (machin's primary and secondary reducers) the parameters
are sharded: N such services, each owning a group of parameters of about
equal size, with its own queue, optimizer and scheduler over its group. A
client splits each push by shard and sends the parts at once; pulls gather
the groups. Every push reaches every shard (an empty part where it has no
gradient there), so each shard's counters count pushes and "no gradient
dropped" holds shard by shard.

A gradient is checked before anything is queued (name, shape, dtype,
layout, device): a bad one is its sender's error, never the reducer's.
"""

from __future__ import annotations

import contextlib
import copy
import queue
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from easycore.common.parallel.extending import ServiceHost, thread_budget
from easycore.common.parallel.services import Service, ServiceHandle, is_remote_call

from .runner import UnorderedRunner
from .transport import TensorTransport

__all__ = ["GradientServer"]

#: (shape, dtype) of each parameter, by name
Spec = Dict[str, Tuple[Tuple[int, ...], torch.dtype]]

_STOP = "stop"
_FLUSH = "flush"
_METHODS = ("sum", "mean")
_ON_FULL = ("block", "raise")


class _TorchServiceHost(ServiceHost, UnorderedRunner):
    """Hosts a service on easycore-torch's runner: devices checked, spawn for CUDA."""


class _TorchService(Service):
    host_class = _TorchServiceHost
    transport_class = TensorTransport


class GradientServer:
    """A client of a gradient server; picklable, so every worker can hold one.

    Start a server with [`GradientServer.start`][easycore.torch.parallel.GradientServer.start];
    it returns the owner's client. Others come from pickling it, or from
    ``GradientServer(lookup(name))``.

    Args:
        handle (ServiceHandle): the handle of a running gradient server.

    Examples:
        ```python
        # requires: torch
        import torch
        from easycore.torch.parallel import GradientServer

        model = torch.nn.Linear(3, 1)
        server = GradientServer.start(
            model,
            lambda params: torch.optim.SGD(params, lr=0.1),
            reduce_batch_size=1,
        )
        with server:
            model(torch.ones(8, 3)).pow(2).mean().backward()
            server.push_gradients(model)
            server.flush()                 # apply what was pushed, now
            assert server.pull(model)      # model has the updated parameters
            assert server.stats()["applied"] == 1
        ```
    """

    def __init__(self, handle: ServiceHandle,
                 _peers: Optional[Sequence[ServiceHandle]] = None) -> None:
        if _peers is None:  # a handle from lookup(): the first reducer knows the others
            _peers = handle.call("peers")
        self._handles = [h.with_transport(TensorTransport) if not h.is_owner else h
                         for h in [handle, *_peers]]
        self._handle = self._handles[0]
        self._versions: weakref.WeakKeyDictionary[torch.nn.Module, Tuple[Optional[int], ...]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self._layout: Optional[Tuple[Spec, Dict[str, int], bool]] = None

    @classmethod
    def start(
        cls,
        model: torch.nn.Module,
        optimizer: Callable[[Any], torch.optim.Optimizer],
        *,
        lr_scheduler: Optional[Callable[[torch.optim.Optimizer], Any]] = None,
        reduce_method: str = "sum",
        reduce_batch_size: int = 4,
        flush_after: float = 1.0,
        max_queue: int = 64,
        on_full: str = "block",
        reducers: int = 1,
        device: str = "cpu",
        backend: str = "process",
        name: Optional[str] = None,
        namespace: Optional[str] = None,
        backend_options: Optional[Mapping[str, Any]] = None,
    ) -> GradientServer:
        """Start a server managing a copy of ``model`` on ``device``.

        Args:
            model (torch.nn.Module): the model to train; the server keeps its
                own copy (on ``device``), yours is untouched.
            optimizer (callable): ``optimizer(parameters)`` is called in the
                server, e.g. ``lambda params: torch.optim.SGD(params, lr=0.1)``.
            lr_scheduler (callable or None): ``lr_scheduler(optimizer)``, called
                in the server, stepped after every optimizer step.
            reduce_method (str): ``"sum"`` or ``"mean"`` of a batch's gradients.
            reduce_batch_size (int): gradients per optimizer step.
            flush_after (float): seconds after a batch's first gradient when a
                partial batch is applied anyway.
            max_queue (int): gradients queued in the server at most.
            on_full (str): when the queue is full, ``"block"``: ``push_gradients``
                waits for room; ``"raise"``: it raises ``queue.Full``.
            reducers (int): reducer processes; the parameters are sharded
                among them by size (each reducer steps the optimizer over its
                own share, so use a per-parameter optimizer such as SGD or
                Adam; ``max_queue`` applies to each). At most one per parameter.
            device (str): where the managed model lives (``"cpu"``, ``"cuda:N"``).
            backend (str): ``"process"`` or ``"ray"`` (see ``Service.start``).
            name (str or None): a name for ``lookup`` (of the first reducer,
                which knows the others: ``GradientServer(lookup(name))``).
            namespace (str or None): the name's namespace.
            backend_options (dict or None): see ``Service.start``.

        Returns:
            GradientServer: the owner's client; closing it stops the server
            (after applying every gradient it holds).
        """
        if reduce_method not in _METHODS:
            raise ValueError(f"reduce_method must be one of {_METHODS}, got {reduce_method!r}")
        if on_full not in _ON_FULL:
            raise ValueError(f"on_full must be one of {_ON_FULL}, got {on_full!r}")
        for key, value in (("reduce_batch_size", reduce_batch_size), ("max_queue", max_queue),
                           ("reducers", reducers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} must be a positive int, got {value!r}")
        if not flush_after > 0:
            raise ValueError(f"flush_after must be positive, got {flush_after!r}")
        if not callable(optimizer) or (lr_scheduler is not None and not callable(lr_scheduler)):
            raise TypeError("optimizer and lr_scheduler must be factories (callables) called "
                            "in the server, e.g. lambda params: torch.optim.SGD(params, lr=0.1)")
        if any(not t.is_cpu for t in model.state_dict().values()):
            model = copy.deepcopy(model).cpu()  # the copy travels; the server moves it
        shards = _shard(model, reducers)
        options = dict(backend_options or {})
        if backend == "process" and reducers > 1:
            # Each reducer is a runner of its own: without this, each would run
            # torch on every core, N times over the cores (and crawl).
            options.setdefault("cpu_threads", thread_budget("auto", reducers))
        handles: List[ServiceHandle] = []
        try:
            for k, names in enumerate(shards):
                handles.append(_TorchService.start(
                    _GradientCore, model, optimizer, lr_scheduler, reduce_method,
                    reduce_batch_size, flush_after, max_queue, on_full, device,
                    names=None if reducers == 1 else names, first=k == 0,
                    name=name if name is None or k == 0 else f"{name}.reducer{k}",
                    device=device, backend=backend, namespace=namespace,
                    backend_options=options,
                ))
            if len(handles) > 1:
                owners = {n: k for k, names in enumerate(shards) for n in names}
                handles[0].call("set_peers", handles[1:], owners)
        except BaseException:
            for h in reversed(handles):  # none of them outlives a failed start
                # Broad on purpose: no error of a close may mask why the start failed.
                with contextlib.suppress(Exception):
                    h.close()
            raise
        return cls(handles[0], handles[1:])

    @property
    def handle(self) -> ServiceHandle:
        """ServiceHandle: the server's handle."""
        return self._handle

    @property
    def reducers(self) -> int:
        """int: how many reducer processes share the parameters."""
        return len(self._handles)

    def _get_layout(self) -> Tuple[Spec, Dict[str, int], bool]:
        if self._layout is None:  # asked once per client: it never changes
            layout = self._handle.call("layout")
            with self._lock:
                self._layout = layout
        assert self._layout is not None
        return self._layout

    def push_gradients(self, model: torch.nn.Module, timeout: Optional[float] = None) -> None:
        """Send ``model``'s gradients (``.grad`` of each parameter) to the server.

        Every gradient is checked here first, against the server's model:
        nothing of a push that fails the check is queued, and the server goes
        on serving everyone else.

        Args:
            model (torch.nn.Module): the same architecture as the managed
                model, after ``backward()``; parameters without a gradient
                are skipped.
            timeout (float or None): with ``on_full="block"``, the longest wait
                for room in the queue (None: as long as it takes).

        Raises:
            queue.Full: the queue stayed full (``on_full="raise"``, or ``timeout``).
            ValueError: no gradients; names or shapes unlike the server's
                model; a gradient that cannot be applied (a sparse or other
                non-dense layout, a dtype that is not the parameter's nor
                another floating-point one, a tensor on another device).
        """
        grads = {
            name: p.grad.detach()
            for name, p in model.named_parameters() if p.grad is not None
        }
        if not grads:
            raise ValueError("the model has no gradients to push: call backward() first")
        spec, owner, blocking = self._get_layout()
        check_gradients(grads, spec)
        parts: List[Dict[str, torch.Tensor]] = [{} for _ in self._handles]
        for name, g in grads.items():
            parts[owner[name]][name] = g.cpu()
        if len(parts) == 1 or (blocking and timeout is None):
            # Every shard waits for room as long as it takes: all at once.
            futures = [h.call_async("push_gradients", part, timeout)
                       for h, part in zip(self._handles, parts)]
            accepted = [f.result() for f in futures]
            if not accepted[0]:
                raise queue.Full(f"the gradient queue of {self._handle!r} is full")
            return
        # The first shard decides (it may refuse: nothing was queued then); the
        # others then wait for room, so no part of an accepted push is lost.
        if not self._handle.call("push_gradients", parts[0], timeout):
            raise queue.Full(f"the gradient queue of {self._handle!r} is full")
        futures = [h.call_async("push_gradients", part, None, True)
                   for h, part in zip(self._handles[1:], parts[1:])]
        for f in futures:
            f.result()

    def pull(self, model: torch.nn.Module) -> bool:
        """Load the server's newest parameters into ``model``, on its device.

        Gradients are not cleared. Nothing moves when ``model`` has them already.

        Args:
            model (torch.nn.Module):

        Returns:
            bool: True (``model`` has the newest parameters).
        """
        with self._lock:
            known = self._versions.get(model)
        futures = [h.call_async("pull", None if known is None else known[k])
                   for k, h in enumerate(self._handles)]
        pulled = [f.result() for f in futures]
        if all(p is None for p in pulled):
            return True
        state: Dict[str, torch.Tensor] = {}
        versions = list(known) if known is not None else [None] * len(pulled)
        for k, p in enumerate(pulled):
            if p is not None:
                state.update(p[0])
                versions[k] = p[1]
        complete = all(p is not None for p in pulled)
        _missing, unexpected = model.load_state_dict(state, strict=complete)
        if unexpected:
            raise ValueError(f"the server's model has entries {unexpected} that the pulled "
                             "model does not")
        del state, pulled
        with self._lock:
            self._versions[model] = tuple(versions)
        return True

    def flush(self, timeout: Optional[float] = None) -> int:
        """Apply every gradient pushed so far now (a partial batch too).

        Args:
            timeout (float or None): seconds to wait.

        Returns:
            int: the server's model version afterwards (one per optimizer
            step; with several reducers, the fewest steps any of them made).
        """
        futures = [h.call_async("flush", timeout) for h in self._handles]
        return min(f.result() for f in futures)

    def stats(self) -> Dict[str, Any]:
        """Counters: ``received`` and ``applied`` gradients, optimizer ``steps``, the
        model's ``version``, gradients ``queued``; and the managed model's ``device``.

        With several reducers each counter is the smallest over them
        (``queued`` the largest), and ``"reducers"`` lists each one's own.

        Returns:
            dict:
        """
        each = [f.result() for f in [h.call_async("stats") for h in self._handles]]
        if len(each) == 1:
            return each[0]
        total: Dict[str, Any] = {k: min(s[k] for s in each)
                                 for k in ("received", "applied", "steps", "version")}
        total["queued"] = max(s["queued"] for s in each)
        total["device"] = each[0]["device"]
        total["reducers"] = each
        return total

    def close(self, timeout: Optional[float] = None) -> None:
        """Disconnect; the owner's client also stops the server, applying what it holds."""
        error: Optional[BaseException] = None
        for h in self._handles:  # every one, even when one fails
            try:
                h.close(timeout)
            except BaseException as exc:  # noqa: BLE001 (raised once every handle is closed)
                error = error or exc
        if error is not None:
            raise error

    def __enter__(self) -> GradientServer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
            return
        # Broad on purpose: the exception already propagating matters more.
        with contextlib.suppress(Exception):
            self.close()

    def __reduce__(self) -> Any:
        return (GradientServer, (self._handle, self._handles[1:]))

    def __repr__(self) -> str:
        return f"<GradientServer {self._handle!r}>"


def _shard(model: torch.nn.Module, reducers: int) -> List[List[str]]:
    """Parameter names per reducer: largest first onto the lightest, deterministic."""
    params = list(model.named_parameters())
    if reducers > len(params):
        raise ValueError(f"reducers={reducers}, but the model has {len(params)} parameters: "
                         "at most one reducer per parameter")
    shards: List[List[str]] = [[] for _ in range(reducers)]
    loads = [0] * reducers
    for _index, (name, p) in sorted(enumerate(params), key=lambda e: (-e[1][1].numel(), e[0])):
        k = min(range(reducers), key=lambda k: (loads[k], k))
        shards[k].append(name)
        loads[k] += p.numel()
    return shards


def check_gradients(grads: Mapping[str, Any], spec: Spec,
                    devices: Optional[Sequence[str]] = None) -> None:
    """Raise ``ValueError`` naming the first gradient the server could not apply.

    Args:
        grads (dict): ``{parameter name: gradient}``.
        spec (dict): ``{name: (shape, dtype)}`` of the server's parameters.
        devices (list[str] or None): device types (or devices) a gradient may
            be on; None: any that holds data (not ``meta``), as a client
            copies each gradient to the CPU before sending it.
    """
    for name, g in grads.items():
        if name not in spec:
            raise ValueError(f"gradient for {name!r}, which the server's model does not "
                             f"have; it has: {sorted(spec)}")
        shape, dtype = spec[name]
        if not isinstance(g, torch.Tensor):
            raise ValueError(f"gradient for {name!r} is a {type(g).__name__}, not a tensor")
        if tuple(g.shape) != tuple(shape):
            raise ValueError(f"gradient for {name!r} has shape {tuple(g.shape)}, the "
                             f"parameter {tuple(shape)}")
        # What the reducer's sum and the optimizer take: dense, plain, here.
        if g.layout is not torch.strided or g.is_nested or g.is_quantized:
            kind = "nested" if g.is_nested else "quantized" if g.is_quantized else g.layout
            raise ValueError(f"gradient for {name!r} is a {kind} tensor; the server applies "
                             "dense (torch.strided) gradients: push .to_dense()")
        if g.dtype != dtype and not (g.dtype.is_floating_point and dtype.is_floating_point):
            raise ValueError(f"gradient for {name!r} has dtype {g.dtype}, the parameter "
                             f"{dtype} (another floating-point dtype is cast; this is not)")
        if (g.device.type == "meta" if devices is None
                else g.device.type not in devices and str(g.device) not in devices):
            raise ValueError(f"gradient for {name!r} is on device {str(g.device)!r}, which "
                             f"the server cannot read: move it to the CPU")


class _GradientCore:
    """The server side: runs in the service's process (see the module docstring)."""

    def __init__(
        self, model: torch.nn.Module, optimizer: Callable, lr_scheduler: Optional[Callable],
        reduce_method: str, reduce_batch_size: int, flush_after: float, max_queue: int,
        on_full: str, device: str, names: Optional[Sequence[str]] = None, first: bool = True,
    ) -> None:
        self.device = torch.device(device)
        self.model = model.to(self.device)
        everything = dict(self.model.named_parameters())
        self.spec: Spec = {k: (tuple(p.shape), p.dtype) for k, p in everything.items()}
        mine = set(everything) if names is None else set(names)
        self.params = {k: p for k, p in everything.items() if k in mine}
        # The state_dict entries this reducer answers pulls with: its parameters
        # (under every name they have), and the buffers on the first reducer.
        own = {id(p) for p in self.params.values()}
        shared = {id(p) for p in everything.values()}
        self.state_keys = [k for k, v in self.model.state_dict(keep_vars=True).items()
                           if id(v) in own or (first and id(v) not in shared)]
        self._peers: List[ServiceHandle] = []
        self._owners = {k: 0 for k in everything}
        self.optimizer = optimizer(list(self.params.values()))
        self.scheduler = lr_scheduler(self.optimizer) if lr_scheduler is not None else None
        self.mean = reduce_method == "mean"
        self.batch_size = reduce_batch_size
        self.flush_after = flush_after
        self.block = on_full == "block"
        self.queue: queue.Queue = queue.Queue(max_queue)
        self.lock = threading.Lock()  # the model's parameters: a pull never sees half a step
        self.done = threading.Condition()  # the counters; notified after each step
        self.version = 0
        self.received = self.applied = self.steps = 0
        self.error: Optional[BaseException] = None
        self._snapshot: Optional[Dict[str, torch.Tensor]] = None
        self._snapshot_version = -1
        self._thread = threading.Thread(target=self._reduce_loop, name="easycore-gradients",
                                        daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ service calls
    def set_peers(self, peers: List[ServiceHandle], owners: Dict[str, int]) -> None:
        """On the first reducer: the other reducers' handles, and whose each parameter is."""
        self._peers = list(peers)
        self._owners = dict(owners)

    def peers(self) -> List[ServiceHandle]:
        """The other reducers (a client made from the first one's handle needs them)."""
        return list(self._peers)

    def layout(self) -> Tuple[Spec, Dict[str, int], bool]:
        """(shape and dtype of every parameter, its reducer, whether pushes block)."""
        return self.spec, dict(self._owners), self.block

    def push_gradients(self, grads: Dict[str, torch.Tensor], timeout: Optional[float],
                       force_block: bool = False) -> bool:
        self._check()
        for name in grads:
            if name in self.spec and name not in self.params:
                raise ValueError(f"gradient for {name!r}: another reducer of this sharded "
                                 "server holds that parameter; push through GradientServer, "
                                 "which splits a push among them")
        mine = {k: self.spec[k] for k in self.params}
        check_gradients(grads, mine, ("cpu", str(self.device), self.device.type))
        if not is_remote_call():  # used in-process: the caller's tensors are the caller's
            grads = {k: v.detach().clone() for k, v in grads.items()}
        if not self._put(grads, self.block or force_block, timeout):
            return False
        with self.done:
            self.received += 1
        return True

    def pull(self, known_version: Optional[int]) -> Optional[tuple]:
        self._check()
        with self.lock:
            if known_version == self.version:
                return None
            if self._snapshot_version != self.version:  # one copy per version pulled
                state = self.model.state_dict()
                self._snapshot = {k: state[k].detach().to("cpu", copy=True)
                                  for k in self.state_keys}
                self._snapshot_version = self.version
            return self._snapshot, self.version

    def flush(self, timeout: Optional[float]) -> int:
        self._check()
        with self.done:
            target = self.received
        self._put(_FLUSH, True, timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.done:
            while self.applied < target and self.error is None:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"flush: {target - self.applied} gradients not applied "
                                       f"within {timeout} s")
                self.done.wait(0.1 if remaining is None else min(0.1, remaining))
            version = self.version
        self._check()
        return version

    def stats(self) -> Dict[str, Any]:
        with self.queue.mutex:  # gradients only: a flush's marker may still sit there
            queued = sum(1 for item in self.queue.queue if isinstance(item, dict))
        with self.done:
            return {"received": self.received, "applied": self.applied, "steps": self.steps,
                    "version": self.version, "queued": queued, "device": str(self.device)}

    def close(self) -> None:
        """Apply what is queued, then stop the reducer."""
        if self.error is None:
            self._put(_STOP, True, None)
            self._thread.join()
        self._check()

    # ------------------------------------------------------------ reducer
    def _put(self, item: Any, block: bool, timeout: Optional[float]) -> bool:
        # Waits in short steps: a reducer that failed must not leave us waiting.
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                self.queue.put(item, timeout=0.1) if block else self.queue.put_nowait(item)
                return True
            except queue.Full:
                self._check()
                if not block or (deadline is not None and time.monotonic() >= deadline):
                    return False

    def _check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"the gradient server's reducer failed: {self.error!r}") \
                from self.error

    def _reduce_loop(self) -> None:
        try:
            while True:
                batch: List[Dict[str, torch.Tensor]] = []
                item = self.queue.get()
                deadline = time.monotonic() + self.flush_after
                while item not in (_STOP, _FLUSH):
                    batch.append(item)
                    remaining = deadline - time.monotonic()
                    if len(batch) >= self.batch_size or remaining <= 0:
                        break
                    try:
                        item = self.queue.get(timeout=remaining)
                    except queue.Empty:
                        break
                if batch:
                    self._apply(batch)
                if item is _STOP:
                    return
        except BaseException as exc:  # noqa: BLE001 (handed to the callers waiting on `done`)
            with self.done:
                self.error = exc
                self.done.notify_all()

    def _apply(self, batch: List[Dict[str, torch.Tensor]]) -> None:
        sums: Dict[str, torch.Tensor] = {}
        counts: Dict[str, int] = {}
        for grads in batch:
            for name, g in grads.items():
                total = sums.get(name)
                if total is None:  # a copy of its own, in the parameter's dtype, here
                    sums[name] = g.to(self.device, self.params[name].dtype, copy=True)
                else:  # in place: no new tensor per gradient
                    total.add_(g.to(self.device))
                counts[name] = counts.get(name, 0) + 1
        with self.lock:
            for name, p in self.params.items():
                total = sums.get(name)
                if total is not None and self.mean:
                    total = total / counts[name]
                p.grad = None if total is None else total.to(p.dtype)
            self.optimizer.step()
            if self.scheduler is not None:
                self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            with self.done:
                self.version += 1
                self.steps += 1
                self.applied += len(batch)
                self.done.notify_all()
