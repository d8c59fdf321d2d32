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
"""

from __future__ import annotations

import copy
import queue
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional

import torch

from easycore.common.parallel.services import Service, ServiceHandle, is_remote_call
from easycore.common.parallel.services.server import ServiceHost

from .runner import UnorderedRunner
from .transport import TensorTransport

__all__ = ["GradientServer"]

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
            model, lambda params: torch.optim.SGD(params, lr=0.1), reduce_batch_size=1
        )
        with server:
            model(torch.ones(8, 3)).pow(2).mean().backward()
            server.push_gradients(model)
            server.flush()                 # apply what was pushed, now
            assert server.pull(model)      # model has the updated parameters
            assert server.stats()["applied"] == 1
        ```
    """

    def __init__(self, handle: ServiceHandle) -> None:
        self._handle = handle.with_transport(TensorTransport) if not handle.is_owner else handle
        self._versions: weakref.WeakKeyDictionary[torch.nn.Module, int] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

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
            device (str): where the managed model lives (``"cpu"``, ``"cuda:N"``).
            backend (str): ``"process"`` or ``"ray"`` (see ``Service.start``).
            name (str or None): a name for ``lookup``.
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
        for key, value in (("reduce_batch_size", reduce_batch_size), ("max_queue", max_queue)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} must be a positive int, got {value!r}")
        if not flush_after > 0:
            raise ValueError(f"flush_after must be positive, got {flush_after!r}")
        if not callable(optimizer) or (lr_scheduler is not None and not callable(lr_scheduler)):
            raise TypeError("optimizer and lr_scheduler must be factories (callables) called "
                            "in the server, e.g. lambda params: torch.optim.SGD(params, lr=0.1)")
        if any(not t.is_cpu for t in model.state_dict().values()):
            model = copy.deepcopy(model).cpu()  # the copy travels; the server moves it
        handle = _TorchService.start(
            _GradientCore, model, optimizer, lr_scheduler, reduce_method, reduce_batch_size,
            flush_after, max_queue, on_full, device,
            name=name, device=device, backend=backend, namespace=namespace,
            backend_options=backend_options,
        )
        return cls(handle)

    @property
    def handle(self) -> ServiceHandle:
        """ServiceHandle: the server's handle."""
        return self._handle

    def push_gradients(self, model: torch.nn.Module, timeout: Optional[float] = None) -> None:
        """Send ``model``'s gradients (``.grad`` of each parameter) to the server.

        Args:
            model (torch.nn.Module): the same architecture as the managed
                model, after ``backward()``; parameters without a gradient
                are skipped.
            timeout (float or None): with ``on_full="block"``, the longest wait
                for room in the queue (None: as long as it takes).

        Raises:
            queue.Full: the queue stayed full (``on_full="raise"``, or ``timeout``).
            ValueError: no gradients, or names or shapes unlike the server's model.
        """
        grads = {
            name: p.grad.detach().cpu()
            for name, p in model.named_parameters() if p.grad is not None
        }
        if not grads:
            raise ValueError("the model has no gradients to push: call backward() first")
        if not self._handle.call("push_gradients", grads, timeout):
            raise queue.Full(f"the gradient queue of {self._handle!r} is full")

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
        pulled = self._handle.call("pull", known)
        if pulled is not None:
            state, version = pulled
            model.load_state_dict(state)
            del state
            with self._lock:
                self._versions[model] = version
        return True

    def flush(self, timeout: Optional[float] = None) -> int:
        """Apply every gradient pushed so far now (a partial batch too).

        Args:
            timeout (float or None): seconds to wait.

        Returns:
            int: the server's model version afterwards (one per optimizer step).
        """
        return self._handle.call("flush", timeout)

    def stats(self) -> Dict[str, Any]:
        """Counters: ``received`` and ``applied`` gradients, optimizer ``steps``, the
        model's ``version``, gradients ``queued``; and the managed model's ``device``.

        Returns:
            dict:
        """
        return self._handle.call("stats")

    def close(self, timeout: Optional[float] = None) -> None:
        """Disconnect; the owner's client also stops the server, applying what it holds."""
        self._handle.close(timeout)

    def __enter__(self) -> GradientServer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._handle.__exit__(exc_type, exc, tb)

    def __reduce__(self) -> Any:
        return (GradientServer, (self._handle,))

    def __repr__(self) -> str:
        return f"<GradientServer {self._handle!r}>"


class _GradientCore:
    """The server side: runs in the service's process (see the module docstring)."""

    def __init__(
        self, model: torch.nn.Module, optimizer: Callable, lr_scheduler: Optional[Callable],
        reduce_method: str, reduce_batch_size: int, flush_after: float, max_queue: int,
        on_full: str, device: str,
    ) -> None:
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.params = dict(self.model.named_parameters())
        self.optimizer = optimizer(self.model.parameters())
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
    def push_gradients(self, grads: Dict[str, torch.Tensor], timeout: Optional[float]) -> bool:
        self._check()
        for name, g in grads.items():
            p = self.params.get(name)
            if p is None:
                raise ValueError(f"gradient for {name!r}, which the server's model does not "
                                 f"have; it has: {sorted(self.params)}")
            if tuple(g.shape) != tuple(p.shape):
                raise ValueError(f"gradient for {name!r} has shape {tuple(g.shape)}, the "
                                 f"parameter {tuple(p.shape)}")
        if not is_remote_call():  # used in-process: the caller's tensors are the caller's
            grads = {k: v.detach().clone() for k, v in grads.items()}
        if not self._put(grads, self.block, timeout):
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
                self._snapshot = {k: v.detach().to("cpu", copy=True)
                                  for k, v in self.model.state_dict().items()}
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
        with self.done:
            return {"received": self.received, "applied": self.applied, "steps": self.steps,
                    "version": self.version, "queued": self.queue.qsize(),
                    "device": str(self.device)}

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
        except BaseException as exc:
            with self.done:
                self.error = exc
                self.done.notify_all()

    def _apply(self, batch: List[Dict[str, torch.Tensor]]) -> None:
        sums: Dict[str, torch.Tensor] = {}
        counts: Dict[str, int] = {}
        for grads in batch:
            for name, g in grads.items():
                g = g.to(self.device)
                sums[name] = sums[name] + g if name in sums else g.clone()
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
