"""The public runners: [`BaseRunner`][easycore.common.parallel.BaseRunner],
[`UnorderedRunner`][easycore.common.parallel.UnorderedRunner],
[`OrderedRunner`][easycore.common.parallel.OrderedRunner].

Subclass one and override the static hooks. ``producer_*`` run in one worker
per device, each with its own copy of ``cfg``; ``consumer_*`` run in the
thread that calls the runner, with a fresh copy of ``cfg`` per call.

A runner is a client of the [`engine`][easycore.common.parallel.engine.core],
built through its door ([`start`][easycore.common.parallel.engine.door.start])
with the ``FailFast`` policy: a call is one job whose items the calling
thread reads lazily and pumps, so ``consumer_work`` (and a Ctrl-C) lands
there. A call fails as a whole: the first error (a hook that raised, a worker
that died) ends it and closes the runner; a task over ``task_timeout`` fails
the call but only replaces its worker.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable

from easycore.common.config import CfgNode

from ._lazy import bind
from ._os import stacks as _stacks
from ._os import threads as _threads
from ._os.threads import ThreadsOption
from .engine import door
from .engine.door import BACKENDS, Backend, BackendSpec, DevicePolicy
from .errors import RunnerClosedError
from .transport.shared_memory import SharedMemoryTransport
from .worker.executor import RunnerProgram, WorkerProgram

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing, the caller's parts, insights (when asked for)
    from multiprocessing.context import BaseContext
    from typing import Any, ClassVar, Dict, List, Mapping, Optional, Union

    from easycore.common.config.lazy_copy import TemplateCache, lazy_copy

    from ._runner_call import run_call
    from .engine.chunking import AdaptiveChunker
    from .engine.core import Engine
    from .insights import Insights, Recorder
    from .options import WorkerOptions
    from .progress import ProgressOption
    from .transport.interface import Transport

# The caller's parts (the options, the engine, a call's job and sink, the lazy
# copy of cfg) are imported when a runner is made, not with this module: a
# runner's ``spawn`` or ``forkserver`` worker imports its runner's module.
_CALLERS_PARTS = {
    "easycore.common.config.lazy_copy": "lazy_copy", "._runner_call": "run_call",
    ".engine.chunking": "AdaptiveChunker", ".options": "WorkerOptions",
}

__all__ = ["BaseRunner", "OrderedRunner", "UnorderedRunner"]


class BaseRunner(door.WorkerStacks):
    """A multi-process runner whose consumer receives data unordered.

    The runner starts one process per device for the producers and runs the
    consumer in the calling thread. It is reusable: workers (and whatever
    ``producer_init`` put in their cfg) live until
    [`close`][easycore.common.parallel.BaseRunner.close].

    Errors never hang a call: an exception in any hook, or a worker that
    dies, is raised by the call (init hooks: by the constructor or
    [`activate`][easycore.common.parallel.BaseRunner.activate]) within moments,
    naming the device and carrying the worker's traceback. After a failed call
    (KeyboardInterrupt included) the workers are gone and the runner is closed:
    [`is_activate`][easycore.common.parallel.BaseRunner.is_activate] is False,
    calling it raises [`RunnerClosedError`][easycore.common.parallel.RunnerClosedError],
    `activate()` starts it again. One exception: a task that overran
    ``task_timeout`` raises [`TaskTimeoutError`][easycore.common.parallel.TaskTimeoutError]
    and only its worker is replaced; the runner stays open. ``producer_end``
    runs on `close()`, not after a failure; a worker that is ended after a
    failure gets ``SIGTERM`` first (the processes it started as daemons end
    with it), then ``SIGKILL`` with every process it started.

    Not thread-safe: one call at a time; `close()` from another thread ends a
    running call with `RunnerClosedError`.
    """

    #: deliver results in input order
    ordered: ClassVar[bool] = False
    #: back-end name -> class, or "module:Class" imported on first use (Ray is
    #: optional): a copy of ``policy.BACKENDS``
    backends: ClassVar[Dict[str, Union[type, str]]] = dict(BACKENDS)
    #: what devices mean: validation, availability, worker set-up, start method, transport
    device_policy: ClassVar[DevicePolicy] = DevicePolicy()
    #: transport of the process back-end: set on a subclass, it replaces the
    #: device policy's; left alone, the policy's is used
    transport_class: ClassVar[type] = SharedMemoryTransport
    #: start method when none is given (None: the device policy's choice)
    default_start_method: ClassVar[Optional[str]] = None
    #: threads per worker when the constructor is not told (``"auto"``, an int or
    #: None); on an instance, the resolved number (None: libraries' defaults)
    cpu_threads: ThreadsOption = "auto"

    def __init__(
        self,
        devices: Union[int, Iterable[str]],
        cfg: Optional[Mapping[str, Any]] = None,
        queue_scale: float = 3.0,
        *,
        progress: ProgressOption = False,
        start_method: Optional[str] = None,
        backend: str = "process",
        cpu_threads: ThreadsOption = "auto",
        task_timeout: Optional[float] = None,
        insights: bool = False,
        max_worker_memory: Optional[Union[int, str]] = None,
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
                copy: later changes to your object do not reach it. Its large
                arrays reach the workers through shared memory, once.
            queue_scale (float): scale the queues for communication between
                processes: each worker holds at most ``ceil(queue_scale)``
                chunks at a time, which bounds how far the input is read ahead.
            progress (bool or dict): show a tqdm progress bar (items done and
                rate) on every call; a dict is passed to tqdm as keyword
                arguments. Keyword-only, as are the next ones.
            start_method (str or None): "fork", "forkserver" or "spawn"
                (None: ``default_start_method``, else the platform's default).
            backend (str): which back-end runs the producers (``backends``):
                "process" (local worker processes), "thread" (threads of this
                process: no pickling, for producers that release the GIL) or
                "ray" (one Ray actor per device, see
                [`backends.ray`][easycore.common.parallel.backends.ray]; needs the
                ``ray`` extra: ``pip install 'easycore-parallel[ray]'``).
            cpu_threads (int or str or None): threads each worker's thread
                pools (BLAS, OpenMP, torch) may use: ``"auto"`` (the default,
                or the class's ``cpu_threads``) gives each worker
                ``max(1, cpus // workers)`` of the CPUs this process may run
                on; an int sets it; None leaves the libraries' defaults (one
                thread per core in *every* worker). ``runner.cpu_threads`` is
                then the number each worker got.
            task_timeout (float or None): seconds one item may run in a
                worker; an item running longer makes the call raise
                [`TaskTimeoutError`][easycore.common.parallel.TaskTimeoutError],
                its worker is killed and replaced. A call can override it.
            insights (bool): count where each call's time goes (workers' user
                code, moving data and waiting; the consumer's hooks, waiting
                for results and reading the input): see
                [`insights`][easycore.common.parallel.BaseRunner.insights]. Off
                by default; on, it costs a few timer reads per chunk.
            max_worker_memory (int or str or None): replace a worker whose resident
                memory passed this (bytes, or "2 GB"), as Pool's.
            **backend_options: the back-end's keyword arguments: with backend="ray",
                address, ray_init_kwargs and capacity_timeout, as Pool's.
        """
        bind(globals(), _CALLERS_PARTS)  # the first runner imports them
        # Every option checked at once, as every client checks them (``options``).
        options = self._options = WorkerOptions(
            backend=backend, start_method=start_method, task_timeout=task_timeout,
            queue_scale=queue_scale, cpu_threads=cpu_threads, progress=progress,
            insights=insights, max_worker_memory=max_worker_memory,
            backend_options=backend_options,
        )
        options.check_backend(self.backends)
        self._devices = self.normalize_devices(devices)
        # "auto" defers to the class: a subclass may set ``cpu_threads = N`` (or None).
        option = type(self).cpu_threads if cpu_threads == _threads.AUTO else cpu_threads
        self._threads = _threads.budget(option, len(self._devices))
        self.cpu_threads = self._threads
        if options.local:
            # Local workers can only use what this machine has; other back-ends
            # (Ray) place devices on their own nodes, which may differ.
            for device in self._devices:
                self.check_available(device)
        self._cfg = self._snapshot_cfg(cfg)
        self._cfg_templates: TemplateCache = {}
        self._engine: Optional[Engine] = None
        self._chunker = AdaptiveChunker()
        self._recorder: Optional[Recorder] = door.recorder(self._devices) if insights else None
        self._insights: Optional[Insights] = None
        self._busy = threading.Lock()
        self._lifecycle = threading.Lock()
        self.activate()

    @staticmethod
    def _snapshot_cfg(cfg: Optional[Mapping[str, Any]]) -> CfgNode:
        if cfg is None:
            return CfgNode()
        if isinstance(cfg, CfgNode):
            return cfg.copy()
        return CfgNode(cfg)

    def _consumer_cfg(self) -> CfgNode:
        # A fresh copy per call that copies only what the call touches: a
        # deep copy of a 10k-key cfg cost ~25 ms a call. The snapshot it reads
        # from is this runner's own and never changes.
        return lazy_copy(self._cfg, self._cfg_templates)

    # ================================================================= hooks
    @staticmethod
    def producer_init(device: str, cfg: CfgNode) -> None:
        """Set up one producer: runs once in each worker (a replacement too), before its first item.

        Load a model, open a file or seed a generator here, and keep it on
        ``cfg`` for `producer_work` and `producer_end`.

        Args:
            device (str): the device this worker serves, e.g. ``"cpu"`` or ``"cuda:0"``.
            cfg (easycore.common.config.CfgNode): this worker's own copy of the
                runner's ``cfg``; what you store on it here stays for the
                worker's lifetime.
        """
        pass

    @staticmethod
    def producer_work(device: str, cfg: CfgNode, data: Any) -> Any:
        """Process one item: runs in a worker, once for each input item.

        Args:
            device (str): the device this worker serves.
            cfg (easycore.common.config.CfgNode): this worker's copy of the
                runner's ``cfg``, with whatever `producer_init` and earlier
                calls stored on it.
            data (Any): one item of the iterable passed to `__call__`.

        Returns:
            Any: the result, handed to `consumer_work` in the calling process
                (so it must be picklable with the process and Ray back-ends).
        """
        return data

    @staticmethod
    def producer_end(device: str, cfg: CfgNode) -> None:
        """Tear down one producer: runs once in each worker when the runner closes.

        Release what `producer_init` acquired. It runs on `close()`, not after
        a failure (a worker ended by an error is stopped without it).

        Args:
            device (str): the device this worker serves.
            cfg (easycore.common.config.CfgNode): this worker's copy of the
                runner's ``cfg``, as `producer_init` and `producer_work` left it.
        """
        pass

    @staticmethod
    def consumer_init(cfg: CfgNode) -> None:
        """Set up the consumer: runs in the calling process at the start of each call.

        Initialise the totals or open the outputs that `consumer_work` fills in.

        Args:
            cfg (easycore.common.config.CfgNode): a fresh copy of the runner's
                ``cfg`` for this call, shared with `consumer_work` and
                `consumer_end`.
        """
        pass

    @staticmethod
    def consumer_work(cfg: CfgNode, data: Any) -> None:
        """Take in one result: runs in the calling process, once for each item.

        An ordered runner delivers the results in input order; an unordered one
        as they arrive.

        Args:
            cfg (easycore.common.config.CfgNode): this call's consumer ``cfg``, as
                `consumer_init` and earlier calls left it.
            data (Any): one result of `producer_work`.
        """
        pass

    @classmethod
    def consumer_work_batch(cls, cfg: CfgNode, batch: List[Any]) -> None:
        """Consume several results at once; by default ``consumer_work`` for each.

        Override it (as a ``@staticmethod`` taking ``(cfg, batch)``) when
        handling results one by one costs more than the producers: with tiny
        items, calling ``consumer_work`` is most of the caller's time, and
        ``cfg.total += sum(batch)`` is far cheaper than a call per item.

        Args:
            cfg (easycore.common.config.CfgNode): the consumer's config.
            batch (list): consecutive results (in input order for an ordered runner).
        """
        work = cls.consumer_work
        for data in batch:
            work(cfg, data)

    @staticmethod
    def consumer_end(cfg: CfgNode) -> Any:
        """Finish the call: runs in the calling process after the last result.

        Args:
            cfg (easycore.common.config.CfgNode): this call's consumer ``cfg``, as
                `consumer_work` left it.

        Returns:
            Any: what the call to the runner returns.
        """
        return None

    # ================================================================= seams
    @classmethod
    def normalize_devices(cls, devices: Union[int, Iterable[str]]) -> List[str]:
        """Turn the ``devices`` argument into a list of device strings.

        Args:
            devices (int or Iterable): a count of "cpu" workers, or device strings.

        Returns:
            list[str]: validated by `validate_device`.
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
        """Check one device string (the device policy's ``validate``).

        Args:
            device (str): e.g. "cpu" or "cuda:0".

        Returns:
            str: the device, possibly normalised.
        """
        return cls.device_policy.validate(device)

    @classmethod
    def check_available(cls, device: str) -> None:
        """Check that this machine has ``device`` (the device policy's ``check_available``).

        Called by the constructor for each device when the workers are local.

        Args:
            device (str): a device returned by `validate_device`.
        """
        cls.device_policy.check_available(device)

    @classmethod
    def setup_worker(cls, device: str) -> None:
        """Runs in each worker before ``producer_init`` (the device policy's ``setup_worker``).

        Args:
            device (str): this worker's device.
        """
        cls.device_policy.setup_worker(device)

    def get_mp_context(self) -> BaseContext:
        """The multiprocessing context the process back-end starts the workers with.

        What the device policy picks (``DevicePolicy.process_context``) for
        this runner's devices, ``start_method`` (or ``default_start_method``)
        and thread budget. It reports, it does not choose: a subclass that
        overrides it is refused (``TypeError``); give it a ``device_policy``.

        Returns:
            multiprocessing.context.BaseContext:
        """
        return self._policy().process_context(
            self._devices, self._requested_start_method(), self._threads)

    def make_transport(self) -> Transport:
        """A fresh transport like the one the process back-end uses: the device policy's
        ``make_transport()`` (``transport_class``, upgraded in a process that
        imported torch unless a subclass names its own; see
        [`defaults`][easycore.common.parallel.defaults]). Like ``get_mp_context``,
        it reports: overriding it is refused (``TypeError``).

        Returns:
            Transport:
        """
        return self._policy().make_transport()

    def _policy(self) -> DevicePolicy:
        # ``device_policy``, with the runner's ``transport_class`` where a
        # subclass names one: the policy picks the start method and the transport.
        return self.device_policy.for_client(self, BaseRunner)

    def _requested_start_method(self) -> Optional[str]:
        return self._options.start_method or self.default_start_method

    def make_program(self) -> WorkerProgram:
        """What every worker runs: by default the runner's producer hooks.

        A seam for runners whose workers do more around the hooks (e.g.
        ``DistributedRunner`` joins a process group before ``producer_init``).

        Returns:
            WorkerProgram: picklable; each worker gets its own copy.
        """
        cls = type(self)
        quiet = (not self._has_init_hooks()
                 and getattr(cls, "producer_end", None) is BaseRunner.producer_end)
        return RunnerProgram(cls, self._threads, quiet)

    def make_backend(self) -> Backend:
        """A fresh, unstarted back-end for one activation.

        Returns:
            Backend:
        """
        _refuse_retired_seams(type(self))
        spec = BackendSpec(
            self.make_program(), self.devices, self._cfg, self._policy(),
            self._requested_start_method(), self._threads, None, True,
        )
        return door.backend_for(self.backends, self._options, spec)

    # ============================================================= lifecycle
    @property
    def is_activate(self) -> bool:
        """bool: whether the runner is alive."""
        return self._engine is not None

    @property
    def devices(self) -> List[str]:
        """list[str]: one worker per device."""
        return list(self._devices)

    @property
    def worker_pids(self) -> List[Optional[int]]:
        """list: process ids of the workers (empty when closed)."""
        engine = self._engine
        return list(engine.backend.pids) if engine is not None else []

    def activate(self) -> None:
        """Restart all processes if this runner is closed.

        Runs ``setup_worker`` and ``producer_init`` in every worker and waits for
        them; raises their error (``WorkerError``) if one fails, leaving the
        runner closed. A runner with neither hook (nor a device policy that
        sets workers up) whose workers are forked does not wait: they take
        the first call's items while they start, and a worker that fails to
        start fails that call. Spawned ones import the runner's module, which
        can fail: it waits for the first, and the others take work as they
        become ready.
        """
        with self._lifecycle:
            if self._engine is not None:
                return
            # Cleans up after itself if it raises. The wait for every worker
            # is there to raise an init hook's error; with none to run, the
            # workers take work at once and read it when they have started.
            # Each call pumps on the caller's thread.
            self._engine = door.start(
                self.make_backend(), self._options, door.FailFast(),
                wait="all" if self._has_init_hooks() else "none",
                recorder=self._recorder, caller_pumps=True)

    def _has_init_hooks(self) -> bool:
        """Whether the workers run code of the user's before their first item
        (``setup_worker``, ``producer_init``, the device policy's set-up or
        another program): what the constructor must wait for, to raise its error."""
        cls = type(self)
        policy = self._policy()
        return not (
            getattr(cls, "producer_init", None) is BaseRunner.producer_init
            # classmethods: bound anew on each access, so their functions compare
            and getattr(cls.setup_worker, "__func__", None)
            is getattr(BaseRunner.setup_worker, "__func__", None)
            and getattr(type(policy), "setup_worker", None) is DevicePolicy.setup_worker
            and getattr(cls, "make_program", None) is BaseRunner.make_program
        )

    def insights(self) -> Optional[Insights]:
        """Where the last call's time went, and which stage bounded it.

        Counted only with ``insights=True``. The wall time is the call's
        (``consumer_init`` to ``consumer_end``); a worker's start-up counts only
        when it was (re)started during the call (after a death or a timeout):
        the first start is the constructor's (or ``activate``'s). A call that
        failed has insights too (up to its failure).

        Returns:
            Insights or None: None before the first call.

        Raises:
            RuntimeError: the runner was made without ``insights=True``.
        """
        if self._recorder is None:
            raise RuntimeError(f"{type(self).__name__} counts no insights: pass insights=True")
        return self._insights

    def close(self, timeout: Optional[float] = None) -> None:
        """Shutdown all processes if this runner is alive.

        Runs ``producer_end`` in every worker, then joins them. Idempotent. A
        call running in another thread ends with `RunnerClosedError` first.

        Args:
            timeout (float or None): seconds for the whole close; after that the
                workers are killed and ``TimeoutError`` is raised.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lifecycle:
            engine = self._engine
            if engine is None:
                return
            self._engine = None  # closed from now on, as a running call will say
            if not self._busy.acquire(blocking=False):
                engine.request_close()  # the call sees it at its next step
                wait = -1 if deadline is None else max(0.0, deadline - time.monotonic())
                if not self._busy.acquire(timeout=wait):
                    where = _stacks.summary(engine.abort(where=True)) or "no stack read"
                    raise TimeoutError(f"the running call did not end within {timeout} s: {where}")
            try:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                engine.close(remaining)  # raises a producer_end error after cleaning up
            finally:
                self._busy.release()

    def __enter__(self) -> BaseRunner:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        # The exception already propagating matters more than close's (any error).
        with contextlib.suppress(Exception):
            self.close()

    def __call__(
        self,
        data_iter: Iterable,
        *,
        progress: Optional[ProgressOption] = None,
        task_timeout: Optional[float] = None,
    ) -> Any:
        """
        Args:
            data_iter (Iterable): iterator of data; read lazily, never ahead of
                what the queues hold, so it may be a long generator.
            progress (bool or dict or None): override the constructor's ``progress``.
            task_timeout (float or None): override the constructor's ``task_timeout``.

        Returns:
            Any: result, what ``consumer_end`` returned.
        """
        if not self._busy.acquire(blocking=False):
            raise RuntimeError(f"{type(self).__name__} is already running a call")
        try:
            engine = self._engine
            if engine is None:
                raise RunnerClosedError(
                    f"{type(self).__name__} is closed; call activate() to start it again"
                )
            return run_call(self, engine, data_iter, progress, task_timeout)
        finally:
            self._busy.release()

    def _abort(self, engine: Engine, where: bool = False) -> Dict[int, Any]:
        if self._engine is engine:
            self._engine = None
        return engine.abort(where)

    def __repr__(self) -> str:
        state = "active" if self.is_activate else "closed"
        return f"<{type(self).__name__} devices={self._devices!r} {state}>"


def _refuse_retired_seams(cls: type) -> None:
    # Deprecated in 0.5's fourth round (the device policy chooses), retired since.
    retired = [f"{name}()" for name in ("get_mp_context", "make_transport")
               if getattr(cls, name, None) is not getattr(BaseRunner, name)]
    if retired:
        raise TypeError(
            f"{cls.__name__} overrides {' and '.join(retired)}, which no longer choose "
            "anything (they report what the device policy picks): give the class a "
            "device_policy (DevicePolicy.start_method / mp_context, or transport_class)")


class UnorderedRunner(BaseRunner):
    """A multi-process runner whose consumer receives data unordered (as finished).

    The runner starts one process per device for the producers and runs the
    consumer in the calling thread. See [`BaseRunner`][easycore.common.parallel.BaseRunner].
    """

    ordered = False


class OrderedRunner(BaseRunner):
    """A multi-process runner whose consumer receives data in input order.

    The runner starts one process per device for the producers and runs the
    consumer in the calling thread. See [`BaseRunner`][easycore.common.parallel.BaseRunner].
    """

    ordered = True
