"""The public runners: :class:`BaseRunner`, :class:`UnorderedRunner`, :class:`OrderedRunner`.

Subclass one and override the six static hooks. ``producer_*`` run in one
worker per device, each with its own copy of ``cfg``; ``consumer_*`` run in
the thread that calls the runner, with a fresh copy of ``cfg`` per call.

Seams for other back-ends (override in a subclass, no copying of the runner):

* ``get_mp_context(self) -> multiprocessing.context.BaseContext``: which
  multiprocessing (context, start method) starts the workers.
* ``validate_device(cls, device: str) -> str``: check / normalise one device
  string (classmethod; ``normalize_devices`` calls it for each).
* ``setup_worker(cls, device: str) -> None``: runs in each worker before
  ``producer_init`` (classmethod; e.g. ``torch.cuda.set_device``).
* ``make_transport(self) -> Transport`` / ``transport_class``: how results
  are encoded in the worker and decoded for the consumer.
* ``backends`` / ``make_backend(self) -> Backend``: who runs the producers;
  ``backend="process"`` by default, extra keyword arguments of the
  constructor go to the back-end class.
"""

from __future__ import annotations

import importlib
import math
import multiprocessing
import threading
from multiprocessing.context import BaseContext
from typing import Any, ClassVar, Dict, Iterable, List, Mapping, Optional, Union

from easycore.common.config import CfgNode

from .backend import Backend
from .chunking import AdaptiveChunker
from .errors import RunnerClosedError
from .pipeline import Pipeline
from .process_backend import ProcessBackend
from .progress import ProgressOption
from .transport import SharedMemoryTransport, Transport

__all__ = ["BaseRunner", "UnorderedRunner", "OrderedRunner"]


class BaseRunner:
    """A multi-process runner whose consumer receives data unordered.

    The runner starts one process per device for the producers and runs the
    consumer in the calling thread. It is reusable: workers (and whatever
    ``producer_init`` put in their cfg) live until :meth:`close`.

    Errors never hang a call: an exception in any hook, or a worker that
    dies, is raised by the call (init hooks: by the constructor or
    :meth:`activate`) within moments, naming the device and carrying the
    worker's traceback. After a failed call (KeyboardInterrupt included) the
    workers are gone and the runner is closed: :attr:`is_activate` is False,
    calling it raises :class:`RunnerClosedError`, :meth:`activate` starts it
    again. ``producer_end`` runs on :meth:`close`, not after a failure.

    Not thread-safe: one call at a time.
    """

    #: deliver results in input order
    ordered: ClassVar[bool] = False
    #: back-end name -> class, or "module:Class" imported on first use (Ray is optional)
    backends: ClassVar[Dict[str, Union[type, str]]] = {
        "process": ProcessBackend,
        "ray": "easycore.common.parallel.ray_backend:RayBackend",
    }
    #: result transport of the process back-end
    transport_class: ClassVar[type] = SharedMemoryTransport
    #: start method when none is given (None: the platform's default)
    default_start_method: ClassVar[Optional[str]] = None

    def __init__(
        self,
        devices: Union[int, Iterable[str]],
        cfg: Optional[Mapping[str, Any]] = None,
        queue_scale: float = 3.0,
        *,
        progress: ProgressOption = False,
        start_method: Optional[str] = None,
        backend: str = "process",
        **backend_options: Any,
    ) -> None:
        """
        Args:
            devices (int or Iterable): If the `devices` is `int`, it will use
                `devices` cpu to do the work. If the `devices` is an iterable
                object, such as list, it will use the devices specified by the
                iterable object, such as ["cpu", "cuda:0", "cuda:1"].
            cfg (easycore.common.config.CfgNode): user custom data (a dict is
                converted); defaults to an empty CfgNode. The runner keeps a deep
                copy: later changes to your object do not reach it.
            queue_scale (float): scale the queues for communication between
                processes: each worker holds at most ``ceil(queue_scale)``
                chunks at a time, which bounds how far the input is read ahead.
            progress (bool or dict): show a tqdm progress bar (items done and
                rate) on every call; a dict is passed to tqdm as keyword
                arguments. Keyword-only, as are the next ones.
            start_method (str or None): "fork", "forkserver" or "spawn"
                (None: ``default_start_method``, else the platform's default).
            backend (str): which back-end runs the producers (``backends``):
                "process" (local worker processes) or "ray" (one Ray actor per
                device, see :mod:`.ray_backend`; needs the ``ray`` extra:
                ``pip install 'easycore-parallel[ray]'``).
            **backend_options: extra keyword arguments for the back-end class.
                With ``backend="ray"``: ``address`` (str or None, default
                None), passed to ``ray.init``: None connects to a running local
                Ray or starts one, ``"auto"``, ``"host:port"`` or
                ``"ray://host:port"`` join a cluster; ``ray_init_kwargs``
                (dict), any other ``ray.init`` arguments (e.g. ``runtime_env``,
                ``num_cpus``). Both are ignored when this process is already
                connected to Ray; a Ray the runner started is shut down on close.
        """
        if queue_scale <= 0:
            raise ValueError(f"queue_scale must be positive, got {queue_scale!r}")
        if backend not in self.backends:
            raise ValueError(f"unknown backend {backend!r}; known: {sorted(self.backends)}")
        self._devices = self.normalize_devices(devices)
        if backend == "process":
            # Local workers can only use what this machine has; other back-ends
            # (Ray) place devices on their own nodes, which may differ.
            for device in self._devices:
                self.check_available(device)
        self._cfg = self._snapshot_cfg(cfg)
        self._queue_scale = float(queue_scale)
        self._progress = progress
        self._start_method = start_method
        self._backend_name = backend
        self._backend_options = dict(backend_options)
        self._backend: Optional[Backend] = None
        self._busy = threading.Lock()
        self.activate()

    @staticmethod
    def _snapshot_cfg(cfg: Optional[Mapping[str, Any]]) -> CfgNode:
        if cfg is None:
            return CfgNode()
        if isinstance(cfg, CfgNode):
            return cfg.copy()
        return CfgNode(cfg)

    # ================================================================= hooks
    @staticmethod
    def producer_init(device: str, cfg: CfgNode) -> None:
        """
        function for producer initialization.

        Args:
            device (str): device for the this process.
            cfg (easycore.common.config.CfgNode): config of this process, you can use it to
                transfer data to `producer_work` and `producer_end` function.
        """
        pass

    @staticmethod
    def producer_work(device: str, cfg: CfgNode, data: Any) -> Any:
        """
        function specify how the producer processes the data.

        Args:
            device (str): device for this process.
            cfg (easycore.common.config.CfgNode): config of this process, you can use it to
                get data from `producer_init` function and transfer data to the next
                `producer_work` and `producer_end` function.
            data (Any): data get from input of `__call__` method.

        Returns:
            Any: processed data
        """
        return data

    @staticmethod
    def producer_end(device: str, cfg: CfgNode) -> None:
        """
        function after finishing all of its task and before close the process.

        Args:
            device (str): device for this process.
            cfg (easycore.common.config.CfgNode): config of this process, you can use it to
                get data from `producer_init` and `producer_work` function.
        """
        pass

    @staticmethod
    def consumer_init(cfg: CfgNode) -> None:
        """
        function for consumer initialization.

        Args:
            cfg (easycore.common.config.CfgNode): config of this process, you can use it to
                transfer data to `consumer_work` and `consumer_end` function.
        """
        pass

    @staticmethod
    def consumer_work(cfg: CfgNode, data: Any) -> None:
        """
        function specify how the consumer processes the data from producers.

        Args:
            cfg (easycore.common.config.CfgNode): config of this process, you can use it to
                get data from `consumer_init` function and transfer data to the next
                `consumer_work` and `consumer_end` function.
            data (Any): one result of `producer_work`.
        """
        pass

    @staticmethod
    def consumer_end(cfg: CfgNode) -> Any:
        """
        function after receiving all data from producers.

        Args:
            cfg (easycore.common.config.CfgNode): config of this process, you can use it
                get data from `consumer_work` function.

        Returns:
            Any: processed data
        """
        return None

    # ================================================================= seams
    @classmethod
    def normalize_devices(cls, devices: Union[int, Iterable[str]]) -> List[str]:
        """Turn the ``devices`` argument into a list of device strings.

        Args:
            devices (int or Iterable): a count of "cpu" workers, or device strings.

        Returns:
            list[str]: validated by :meth:`validate_device`.
        """
        if isinstance(devices, bool) or not isinstance(devices, (int, Iterable)):
            raise TypeError(f"devices must be an int or an iterable of str, got {devices!r}")
        if isinstance(devices, int):
            if devices < 1:
                raise ValueError(f"devices must be at least 1, got {devices}")
            devices = ["cpu"] * devices
        if isinstance(devices, str):  # "cpu" would otherwise become ["c", "p", "u"]
            devices = [devices]
        result = [cls.validate_device(d) for d in devices]
        if not result:
            raise ValueError("devices is empty")
        return result

    @classmethod
    def validate_device(cls, device: str) -> str:
        """Check one device string; override to accept only what you support.

        Args:
            device (str): e.g. "cpu" or "cuda:0".

        Returns:
            str: the device, possibly normalised.
        """
        if not isinstance(device, str) or not device.strip():
            raise ValueError(f"a device must be a non-empty str, got {device!r}")
        return device.strip()

    @classmethod
    def check_available(cls, device: str) -> None:
        """Check that this machine has ``device``; override to raise if not.

        Called by the constructor for each device (after :meth:`validate_device`)
        when the workers are local processes, before any worker starts.

        Args:
            device (str): a device returned by :meth:`validate_device`.
        """

    @classmethod
    def setup_worker(cls, device: str) -> None:
        """Runs in each worker process before ``producer_init``.

        Args:
            device (str): this worker's device.
        """

    def get_mp_context(self) -> BaseContext:
        """The multiprocessing context that starts the workers.

        Returns:
            multiprocessing.context.BaseContext:
        """
        return multiprocessing.get_context(self._start_method or self.default_start_method)

    def make_transport(self) -> Transport:
        """A fresh transport for the results of one activation.

        Returns:
            Transport:
        """
        return self.transport_class()

    def make_backend(self) -> Backend:
        """A fresh, unstarted back-end for one activation.

        Returns:
            Backend:
        """
        backend_cls = self.backends[self._backend_name]
        if isinstance(backend_cls, str):  # "module:Class": optional back-ends load lazily
            module, _, name = backend_cls.partition(":")
            backend_cls = getattr(importlib.import_module(module), name)
        return backend_cls.from_runner(self, self._cfg, **self._backend_options)

    # ============================================================= lifecycle
    @property
    def is_activate(self) -> bool:
        """bool: whether the runner is alive."""
        return self._backend is not None

    @property
    def devices(self) -> List[str]:
        """list[str]: one worker per device."""
        return list(self._devices)

    @property
    def worker_pids(self) -> List[Optional[int]]:
        """list: process ids of the workers (empty when closed)."""
        return list(self._backend.pids) if self._backend is not None else []

    def activate(self) -> None:
        """Restart all processes if this runner is closed.

        Runs ``setup_worker`` and ``producer_init`` in every worker and waits for
        them; raises their error (``WorkerError``) if one fails, leaving the
        runner closed.
        """
        if self._backend is not None:
            return
        backend = self.make_backend()
        backend.start()  # cleans up after itself if it raises
        self._backend = backend

    def close(self, timeout: Optional[float] = None) -> None:
        """Shutdown all processes if this runner is alive.

        Runs ``producer_end`` in every worker, then joins them. Idempotent.

        Args:
            timeout (float or None): seconds to wait for ``producer_end``; after
                that the workers are killed and ``TimeoutError`` is raised.
        """
        backend, self._backend = self._backend, None
        if backend is not None:
            backend.stop(timeout)  # raises a producer_end error after cleaning up

    def __enter__(self) -> BaseRunner:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # the exception already propagating matters more than close's
            self.close()
        except Exception:
            pass

    def __call__(self, data_iter: Iterable, *, progress: Optional[ProgressOption] = None) -> Any:
        """
        Args:
            data_iter (Iterable): iterator of data; read lazily, never ahead of
                what the queues hold, so it may be a long generator.
            progress (bool or dict or None): override the constructor's ``progress``.

        Returns:
            Any: result, what ``consumer_end`` returned.
        """
        if not self._busy.acquire(blocking=False):
            raise RuntimeError(f"{type(self).__name__} is already running a call")
        try:
            backend = self._backend
            if backend is None:
                raise RunnerClosedError(
                    f"{type(self).__name__} is closed; call activate() to start it again"
                )
            pipeline = Pipeline(
                type(self),
                backend,
                self._cfg.copy(),
                data_iter,
                ordered=self.ordered,
                credits=math.ceil(self._queue_scale),
                chunker=AdaptiveChunker(),
                progress=self._progress if progress is None else progress,
                desc=type(self).__name__,
            )
            try:
                return pipeline.run()
            except BaseException:
                self._backend = None
                backend.abort()
                raise
        finally:
            self._busy.release()

    def __repr__(self) -> str:
        state = "active" if self.is_activate else "closed"
        return f"<{type(self).__name__} devices={self._devices!r} {state}>"


class UnorderedRunner(BaseRunner):
    """A multi-process runner whose consumer receives data unordered (as finished).

    The runner starts one process per device for the producers and runs the
    consumer in the calling thread. See :class:`BaseRunner`.
    """

    ordered = False


class OrderedRunner(BaseRunner):
    """A multi-process runner whose consumer receives data in input order.

    The runner starts one process per device for the producers and runs the
    consumer in the calling thread. See :class:`BaseRunner`.
    """

    ordered = True
