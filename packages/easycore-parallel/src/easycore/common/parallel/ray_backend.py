"""The Ray back-end: one Ray actor per device, selected by ``backend="ray"``.

::

    with Runner(devices=2, backend="ray") as runner:           # a local Ray
        runner(data)
    with Runner(devices=64, backend="ray", address="auto",      # a cluster
                ray_init_kwargs={"runtime_env": {"working_dir": "."}}) as runner:
        runner(data)

Ray does the placement and the transport; this module only keeps the
producer/consumer contract. Each device becomes an actor wrapping
:class:`~.worker.ProducerWorker` (``setup_worker``, then ``producer_init``, in
it; its own copy of ``cfg``); a chunk is one ``run_chunk`` actor task, and
:meth:`RayBackend.poll` is ``ray.wait`` on the pending ones. The pipeline
(chunking, ordering, ``queue_scale`` credits, the consumer hooks in the
caller) is shared with the process back-end unchanged, so at most
``ceil(queue_scale)`` chunks per actor are ever in flight.

Devices: every device is an actor of one CPU (``num_cpus=1``); ``"cuda"``
and ``"cuda:N"`` add one GPU (``num_gpus=1``). Ray picks the GPU and makes it
the only one the actor sees, so the hooks and ``setup_worker`` get
``"cuda:0"``; errors name the device as you wrote it. Before creating the
actors the request is checked against ``ray.cluster_resources()``: one that
cannot fit raises :class:`~.errors.ParallelError` instead of waiting forever
(a local Ray has ``os.cpu_count()`` CPUs unless
``ray_init_kwargs={"num_cpus": n}`` says otherwise).

Results come back through Ray's object store: large NumPy arrays (and CPU
tensors) arrive as read-only views of it, without a copy; copy one to
modify it. The runner's ``make_transport`` seam is not used here.

Ray itself: if this process is already connected to Ray, that connection is
used as it is (``address`` and ``ray_init_kwargs`` are ignored) and left up
on close. Otherwise the runner calls ``ray.init(address=address,
**ray_init_kwargs)`` and shuts Ray down when the last runner using it closes.
A Ray the runner starts itself binds to 127.0.0.1 without a dashboard unless
``ray_init_kwargs`` says otherwise (nothing listens beyond loopback by default).
Ray is an optional extra and is imported only here, on first use.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from typing import Any, Dict, List, Mapping, Optional

from .backend import Backend, ChannelBroken, Result
from .errors import ParallelError, WorkerDiedError, WorkerError
from .worker import HookFailed, ProducerWorker

__all__ = ["RayBackend", "RayWorkerDiedError"]

_INSTALL = "pip install 'easycore-parallel[ray]' (or 'easycore[ray]')"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ImportError(f"backend='ray' needs Ray, an optional extra: {_INSTALL}") from exc
    return ray


def _is_cuda(device: str) -> bool:
    return device == "cuda" or device.startswith("cuda:")


class RayWorkerDiedError(WorkerDiedError):
    """A producer actor died (its process or its node); names device and node.

    Attributes:
        node_id (str or None): the Ray node the actor ran on.
        node_ip (str or None): that node's address.
        reason (str): what Ray said.
    """

    def __init__(
        self, device: str, worker_index: int, pid: Optional[int], node_id: Optional[str],
        node_ip: Optional[str], reason: str,
    ) -> None:
        self.device, self.worker_index, self.pid, self.exitcode = device, worker_index, pid, None
        self.node_id, self.node_ip, self.reason = node_id, node_ip, reason
        ParallelError.__init__(
            self,
            f"worker {worker_index} on device {device!r} (Ray actor, pid {pid}, node "
            f"{node_id} at {node_ip}) died unexpectedly.\n\nRay: {reason.strip()}",
        )

    def __reduce__(self):
        args = (self.device, self.worker_index, self.pid, self.node_id, self.node_ip, self.reason)
        return (type(self), args)


class _Producer:
    """One device's producer; made a Ray actor class by :meth:`RayBackend.start`."""

    def __init__(self, runner_cls: type, device: str, cfg: Any) -> None:
        self.worker = ProducerWorker(runner_cls, device, cfg)

    def where(self) -> tuple:
        import ray

        ctx = ray.get_runtime_context()
        return os.getpid(), ctx.get_node_id(), ray.util.get_node_ip_address()

    def init(self) -> tuple:
        try:
            self.worker.init()
        except HookFailed as failed:
            return ("error", failed.report)
        return ("ready",)

    def run_chunk(self, items: List[Any]) -> tuple:
        start = time.perf_counter()
        try:
            out = self.worker.run_chunk(items)
        except HookFailed as failed:
            return ("error", failed.report)
        # For the chunker only: the bytes of top-level arrays and tensors.
        nbytes = sum(getattr(r, "nbytes", 0) for r in out)
        return ("result", out, len(items), time.perf_counter() - start, nbytes)

    def end(self) -> tuple:
        try:
            self.worker.end()
        except HookFailed as failed:
            return ("error", failed.report)
        return ("ended",)


# The Ray this module started, shared by every runner that finds it running:
# shut down when the last of them closes, never when someone else started it.
_session_lock = threading.Lock()
_session: Dict[str, Any] = {"job": None, "users": 0}


def _acquire_ray(ray: Any, address: Optional[str], init_kwargs: Mapping[str, Any]) -> bool:
    with _session_lock:
        if not ray.is_initialized():
            ray.init(address=address, **_local_defaults(address, init_kwargs))
            _session.update(job=ray.get_runtime_context().get_job_id(), users=0)
        elif ray.get_runtime_context().get_job_id() != _session["job"]:
            return False  # the caller's own Ray: use it, leave it up
        _session["users"] += 1
        return True


def _local_defaults(address: Optional[str], init_kwargs: Mapping[str, Any]) -> Dict[str, Any]:
    """Keep a Ray that the runner starts itself on loopback, with no dashboard.

    Nothing easycore starts may listen on a non-loopback address by default;
    pass ``ray_init_kwargs={"_node_ip_address": ...}`` to open it up. When
    ``address`` names a cluster, or one is already running on this machine,
    Ray is only joined and the options are left as given.
    """
    kwargs = dict(init_kwargs)
    starts_new = (
        address is None
        and not os.environ.get("RAY_ADDRESS")
        and not os.path.exists(os.path.join(tempfile.gettempdir(), "ray", "ray_current_cluster"))
    )
    if starts_new:
        kwargs.setdefault("_node_ip_address", "127.0.0.1")
        kwargs.setdefault("include_dashboard", False)
    return kwargs


def _release_ray(ray: Any) -> None:
    with _session_lock:
        _session["users"] -= 1
        if _session["users"] <= 0 and ray.is_initialized():
            if ray.get_runtime_context().get_job_id() == _session["job"]:
                ray.shutdown()
            _session.update(job=None, users=0)


class RayBackend(Backend):
    """Runs each device's producer hooks in a Ray actor."""

    #: seconds a :meth:`poll` waits in ``ray.wait`` before checking for a wakeup
    wakeup_interval = 0.05
    #: seconds to wait for killed actors to be gone
    kill_timeout = 5.0

    def __init__(
        self, runner_cls: type, devices: List[str], cfg: Any, address: Optional[str] = None,
        ray_init_kwargs: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """
        Args:
            runner_cls (type): the runner class; its static hooks run in the actors.
            devices (list[str]): one actor per entry.
            cfg (CfgNode): each actor gets its own copy.
            address (str or None): for ``ray.init``: None connects to a running
                local Ray or starts one, ``"auto"``, ``"host:port"`` or
                ``"ray://host:port"`` join a cluster.
            ray_init_kwargs (dict or None): any other ``ray.init`` arguments.
        """
        self._ray = _import_ray()
        init_kwargs = dict(ray_init_kwargs or {})
        if "address" in init_kwargs:
            raise ValueError("pass address=..., not ray_init_kwargs['address']")
        self.devices = list(devices)
        self._runner_cls = runner_cls
        self._cfg = cfg
        self._address = address
        self._init_kwargs = init_kwargs
        self._actors: List[Any] = []
        self._where: List[Optional[tuple]] = []  # (pid, node id, node ip) per actor
        self._where_refs: List[Any] = []
        self._pending: Dict[Any, tuple] = {}  # ObjectRef -> (worker, seq)
        self._lock = threading.Lock()
        self._changed = threading.Event()  # a submit or a wakeup happened
        self._woken = False
        self._owns_session = False
        self._closed = False

    @classmethod
    def from_runner(
        cls, runner: Any, cfg: Any, address: Optional[str] = None,
        ray_init_kwargs: Optional[Mapping[str, Any]] = None,
    ) -> RayBackend:
        """Build from a runner; ``address`` and ``ray_init_kwargs`` are its options.

        Args:
            runner (BaseRunner):
            cfg (CfgNode):
            address (str or None): see :class:`RayBackend`.
            ray_init_kwargs (dict or None):

        Returns:
            RayBackend:
        """
        return cls(type(runner), runner.devices, cfg, address, ray_init_kwargs)

    # ----------------------------------------------------------------- start
    def start(self) -> None:
        ray = self._ray
        self._owns_session = _acquire_ray(ray, self._address, self._init_kwargs)
        try:
            self._check_resources()
            actor_cls = ray.remote(_Producer)
            for device in self.devices:
                gpu = _is_cuda(device)
                actor = actor_cls.options(num_cpus=1, num_gpus=int(gpu), max_restarts=0).remote(
                    self._runner_cls, "cuda:0" if gpu else device, self._cfg.copy()
                )
                self._actors.append(actor)
                self._where_refs.append(actor.where.remote())
                self._where.append(None)
            inits = {a.init.remote(): i for i, a in enumerate(self._actors)}
            self._gather(inits, None)
            for i in range(len(self._actors)):
                self._locate(i)
        except BaseException:
            self.abort()
            raise

    def _check_resources(self) -> None:
        have = self._ray.cluster_resources()
        cpus, gpus = len(self.devices), sum(map(_is_cuda, self.devices))
        if cpus > have.get("CPU", 0) or gpus > have.get("GPU", 0):
            raise ParallelError(
                f"devices={self.devices!r} asks Ray for {cpus} CPUs and {gpus} GPUs (an "
                f"actor of one CPU per device, plus a GPU per CUDA device) but the cluster "
                f"has {have.get('CPU', 0):g} CPUs and {have.get('GPU', 0):g} GPUs; use fewer "
                f"devices, or, when the runner starts Ray, ray_init_kwargs={{'num_cpus': "
                f"{cpus}}}"
            )

    def _locate(self, i: int) -> tuple:
        """(pid, node id, node ip) of actor ``i``, or Nones if it never told."""
        if self._where[i] is None:
            try:
                self._where[i] = self._ray.get(self._where_refs[i], timeout=5)
            except Exception:
                return (None, None, None)
        return self._where[i]

    # ------------------------------------------------------------ per chunk
    def submit(self, worker: int, seq: int, items: List[Any]) -> None:
        if self._closed:
            raise ChannelBroken(f"worker {worker} on device {self.devices[worker]!r} is closed")
        # Returns at once: Ray queues the task on the actor. The pipeline's
        # credits bound how many are queued, so nothing grows unboundedly.
        ref = self._actors[worker].run_chunk.remote(items)
        with self._lock:
            self._pending[ref] = (worker, seq)
        self._changed.set()

    def poll(self, timeout: Optional[float]) -> List[Result]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if self._woken:
                    self._woken = False
                    return []
                self._changed.clear()
                refs = list(self._pending)
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not refs:
                if remaining == 0.0 or not self._changed.wait(remaining):
                    return []
                continue
            wait = self.wakeup_interval if remaining is None else min(self.wakeup_interval,
                                                                       remaining)
            ready, _ = self._ray.wait(refs, num_returns=1, timeout=wait)
            if ready:  # and whatever else is done already
                ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
                return [self._result(ref) for ref in ready]
            if remaining == 0.0:
                return []

    def _result(self, ref: Any) -> Result:
        with self._lock:
            worker, seq = self._pending.pop(ref)
        _, results, n_items, seconds, nbytes = self._reply(worker, ref)
        return Result(worker, seq, results, n_items, seconds, nbytes)

    def _reply(self, worker: int, ref: Any) -> tuple:
        """The actor's answer to ``ref``; raises its hook's error or its death."""
        ray, device = self._ray, self.devices[worker]
        try:
            reply = ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            if exc.actor_init_failed:  # most often: the hooks' module is not on that node
                raise WorkerError(
                    device, "creating the actor", worker, None, type(exc).__name__,
                    "the actor could not be built from the runner class and cfg; are they "
                    "importable on every node (see runtime_env in ray_init_kwargs)?", str(exc),
                ) from None
            pid, node_id, node_ip = self._locate(worker)
            raise RayWorkerDiedError(device, worker, pid, node_id, node_ip, str(exc)) from None
        except ray.exceptions.RayError as exc:  # e.g. results Ray could not serialise
            cause = getattr(exc, "cause", None) or exc
            raise WorkerError(
                device, "sending results", worker, self._locate(worker)[0],
                type(cause).__name__, (str(cause).strip().splitlines() or [""])[0], str(exc),
            ) from None
        if reply[0] == "error":
            raise WorkerError.from_report(reply[1], device, worker, self._locate(worker)[0])
        return reply

    def wakeup(self) -> None:
        with self._lock:
            self._woken = True
        self._changed.set()

    def _gather(self, refs: Dict[Any, int], timeout: Optional[float],
                errors: Optional[List[BaseException]] = None) -> None:
        """Wait for the replies to ``refs`` (ref -> worker), ``timeout`` s at most.

        Raises the first hook error or death at once; given an ``errors`` list,
        appends them there instead and waits for the others.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while refs:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"producer_end did not finish within {timeout} s")
            ready, _ = self._ray.wait(list(refs), num_returns=1, timeout=remaining)
            for ref in ready:
                try:
                    self._reply(refs.pop(ref), ref)
                except ParallelError as exc:
                    if errors is None:
                        raise
                    errors.append(exc)

    # ------------------------------------------------------------------ end
    def stop(self, timeout: Optional[float] = None) -> None:
        if self._closed:
            return
        if not self._ray.is_initialized():  # someone shut Ray down: the actors are gone
            self.abort()
            return
        errors: List[BaseException] = []
        try:
            self._gather({a.end.remote(): i for i, a in enumerate(self._actors)}, timeout, errors)
        except TimeoutError as exc:
            errors.append(exc)
        finally:
            self.abort()  # kills the actors; shuts Ray down if this runner started it
        if errors:
            raise errors[0]

    def abort(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._pending.clear()
        self._changed.set()
        try:
            self._kill_actors()
        except Exception:
            pass
        if self._owns_session:
            try:
                _release_ray(self._ray)
            except Exception:
                pass

    def _kill_actors(self) -> None:
        """``ray.kill`` every actor and wait (``kill_timeout`` s at most) until
        each refuses calls: the kill travels through Ray's control plane, so a
        call made right after it could still run."""
        ray = self._ray
        for actor in self._actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass  # already gone
        alive, deadline = list(self._actors), time.monotonic() + self.kill_timeout
        while alive and time.monotonic() < deadline:
            probes = {actor.where.remote(): actor for actor in alive}
            ready, _ = ray.wait(list(probes), num_returns=len(probes),
                                timeout=max(0.0, deadline - time.monotonic()))
            alive = [probes[ref] for ref in probes if ref not in ready]
            for ref in ready:
                try:
                    ray.get(ref)
                    alive.append(probes[ref])  # answered: not dead yet
                except ray.exceptions.RayActorError:
                    pass
            if alive:
                time.sleep(0.02)

    @property
    def closed(self) -> bool:
        """bool: whether the actors are gone."""
        return self._closed

    @property
    def actors(self) -> List[Any]:
        """list: the Ray actor handles, one per device (dead once closed)."""
        return list(self._actors)

    @property
    def nodes(self) -> List[Optional[str]]:
        """list: the Ray node id of each actor."""
        return [w[1] if w else None for w in self._where]

    @property
    def pids(self) -> List[Optional[int]]:
        return [w[0] if w else None for w in self._where]
