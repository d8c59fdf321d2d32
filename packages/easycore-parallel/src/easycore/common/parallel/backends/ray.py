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

Lost nodes: an actor's death is read into a
[`DeathCause`][easycore.common.parallel.errors.DeathCause]
([`ray_losses`][easycore.common.parallel.backends.ray_losses]) that travels with
its ``WorkerExited``; the engine decides what it costs (a lost node blames no item).
An actor Ray cannot reach (``ActorUnavailableError``) is asked where it is until
Ray decides (its node's health checks): dead, or reachable again (then ended
here: its calls were lost); after ``unreachable_timeout`` without a verdict it
is ended here as lost too. Replacements ask Ray for no particular node, so
they go wherever there is room now, a node that joined since included; the
``capacity_timeout`` bounds the wait (see ``RayBackend``).

Results come back through Ray's object store: large NumPy arrays (and CPU
tensors) arrive as read-only views of it, without a copy; copy one to
modify it. The runner's ``make_transport`` seam is not used here.

Ray itself: if this process is already connected to Ray, that connection is
used as it is (``address`` and ``ray_init_kwargs`` are ignored) and left up
on close. Otherwise the runner calls ``ray.init(address=address,
**ray_init_kwargs)`` and shuts Ray down when the last runner using it closes
([`ray_session`][easycore.common.parallel.backends.ray_session]).
A Ray the runner starts itself is a node at 127.0.0.1 without a dashboard
unless ``ray_init_kwargs`` says otherwise. Ray itself (2.60 and before) still
binds its GCS, raylet and worker servers to every interface whatever the node
address, and has no option to prevent it: the runner then warns once, naming
the ports (``RuntimeWarning``), so that you can firewall them.
Ray is an optional extra and is imported only on first use.
"""

from __future__ import annotations

import threading
import time

from .._named_tuples import NamedTuple
from ..errors import DeathCause, ErrorReport, ParallelError, WorkerError
from ..options import check_options, check_seconds
from ..transport.interface import DirectTransport
from ..worker.protocol import RunChunk, StopWorker, WorkerEnded, WorkerFailed
from .base import (
    Backend,
    BackendFailed,
    BackendSpec,
    ChannelBroken,
    WorkerExited,
    wait_ended,
    wait_ready,
)
from .ray_actor import RayWorker, init_failed_report
from .ray_losses import RayCapacityError, RayWorkerDiedError, death_cause, out_of_room
from .ray_session import (  # the session helpers' documented home until 0.5
    acquire_ray,
    bounded_query,
    exposed_ports,
    import_ray,
    is_cuda,
    release_ray,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Dict, List, Mapping, Optional, Tuple

__all__ = ["RayBackend", "RayCapacityError", "RayWorkerDiedError", "acquire_ray",
           "death_cause", "exposed_ports", "import_ray", "is_cuda", "release_ray"]


class _Call(NamedTuple):
    """What a pending Ray call was for."""

    slot: int
    gen: int  # the slot's actor when it was made: replies of a replaced one are dropped
    kind: str  # "where", "start", "chunk", "stop" or "probe"
    job: Any = None
    seq: Any = None
    order: int = 0  # calls of one actor run in this order


class RayBackend(Backend):
    """Runs each device's worker in a Ray actor."""

    takes_no_cfg = True

    #: seconds a poll waits in ``ray.wait`` before checking for a wakeup
    wakeup_interval = 0.05
    #: seconds to wait for killed actors to be gone
    kill_timeout = 5.0
    #: seconds to wait for Ray's GCS to say what the cluster has
    resources_timeout = 30.0
    #: seconds an actor Ray cannot reach may wait for Ray's verdict (its node's
    #: health checks, 15 to 30 s by default) before easycore ends it as lost
    unreachable_timeout = 120.0

    def __init__(
        self, spec: BackendSpec, address: Optional[str] = None,
        ray_init_kwargs: Optional[Mapping[str, Any]] = None,
        capacity_timeout: Optional[float] = 300.0,
    ) -> None:
        """
        Args:
            spec (BackendSpec): the program, devices, cfg and policy.
            address (str or None): for ``ray.init``: None connects to a running
                local Ray or starts one, ``"auto"``, ``"host:port"`` or
                ``"ray://host:port"`` join a cluster.
            ray_init_kwargs (dict or None): any other ``ray.init`` arguments.
            capacity_timeout (float or None): seconds a worker may wait for a node
                with room for it: at start every worker must be placed within it;
                later, while no worker runs, a replacement must be (while others
                run it waits, and takes a node that joins). Past it:
                [`RayCapacityError`][easycore.common.parallel.backends.ray_losses.RayCapacityError].
                None: wait for ever.
        """
        self._ray = import_ray()
        init_kwargs = dict(ray_init_kwargs or {})
        if "address" in init_kwargs:
            raise ValueError("pass address=..., not ray_init_kwargs['address']")
        self.capacity_timeout = check_seconds("capacity_timeout", capacity_timeout)
        self.devices = list(spec.devices)
        self.transport = DirectTransport()
        self._spec, self._address, self._init_kwargs = spec, address, init_kwargs
        n = len(self.devices)
        self._actors: List[Any] = [None] * n
        self._gen = [0] * n  # which actor of the slot is current
        self._where: List[Optional[tuple]] = [None] * n  # (pid, node id, node ip)
        self._where_refs: List[Any] = [None] * n
        self._pending: Dict[Any, _Call] = {}
        self._order = 0  # of the calls made
        self._dead: set = set()  # slots whose death was reported
        self._killed: set = set()  # slots we killed: their exit is expected
        self._ending: set = set()  # slots asked to end
        self._doubt: Dict[int, float] = {}  # unreachable slots (since), awaiting Ray's verdict
        self._unplaced: Dict[int, float] = {}  # slot -> when its actor was asked for
        self._running_at = time.monotonic()  # last seen with a placed, live worker
        self._starting_at: Optional[float] = None  # start(): every actor must be placed
        self._lost: Dict[Any, DeathCause] = {}  # node -> why, for the capacity error
        self._gave_up = False
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._woken = False
        self._owns_session = False
        self._closed = False

    @classmethod
    def from_spec(cls, spec: BackendSpec, **options: Any) -> RayBackend:
        """As ``Backend.from_spec``; the options are ``address``, ``ray_init_kwargs``
        and ``capacity_timeout``."""
        check_options("ray", options, ("address", "ray_init_kwargs", "capacity_timeout"))
        return cls(spec, **options)

    # ----------------------------------------------------------------- start
    def start(self) -> None:
        ray = self._ray
        self._owns_session = acquire_ray(ray, self._address, self._init_kwargs)
        try:
            self._check_resources()
            self._starting_at = time.monotonic()
            for slot in range(len(self.devices)):
                self._start_one(slot)
            # A worker whose node went away while it started starts again: another
            # node may have room (the start's capacity_timeout bounds the retries).
            wait_ready(self, set(range(len(self.devices))), lambda slot: self._locate(slot)[0],
                       restart=self._start_one)
            self._starting_at = None
        except BaseException:
            self.abort()
            raise

    def _start_one(self, slot: int) -> None:
        ray, spec = self._ray, self._spec
        num_cpus, num_gpus, inner = spec.policy.ray_resources(self.devices[slot])
        context = spec.contexts[slot] if spec.contexts is not None else None
        # No node is named: Ray places the actor wherever there is room now, a
        # node that joined since included, or when room appears.
        actor = ray.remote(RayWorker).options(
            num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0
        ).remote(spec.program, slot, inner, spec.cfg, context, spec.threads)
        self._gen[slot] += 1
        self._actors[slot] = actor
        self._where[slot] = None
        for state in (self._dead, self._killed, self._ending):
            state.discard(slot)
        self._doubt.pop(slot, None)
        where = self._where_refs[slot] = actor.where.remote()
        with self._lock:
            self._unplaced[slot] = time.monotonic()
        self._track(where, slot, "where")
        self._track(actor.start.remote(), slot, "start")

    def _track(self, ref: Any, slot: int, kind: str, job: Any = None, seq: Any = None) -> None:
        """Remember what the call ``ref`` on ``slot``'s actor is for, until its reply."""
        with self._lock:
            self._order += 1
            self._pending[ref] = _Call(slot, self._gen[slot], kind, job, seq, self._order)
        self._changed.set()

    def _drop_calls(self, slot: int) -> None:
        """Forget ``slot``'s pending calls (its actor is gone, or cannot be reached)."""
        with self._lock:
            for ref in [r for r, c in self._pending.items() if c.slot == slot]:
                del self._pending[ref]

    def _check_resources(self) -> None:
        have = bounded_query(self._ray.cluster_resources, self.resources_timeout,
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

    def death_error(self, worker: int, exited: WorkerExited,
                    items: Optional[List[int]] = None) -> BaseException:
        pid, node_id, node_ip = self._locate(worker)
        cause = exited.cause
        if cause is not None:
            node_id, node_ip = cause.node_id or node_id, cause.node_ip or node_ip
        return RayWorkerDiedError(self.devices[worker], worker, pid, node_id, node_ip,
                                  exited.reason, items, cause)

    # -------------------------------------------------------------- messages
    def send(self, worker: int, message: Any) -> None:
        if self._closed or worker in self._dead:
            raise ChannelBroken(f"worker {worker} on device {self.devices[worker]!r} is gone")
        is_chunk = isinstance(message, RunChunk)
        if not is_chunk:  # StopWorker
            self._ending.add(worker)
        if worker in self._doubt:
            # Unreachable, its fate not known yet: the engine keeps the chunk,
            # and takes it back when the worker's exit is reported.
            return
        # Returns at once: Ray queues the task on the actor; the engine's
        # credits bound how many are queued.
        ref = self._actors[worker].handle.remote(message)
        if is_chunk:
            self._track(ref, worker, "chunk", message.job, message.seq)
        else:
            self._track(ref, worker, "stop")

    def poll(self, timeout: Optional[float]) -> List[Tuple[int, Any]]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            out = self._check_capacity()
            if out:
                return out
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
                for ref in ready:
                    self._reply(ref, out)
                return out
            if remaining == 0.0:
                return []

    def _reply(self, ref: Any, out: List[Tuple[int, Any]]) -> None:
        ray = self._ray
        with self._lock:
            call = self._pending.pop(ref, None)
        if call is None or call.gen != self._gen[call.slot] or call.slot in self._dead:
            return  # a replaced actor's, or after the slot's exit was reported
        slot = call.slot
        try:
            message = ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            expected = slot in self._killed or slot in self._ending
            if isinstance(exc, ray.exceptions.ActorUnavailableError) and not expected:
                self._suspect(slot, out)  # Ray's verdict on it comes later
                return
            self._settle_before(call, out)
            if slot not in self._dead:  # (no earlier call reported it)
                self._exit(slot, exc, expected, out)
            return
        except ray.exceptions.ObjectLostError:
            # A chunk's results lost with the node that held them: the worker's
            # fate (and so whether its chunks run again) comes from Ray's verdict.
            self._suspect(slot, out)
            return
        except ray.exceptions.RayError as exc:  # e.g. results Ray could not serialise
            cause = getattr(exc, "cause", None) or exc
            report = ErrorReport("sending results", type(cause).__name__,
                                 (str(cause).strip().splitlines() or [""])[0], str(exc), None)
            out.append((slot, WorkerFailed(call.job, call.seq, report)))
            return
        if call.kind in ("where", "probe"):
            self._where[slot] = message
            self._unplaced.pop(slot, None)
            if call.kind == "probe":  # it answers again, but the calls it had are lost
                self._end_unreachable(slot, "its calls were lost", out)
            return
        out.append((slot, message))
        if isinstance(message, (WorkerEnded,)) or (
            isinstance(message, WorkerFailed) and message.job is None and slot in self._ending
        ):
            self._dead.add(slot)
            out.append((slot, WorkerExited(self._locate(slot)[0], 0, True)))

    def _settle_before(self, call: _Call, out: List[Tuple[int, Any]]) -> None:
        """The replies of the calls the actor ran before the one it died in, first: they
        may still be on their way, and the engine blames the call at the head of its queue."""
        with self._lock:
            earlier = [r for r, c in self._pending.items()
                       if c.slot == call.slot and c.gen == call.gen and c.order < call.order]
        if earlier:  # each resolves soon: a value sent, or the same death
            ready, _ = self._ray.wait(earlier, num_returns=len(earlier),
                                      timeout=self.kill_timeout)
            for ref in earlier:
                if ref in ready:
                    self._reply(ref, out)

    def _exit(self, slot: int, exc: Any, expected: bool, out: List[Tuple[int, Any]]) -> None:
        """``slot``'s actor is gone, as ``exc`` says: report it once, with its cause."""
        self._dead.add(slot)
        self._doubt.pop(slot, None)
        self._drop_calls(slot)  # its other calls fail the same way: one exit is enough
        with self._lock:
            self._unplaced.pop(slot, None)
        if getattr(exc, "actor_init_failed", False):
            out.append((slot, WorkerFailed(None, None, init_failed_report(exc))))
        pid, node_id, node_ip = self._locate(slot)
        cause = death_cause(exc, node_id, node_ip)
        if cause.kind == "node lost" and not expected:
            self._lost[cause.node_id] = cause
        out.append((slot, WorkerExited(pid, None, expected, str(exc), cause)))

    def _suspect(self, slot: int, out: List[Tuple[int, Any]]) -> None:
        """Ray cannot reach ``slot``'s actor: drop its calls, and ask it where it is until
        Ray decides (its node's health checks): dead, or reachable again; or until
        ``unreachable_timeout`` passed without a verdict."""
        since = self._doubt.setdefault(slot, time.monotonic())
        if time.monotonic() - since > self.unreachable_timeout:
            self._end_unreachable(slot, f"for {self.unreachable_timeout:g} s", out)
            return
        self._drop_calls(slot)
        self._track(self._actors[slot].where.remote(), slot, "probe")

    def _end_unreachable(self, slot: int, detail: str, out: List[Tuple[int, Any]]) -> None:
        """End the actor Ray lost touch with (the engine replaces it): its node is lost."""
        pid, node_id, node_ip = self._locate(slot)
        self._dead.add(slot)
        self._doubt.pop(slot, None)
        self._drop_calls(slot)
        self._kill_quietly(self._actors[slot])
        cause = DeathCause("node lost", f"unreachable: {detail}", node_id, node_ip)
        self._lost[node_id] = cause
        out.append((slot, WorkerExited(pid, None, False, f"Ray could not reach it: {detail}",
                                       cause)))

    def _check_capacity(self) -> List[Tuple[int, Any]]:
        """The ``capacity_timeout`` rule: ``[(slot, BackendFailed(RayCapacityError))]``
        once, when actors found no room in time; else nothing."""
        now = time.monotonic()
        running = any(s not in self._unplaced and s not in self._dead and s not in self._doubt
                      and self._actors[s] is not None for s in range(len(self.devices)))
        if running and self._starting_at is None:
            self._running_at = now
        limit = self.capacity_timeout
        with self._lock:
            unplaced = dict(self._unplaced)
        late = [] if self._gave_up else out_of_room(unplaced, running, self._running_at,
                                                    self._starting_at, limit, now)
        if not late:
            return []
        self._gave_up = True
        free, total = {}, {}
        try:  # only for the message: Ray may not answer
            free = bounded_query(self._ray.available_resources, 5.0, "ray.available_resources()")
            total = bounded_query(self._ray.cluster_resources, 5.0, "ray.cluster_resources()")
        except ParallelError:
            pass
        error = RayCapacityError(late, [self.devices[s] for s in late], limit or 0, free, total,
                                 self._lost, starting=self._starting_at is not None)
        return [(late[0], BackendFailed(error))]

    def wakeup(self) -> None:
        with self._lock:
            self._woken = True
        self._changed.set()

    # ---------------------------------------------------- one worker at a time
    def kill(self, worker: int) -> None:
        self._killed.add(worker)
        self._kill_quietly(self._actors[worker])  # its exit is reported either way

    def _kill_quietly(self, actor: Any) -> None:
        try:  # noqa: SIM105
            self._ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 -- gone already (Ray's errors vary by version)
            pass

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
                errors.append(self.death_error(slot, message))

        try:
            for slot in range(len(self.devices)):
                if slot in self._doubt or slot in self._unplaced:
                    # Unreachable, or never placed: no end hooks ran or can run;
                    # abort() below kills it.
                    self._dead.add(slot)
                elif slot not in self._dead:
                    self.send(slot, StopWorker())
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
            self._kill_quietly(actor)
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
