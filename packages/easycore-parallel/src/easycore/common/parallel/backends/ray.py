"""The Ray back-end: one Ray actor per device, selected by ``backend="ray"``.

```python
with Runner(devices=2, backend="ray") as runner:           # a local Ray
    runner(data)
with Runner(devices=64, backend="ray", address="auto",      # a cluster
            ray_init_kwargs={"runtime_env": {"working_dir": "."}}) as runner:
    runner(data)
with Pool(4, backend="ray") as pool:                        # a pool of actors
    pool.map(fn, data)
```

Ray does the placement and the transport; this module only keeps the
worker contract. Each device becomes an actor wrapping an
[`WorkerHandler`][easycore.common.parallel.extending.WorkerHandler] (the runner's
``setup_worker``, then ``producer_init``, or the pool's ``initializer``, in
it; its own copy of ``cfg``); a chunk is one actor task answering with the
[`protocol`][easycore.common.parallel.worker.protocol]'s messages, and the
back-end's ``poll`` is ``ray.wait`` on the pending ones. The engine (chunking, ordering,
``queue_scale`` credits, errors, the consumer hooks in the caller) is shared
with the process back-end unchanged, so at most ``ceil(queue_scale)`` chunks
per actor are ever in flight.

Devices: every device is an actor of one CPU (``num_cpus=1``); ``"cuda"``
and ``"cuda:N"`` add one GPU (``num_gpus=1``). Ray picks the GPU and makes it
the only one the actor sees, so the hooks and ``setup_worker`` get
``"cuda:0"``; errors name the device as you wrote it. Before creating the
actors the request is checked against ``ray.cluster_resources()``: one that
cannot fit raises [`ParallelError`][easycore.common.parallel.ParallelError]
instead of waiting forever (a local Ray has ``os.cpu_count()`` CPUs unless
``ray_init_kwargs={"num_cpus": n}`` says otherwise).

Results come back through Ray's object store: large NumPy arrays (and CPU
tensors) arrive as read-only views of it, without a copy; copy one to
modify it. The runner's ``make_transport`` seam is not used here.

Ray itself: if this process is already connected to Ray, that connection is
used as it is (``address`` and ``ray_init_kwargs`` are ignored) and left up
on close. Otherwise the runner calls ``ray.init(address=address,
**ray_init_kwargs)`` and shuts Ray down when the last runner using it closes.
A Ray the runner starts itself is a node at 127.0.0.1 without a dashboard
unless ``ray_init_kwargs`` says otherwise. Ray itself (2.60 and before) still
binds its GCS, raylet and worker servers to every interface whatever the node
address, and has no option to prevent it: the runner then warns once, naming
the ports (``RuntimeWarning``), so that you can firewall them.
Ray is an optional extra and is imported only here, on first use.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .._os import threads as _threads
from .._os.lifeline import run_into
from ..errors import ParallelError, WorkerDiedError, WorkerError
from ..options import check_options
from ..transport.interface import DirectTransport
from ..worker.executor import PassThrough, WorkerContext, WorkerHandler
from ..worker.protocol import RunChunk, StopWorker, WorkerEnded, WorkerFailed
from .base import Backend, BackendSpec, ChannelBroken, WorkerExited, wait_ended, wait_ready

__all__ = ["RayBackend", "RayWorkerDiedError"]

_INSTALL = "pip install 'easycore-parallel[ray]' (or 'easycore[ray]')"


def is_cuda(device: str) -> bool:
    """Whether ``device`` names a GPU (``"cuda"`` or ``"cuda:N"``): it then asks Ray for one."""
    return device == "cuda" or device.startswith("cuda:")


def import_ray() -> Any:
    """The ``ray`` module, or an ``ImportError`` that says which extra installs it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(f"backend='ray' needs Ray, an optional extra: {_INSTALL}") from exc
    return ray


class RayWorkerDiedError(WorkerDiedError):
    """A worker actor died (its process or its node); names device and node.

    Attributes:
        node_id (str or None): the Ray node the actor ran on.
        node_ip (str or None): that node's address.
        reason (str): what Ray said.
    """

    def __init__(
        self, device: str, worker_index: int, pid: Optional[int], node_id: Optional[str],
        node_ip: Optional[str], reason: str, items: Optional[List[int]] = None,
    ) -> None:
        self.device, self.worker_index, self.pid, self.exitcode = device, worker_index, pid, None
        self.items, self.oom_kills = items, None
        self.node_id, self.node_ip, self.reason = node_id, node_ip, reason
        ParallelError.__init__(
            self,
            f"worker {worker_index} on device {device!r} (Ray actor, pid {pid}, node "
            f"{node_id} at {node_ip}) died unexpectedly.\n\nRay: {reason.strip()}",
        )

    def __reduce__(self):
        args = (self.device, self.worker_index, self.pid, self.node_id, self.node_ip,
                self.reason, self.items)
        return (type(self), args)


class _Actor:
    """One worker; made a Ray actor class by
    [`RayBackend.start`][easycore.common.parallel.backends.ray.RayBackend]: it
    answers the protocol's messages with an
    [`WorkerHandler`][easycore.common.parallel.worker.executor.WorkerHandler]."""

    def __init__(self, program: Any, index: int, device: str, cfg: Any, context: Any,
                 n_threads: Optional[int]) -> None:
        self.n_threads = n_threads
        if n_threads is not None:
            _threads.limit_threads(n_threads)
        self.executor = WorkerHandler(program, WorkerContext(index, device, cfg, context),
                                 transport=_ObjectStore())

    def _keep_thread_env(self) -> None:
        # Older Ray releases (2.9 and 2.10 among them) set OMP_NUM_THREADS to the
        # actor's num_cpus before every task, actor tasks included, and removed
        # it afterwards (newer ones do so for plain tasks only): set again, per
        # call, what __init__ set, so the hooks see the budget under every
        # admitted Ray.
        if self.n_threads is not None:
            _threads.set_thread_env(self.n_threads)

    def where(self) -> tuple:
        import ray

        ctx = ray.get_runtime_context()
        return os.getpid(), ctx.get_node_id(), ray.util.get_node_ip_address()

    def start(self) -> Any:
        self._keep_thread_env()
        return self.executor.start()

    def handle(self, message: Any) -> Any:
        self._keep_thread_env()
        return self.executor.handle(message)


class _ObjectStore(PassThrough):
    """The actor's half of the transport: Ray's object store moves the results."""

    def encode_results(self, results: List[Any]) -> Tuple[Any, int]:
        # For the chunker only: the bytes of top-level arrays and tensors.
        return results, sum(getattr(r, "nbytes", 0) or 0 for r in results
                            if not isinstance(r, int))


# The Ray this module started, shared by every runner that finds it running:
# shut down when the last of them closes, never when someone else started it.
_session_lock = threading.Lock()
_session: Dict[str, Any] = {"job": None, "users": 0}


def acquire_ray(ray: Any, address: Optional[str], init_kwargs: Mapping[str, Any]) -> bool:
    """Join the Ray session shared by easycore's back-ends and services, starting it if none runs.

    Shared with `easycore.common.parallel.services` (its Ray-hosted services), so that
    one session serves both and the last user shuts it down.

    Args:
        ray (module): the ``ray`` module (from
            [`import_ray`][easycore.common.parallel.backends.ray.import_ray]).
        address (str or None): the cluster to join; None starts a local Ray on loopback.
        init_kwargs (Mapping): more keyword arguments for ``ray.init``.

    Returns:
        bool: True when this call counts as a user of easycore's session (pair it with
        [`release_ray`][easycore.common.parallel.backends.ray.release_ray]); False when the
        caller's own Ray runs, which is used and left up.
    """
    with _session_lock:
        if not ray.is_initialized():
            kwargs = _local_defaults(address, init_kwargs)
            ray.init(address=address, **kwargs)
            _session.update(job=ray.get_runtime_context().get_job_id(), users=0)
            if kwargs.get("_node_ip_address") == "127.0.0.1":
                _warn_if_exposed()
        elif ray.get_runtime_context().get_job_id() != _session["job"]:
            return False  # the caller's own Ray: use it, leave it up
        _session["users"] += 1
        return True


def exposed_ports(root_pid: Optional[int] = None) -> List[int]:
    """TCP ports that processes below ``root_pid`` listen on on every interface.

    Args:
        root_pid (int or None): default this process.

    Returns:
        list[int]: ports bound to 0.0.0.0 or ``::`` by the process or its
        descendants; empty where the platform does not tell.
    """
    import psutil

    from .._os.lifeline import descendants

    root = root_pid or os.getpid()
    try:
        procs = [psutil.Process(root), *descendants(root)]
    except psutil.Error:
        return []
    ports = set()
    for proc in procs:
        # psutil 6 renamed connections() to net_connections()
        listing = getattr(proc, "net_connections", None) or proc.connections
        try:
            conns = listing(kind="tcp")
        except (psutil.Error, OSError):
            continue
        for conn in conns:
            local = conn.laddr
            if conn.status == psutil.CONN_LISTEN and local and local.ip in ("0.0.0.0", "::"):
                ports.add(local.port)
    return sorted(ports)


def _warn_if_exposed() -> None:
    """Ray asked for 127.0.0.1 may still listen everywhere: say so, once, with the ports."""
    import warnings

    ports = exposed_ports()
    if ports:
        warnings.warn(
            f"the Ray that easycore started was asked to stay on 127.0.0.1, but Ray "
            f"{import_ray().__version__} binds its GCS, raylet and worker servers to every "
            f"network interface (TCP ports {', '.join(map(str, ports))}); Ray has no option "
            f"to prevent it. On a machine reachable from untrusted networks, firewall those "
            f"ports, or start Ray yourself inside a trusted network and pass address=",
            RuntimeWarning,
            stacklevel=_first_caller_outside_easycore(),
        )


def _first_caller_outside_easycore() -> int:
    """The ``stacklevel`` that points a warning at the user's line, not easycore's.

    Runners, pools and services reach Ray through call chains of different depths,
    so no fixed number fits; this counts the frames (from the caller of
    ``warnings.warn``) that live in easycore's own files. Python 3.12's
    ``skip_file_prefixes`` does the same but 3.9-3.11 lack it.
    """
    import sys
    from types import FrameType

    import easycore

    prefixes = tuple(os.path.join(os.path.abspath(p), "") for p in easycore.__path__)
    frame: Optional[FrameType] = sys._getframe(1)  # the function that calls warnings.warn
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(prefixes):
        frame = frame.f_back
        level += 1
    return level


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


def release_ray(ray: Any) -> None:
    """Leave the session joined by ``acquire_ray``; the last one out stops easycore's Ray."""
    with _session_lock:
        _session["users"] -= 1
        if _session["users"] <= 0 and ray.is_initialized():
            if ray.get_runtime_context().get_job_id() == _session["job"]:
                ray.shutdown()
            _session.update(job=None, users=0)


def _bounded(ask: Any, timeout: float, what: str) -> Any:
    """``ask()``, or a ``ParallelError`` when it has not answered in ``timeout`` s.

    Ray's state queries wait without a deadline in C++ (where no signal
    reaches them) for a GCS that may never answer; the waiting thread is a
    daemon left behind.
    """
    future: Future = Future()
    threading.Thread(target=run_into, args=(future, ask), name="easycore-ray-query",
                     daemon=True).start()
    if not wait_futures([future], timeout).done:
        raise ParallelError(
            f"Ray's GCS did not answer {what} within {timeout:g} s: the Ray session is not "
            f"healthy (see its logs, under the session folder, by default "
            f"/tmp/ray/session_latest/logs); no actor was started"
        )
    return future.result()


class RayBackend(Backend):
    """Runs each device's worker in a Ray actor."""

    #: seconds a poll waits in ``ray.wait`` before checking for a wakeup
    wakeup_interval = 0.05
    #: seconds to wait for killed actors to be gone
    kill_timeout = 5.0
    #: seconds to wait for Ray's GCS to say what the cluster has
    resources_timeout = 30.0

    def __init__(
        self, spec: BackendSpec, address: Optional[str] = None,
        ray_init_kwargs: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """
        Args:
            spec (BackendSpec): the program, devices, cfg and policy.
            address (str or None): for ``ray.init``: None connects to a running
                local Ray or starts one, ``"auto"``, ``"host:port"`` or
                ``"ray://host:port"`` join a cluster.
            ray_init_kwargs (dict or None): any other ``ray.init`` arguments.
        """
        self._ray = import_ray()
        init_kwargs = dict(ray_init_kwargs or {})
        if "address" in init_kwargs:
            raise ValueError("pass address=..., not ray_init_kwargs['address']")
        self.devices = list(spec.devices)
        self.transport = DirectTransport()
        self._spec = spec
        self._address = address
        self._init_kwargs = init_kwargs
        self._actors: List[Any] = [None] * len(self.devices)
        self._where: List[Optional[tuple]] = [None] * len(self.devices)
        self._where_refs: List[Any] = [None] * len(self.devices)
        self._pending: Dict[Any, Tuple[int, Any, Any]] = {}  # ref -> (worker, job, seq)
        self._dead: set = set()  # slots whose death was reported
        self._killed: set = set()  # slots we killed: their exit is expected
        self._ending: set = set()  # slots asked to end
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._woken = False
        self._owns_session = False
        self._closed = False

    @classmethod
    def from_spec(cls, spec: BackendSpec, **options: Any) -> RayBackend:
        """As ``Backend.from_spec``; the options are ``address`` and ``ray_init_kwargs``."""
        check_options("ray", options, ("address", "ray_init_kwargs"))
        return cls(spec, **options)

    # ----------------------------------------------------------------- start
    def start(self) -> None:
        ray = self._ray
        self._owns_session = acquire_ray(ray, self._address, self._init_kwargs)
        try:
            self._check_resources()
            for slot in range(len(self.devices)):
                self._start_one(slot)
            wait_ready(self, set(range(len(self.devices))), lambda slot: self._locate(slot)[0])
        except BaseException:
            self.abort()
            raise

    def _start_one(self, slot: int) -> None:
        ray, spec = self._ray, self._spec
        num_cpus, num_gpus, inner = spec.policy.ray_resources(self.devices[slot])
        context = spec.contexts[slot] if spec.contexts is not None else None
        actor = ray.remote(_Actor).options(
            num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0
        ).remote(spec.program, slot, inner, spec.cfg, context, spec.threads)
        self._actors[slot] = actor
        self._where[slot] = None
        self._where_refs[slot] = actor.where.remote()
        self._dead.discard(slot)
        self._killed.discard(slot)
        with self._lock:
            self._pending[actor.start.remote()] = (slot, None, None)
        self._changed.set()

    def _check_resources(self) -> None:
        have = _bounded(self._ray.cluster_resources, self.resources_timeout,
                        "ray.cluster_resources()")
        cpus = gpus = 0.0
        for device in self.devices:
            c, g, _ = self._spec.policy.ray_resources(device)
            cpus, gpus = cpus + c, gpus + g
        if cpus > have.get("CPU", 0) or gpus > have.get("GPU", 0):
            raise ParallelError(
                f"devices={self.devices!r} asks Ray for {cpus:g} CPUs and {gpus:g} GPUs (an "
                f"actor of one CPU per device, plus a GPU per CUDA device) but the cluster "
                f"has {have.get('CPU', 0):g} CPUs and {have.get('GPU', 0):g} GPUs; use fewer "
                f"devices, or, when the runner starts Ray, ray_init_kwargs={{'num_cpus': "
                f"{int(cpus)}}}"
            )

    def _locate(self, slot: int) -> tuple:
        """(pid, node id, node ip) of the actor in ``slot``, or Nones if it never told."""
        if self._where[slot] is None and self._where_refs[slot] is not None:
            try:
                self._where[slot] = self._ray.get(self._where_refs[slot], timeout=5)
            except Exception:  # noqa: BLE001 (any Ray error: where a worker runs is only a label)
                return (None, None, None)
        return self._where[slot] or (None, None, None)

    def _death(self, slot: int, reason: str,
               items: Optional[List[int]] = None) -> RayWorkerDiedError:
        pid, node_id, node_ip = self._locate(slot)
        return RayWorkerDiedError(self.devices[slot], slot, pid, node_id, node_ip, reason, items)

    def death_error(self, worker: int, exited: WorkerExited,
                    items: Optional[List[int]] = None) -> BaseException:
        return self._death(worker, exited.reason, items)

    # -------------------------------------------------------------- messages
    def send(self, worker: int, message: Any) -> None:
        if self._closed or worker in self._dead:
            raise ChannelBroken(f"worker {worker} on device {self.devices[worker]!r} is gone")
        actor = self._actors[worker]
        ref = actor.handle.remote(message)
        if isinstance(message, RunChunk):
            tag: Tuple[int, Any, Any] = (worker, message.job, message.seq)
        else:  # StopWorker
            self._ending.add(worker)
            tag = (worker, None, None)
        # Returns at once: Ray queues the task on the actor; the engine's
        # credits bound how many are queued.
        with self._lock:
            self._pending[ref] = tag
        self._changed.set()

    def poll(self, timeout: Optional[float]) -> List[Tuple[int, Any]]:
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
                if remaining == 0.0 or not self._changed.wait(
                        self.wakeup_interval if remaining is None else remaining):
                    return []
                continue
            wait = self.wakeup_interval if remaining is None else min(self.wakeup_interval,
                                                                       remaining)
            ready, _ = self._ray.wait(refs, num_returns=1, timeout=wait)
            if ready:  # and whatever else is done already
                ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
                out: List[Tuple[int, Any]] = []
                for ref in ready:
                    self._reply(ref, out)
                return out
            if remaining == 0.0:
                return []

    def _reply(self, ref: Any, out: List[Tuple[int, Any]]) -> None:
        ray = self._ray
        with self._lock:
            tag = self._pending.pop(ref, None)
        if tag is None or tag[0] in self._dead:
            return
        slot, job, seq = tag
        try:
            message = ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            self._dead.add(slot)
            with self._lock:  # its other calls fail the same way: one exit is enough
                for other in [r for r, t in self._pending.items() if t[0] == slot]:
                    del self._pending[other]
            if getattr(exc, "actor_init_failed", False):
                out.append((slot, WorkerFailed(None, None, _init_failed_report(exc))))
            expected = slot in self._killed or slot in self._ending
            out.append((slot, WorkerExited(self._locate(slot)[0], None, expected, str(exc))))
            return
        except ray.exceptions.RayError as exc:  # e.g. results Ray could not serialise
            cause = getattr(exc, "cause", None) or exc
            from ..errors import ErrorReport

            report = ErrorReport("sending results", type(cause).__name__,
                                 (str(cause).strip().splitlines() or [""])[0], str(exc), None)
            out.append((slot, WorkerFailed(job, seq, report)))
            return
        out.append((slot, message))
        if isinstance(message, (WorkerEnded,)) or (
            isinstance(message, WorkerFailed) and message.job is None and slot in self._ending
        ):
            self._dead.add(slot)
            out.append((slot, WorkerExited(self._locate(slot)[0], 0, True)))

    def wakeup(self) -> None:
        with self._lock:
            self._woken = True
        self._changed.set()

    # ---------------------------------------------------- one worker at a time
    def kill(self, worker: int) -> None:
        self._killed.add(worker)
        try:  # noqa: SIM105
            self._ray.kill(self._actors[worker], no_restart=True)
        except Exception:  # noqa: BLE001 -- gone already (Ray's errors vary by version):
            pass  # its exit is reported either way

    def restart(self, worker: int) -> None:
        self._start_one(worker)

    # ------------------------------------------------------------------ end
    def stop(self, timeout: Optional[float] = None) -> None:
        if self._closed:
            return
        if not self._ray.is_initialized():  # someone shut Ray down: the actors are gone
            self.abort()
            return
        errors: List[BaseException] = []

        def handle(slot: int, message: Any) -> None:
            if isinstance(message, WorkerFailed) and message.job is None:
                errors.append(WorkerError.from_report(
                    message.report, self.devices[slot], slot, self._locate(slot)[0]))
                self._dead.add(slot)
            elif isinstance(message, WorkerExited) and not message.expected:
                errors.append(self._death(slot, message.reason))

        try:
            for slot in range(len(self.devices)):
                if slot not in self._dead:
                    self._ending.add(slot)
                    with self._lock:
                        ref = self._actors[slot].handle.remote(StopWorker())
                        self._pending[ref] = (slot, None, None)
            wait_ended(self, lambda: any(s not in self._dead for s in range(len(self.devices))),
                       timeout, handle, errors)
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
        try:  # noqa: SIM105
            self._kill_actors()
        except Exception:  # noqa: BLE001 -- abort never raises; Ray is released below anyway
            pass
        if self._owns_session:
            try:  # noqa: SIM105
                release_ray(self._ray)
            except Exception:  # noqa: BLE001 -- abort never raises (a Ray already shut down)
                pass

    def _kill_actors(self) -> None:
        """``ray.kill`` every actor and wait (``kill_timeout`` s at most) until
        each refuses calls: the kill travels through Ray's control plane, so a
        call made right after it could still run."""
        ray = self._ray
        actors = [a for a in self._actors if a is not None]
        for actor in actors:
            try:  # noqa: SIM105
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 -- already gone (Ray's errors vary by version)
                pass
        alive, deadline = list(actors), time.monotonic() + self.kill_timeout
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
        return [self._locate(s)[0] if self._where_refs[s] is not None else None
                for s in range(len(self.devices))]


def _init_failed_report(exc: Exception) -> Any:
    from ..errors import ErrorReport

    return ErrorReport(
        "creating the actor", type(exc).__name__,
        "the actor could not be built from the runner class and cfg; are they importable on "
        "every node (see runtime_env in ray_init_kwargs)?", str(exc), None,
    )
