"""The public face: [`Service.start`][easycore.common.parallel.services.Service.start],
[`ServiceHandle`][easycore.common.parallel.services.ServiceHandle] and
[`lookup`][easycore.common.parallel.services.lookup].

A handle is a target (how to reach the service: a socket path and key, or a
Ray actor's name), a transport class, and, lazily, one channel per process
(a forked child that inherits a handle opens its own connection). The handle
that [`Service.start`][easycore.common.parallel.services.Service.start]
returned *owns* the service: closing it (or garbage-collecting it, or the
owner's process ending) stops the service. Every other handle (unpickled,
copied, from [`lookup`][easycore.common.parallel.services.lookup] or from
[`with_transport`][easycore.common.parallel.services.ServiceHandle.with_transport])
only disconnects when closed.

(Over 400 lines on purpose: ``ServiceHandle`` is the one public face of a service
whatever hosts it (process, thread, Ray); most of it is the docstrings of its methods.)
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from concurrent.futures import Future
from multiprocessing import util

from ..connection.address import new_socket_address, pid_namespace, remove_quietly, services_dir
from ..defaults import default_transport
from ..errors import ServiceClosedError, ServiceNotFoundError, WorkerDiedError, WorkerError
from ..transport.shared_memory import SharedMemoryTransport
from .client import ProcessTarget
from .dispatch import RUN, describe, dump_spec
from .naming import find, register, unregister
from .remote_ref import resolve, resolve_future
from .server import ServiceHost

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Sequence, Union

__all__ = ["BACKENDS", "Service", "ServiceHandle", "check_backend", "lookup"]

#: where a service can run
BACKENDS = ("process", "ray")


def check_backend(backend: str) -> None:
    """Refuse a back-end that is not one of `BACKENDS`.

    Raises:
        ValueError: naming the back-ends known.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; known: {list(BACKENDS)}")


class _ProcessOwner:
    """What the owner of a local service holds: its runner and its files."""

    def __init__(self, runner: Any, address: str, entry: Optional[str], token: str) -> None:
        self.runner = runner
        self.address = address
        self.entry = entry
        self.token = token
        self.pid = os.getpid()

    def close(self, timeout: Optional[float]) -> None:
        if os.getpid() != self.pid:
            return  # a forked copy: the service is the parent's to stop
        if self.entry is not None:
            unregister(self.entry, self.token)  # first: no new client finds a closing service
        try:
            self.runner.close(timeout)
        except WorkerDiedError:
            pass  # it died earlier; its clients were told
        finally:
            remove_quietly(self.address)  # normally the service did it


class _State:
    """A handle's mutable part; the finalizer holds this, never the handle."""

    def __init__(self, target: Any, transport_class: Optional[type], owner: Any,
                 explicit: bool = False) -> None:
        self.target = target
        self.transport_class = transport_class
        #: False: a default that may be upgraded (see the defaults module)
        self.explicit = explicit
        self.owner = owner
        self.channel: Any = None
        self.closed = False
        self.lock = threading.Lock()
        self.backend_kind = "ray" if type(target).__name__ == "RayTarget" else "process"

    def get_channel(self, timeout: Optional[float] = None, what: str = "a call") -> Any:
        """This process's channel, opened (within ``timeout`` seconds) if needed.

        Raises:
            TimeoutError: it could not be opened in time (``what`` did not return).
        """
        channel = self.channel
        if channel is not None and channel.pid == os.getpid() and not channel.reset:
            return channel
        deadline = None if timeout is None else time.monotonic() + timeout
        late = TimeoutError(f"{what} of {self.target.label} did not return within {timeout} s "
                            "(connecting)")
        if not self.lock.acquire(timeout=-1 if timeout is None else timeout):
            raise late  # another thread is connecting, too slowly for this call
        try:
            if self.closed:
                raise ServiceClosedError(f"this handle to {self.target.label} is closed")
            old = self.channel
            if old is None or old.pid != os.getpid() or old.reset:
                if old is not None and old.pid == os.getpid():
                    old.close()  # reset by an interrupted send: a fresh connection
                self.channel = None
                if self.backend_kind == "process":
                    try:
                        self.channel = self.target.open_channel(self._transport(), deadline)
                    except TimeoutError:
                        if deadline is None:
                            raise
                        raise late from None
                else:
                    self.channel = self.target.open_channel(self.transport_class)
            return self.channel
        finally:
            self.lock.release()

    def _transport(self) -> type:
        assert self.transport_class is not None
        if self.explicit:
            return self.transport_class
        return default_transport(self.transport_class)

    def close(self, timeout: Optional[float] = 30.0) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            channel, self.channel = self.channel, None
            owner, self.owner = self.owner, None
        try:
            if channel is not None:
                channel.close()
        finally:
            if owner is not None:
                owner.close(timeout)


class ServiceHandle:
    """A picklable handle on a running service: call its public methods.

    Get one from [`Service.start`][easycore.common.parallel.services.Service.start]
    (the owner's handle) or [`lookup`][easycore.common.parallel.services.lookup];
    pickle it into other processes (a `multiprocessing.Pool` task, a runner's
    ``cfg``, a Ray task): each copy connects on its first call. Thread-safe.

    A method that raises in the service raises
    [`WorkerError`][easycore.common.parallel.WorkerError] here, with the
    service's traceback (``__cause__`` is the original exception when it
    pickles); a service that dies raises
    [`ServiceDiedError`][easycore.common.parallel.services.ServiceDiedError]
    (a [`WorkerDiedError`][easycore.common.parallel.WorkerDiedError]) in every
    client, calls in flight included, within a second; a closed one raises
    [`ServiceClosedError`][easycore.common.parallel.services.ServiceClosedError].

    Examples:
        ```python
        from easycore.common.parallel.services import Service, VersionedStore

        with Service.start(VersionedStore, depth=2) as store:
            assert store.call("push", "w", [1, 2], version=1, prev_version=None)
            assert store.call("pull", "w") == ([1, 2], 1)
        ```
    """

    #: seconds ``close()`` of an owner's handle waits for the service to stop
    stop_timeout: ClassVar[float] = 30.0

    def __init__(
        self,
        backend: str,
        target: Any,
        transport_class: Optional[type],
        *,
        name: Optional[str] = None,
        namespace: Optional[str] = None,
        owner: Any = None,
        explicit_transport: bool = False,
    ) -> None:
        self._backend = backend
        self._name = name
        self._namespace = namespace
        self._state = _State(target, transport_class, owner, explicit_transport)
        # At garbage collection and at interpreter exit (before the runners'
        # own finalizers kill their workers, exit priority 10): close, so the
        # owner's service stops cleanly and a client's shared memory is freed.
        util.Finalize(self, self._state.close, exitpriority=20)

    # ------------------------------------------------------------- calls
    def call(self, method: str, *args: Any, timeout: Optional[float] = None, **kwargs: Any) -> Any:
        """Call ``method(*args, **kwargs)`` on the service and wait for its result.

        Args:
            method (str): a public method of the service object.
            *args: its positional arguments (pickled; large NumPy arrays, and
                tensors with ``TensorTransport``, go through shared memory).
            timeout (float or None): seconds to wait; then ``TimeoutError``
                (the call itself still runs in the service).
            **kwargs: its keyword arguments.

        Returns:
            Any: what the method returned (a copy: the service's objects are its own).

        Raises:
            WorkerError: the method raised; holds the service's traceback.
            ServiceDiedError: the service died.
            ServiceClosedError: the service or this handle was closed.
            TimeoutError: no result within ``timeout`` seconds (connecting included).
        """
        start = time.monotonic()
        channel = self._state.get_channel(timeout, f"{method}()")
        return channel.call(method, args, kwargs, _left(timeout, start))

    def call_async(
        self, method: str, *args: Any, timeout: Optional[float] = None, **kwargs: Any
    ) -> Future:
        """Send a call and return at once.

        Calls from one handle run in the order they were sent.

        Args:
            method (str): a public method of the service object.
            *args: its positional arguments.
            timeout (float or None): the future fails with ``TimeoutError``
                after this many seconds without a result.
            **kwargs: its keyword arguments.

        Returns:
            concurrent.futures.Future: resolves to the result, or fails with
            the errors [`call`][easycore.common.parallel.services.ServiceHandle.call] raises.
        """
        start = time.monotonic()
        channel = self._state.get_channel(timeout, f"{method}()")
        return channel.submit(method, args, kwargs, _left(timeout, start))

    def run(self, fn: Callable[..., Any], *args: Any, timeout: Optional[float] = None,
            remote: bool = False, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` in the service's process and wait for its result.

        Any callable: it travels by value (cloudpickle) when plain pickle
        would send it by a reference the service cannot follow (a lambda, a
        closure, a function of ``__main__``), as ``Pool`` sends functions.
        It runs between the service's calls, one at a time like them.

        Args:
            fn (callable): what to run.
            *args: its positional arguments.
            timeout (float or None): seconds to wait (connecting included).
            remote (bool): keep the result in the service and return a
                [`RemoteRef`][easycore.common.parallel.services.RemoteRef] on it.
            **kwargs: its keyword arguments (to pass one named ``timeout`` or
                ``remote``, use ``functools.partial``).

        Returns:
            Any: ``fn``'s result (a copy), or a ``RemoteRef``.

        Raises:
            WorkerError: ``fn`` raised; holds the service's traceback.
            ServiceDiedError, ServiceClosedError, TimeoutError: as for ``call``.
        """
        result = self.call(RUN, fn, bool(remote), *args, timeout=timeout, **kwargs)
        return resolve(self, result)

    def run_async(self, fn: Callable[..., Any], *args: Any, timeout: Optional[float] = None,
                  remote: bool = False, **kwargs: Any) -> Future:
        """[`run`][easycore.common.parallel.services.ServiceHandle.run], returning at once.

        Returns:
            concurrent.futures.Future: resolves to ``fn``'s result or a ``RemoteRef``.
        """
        inner = self.call_async(RUN, fn, bool(remote), *args, timeout=timeout, **kwargs)
        return resolve_future(self, inner)

    def with_transport(self, transport_class: type) -> ServiceHandle:
        """Another handle on this service whose calls use ``transport_class``.

        Rarely needed: a default handle already moves tensors through shared
        memory in a process that imported torch (when easycore-torch is
        installed; see [`defaults`][easycore.common.parallel.defaults]).
        A handle made here keeps exactly ``transport_class`` (e.g.
        ``PickleTransport`` for everything in-band). The new handle does not
        own the service. (Ray ignores transports.)

        Args:
            transport_class (type): a [`Transport`][easycore.common.parallel.Transport] class.

        Returns:
            ServiceHandle:
        """
        return ServiceHandle(self._backend, self._state.target, transport_class,
                             name=self._name, namespace=self._namespace,
                             explicit_transport=True)

    def close(self, timeout: Optional[float] = None) -> None:
        """Disconnect; the owner's handle also stops the service. Idempotent.

        Stopping lets the call in progress finish, fails every other client's
        calls with [`ServiceClosedError`][easycore.common.parallel.services.ServiceClosedError],
        calls the object's ``close()`` method if it has one, and removes the
        service's socket, name and shared memory. A service that had died is
        not an error here (its clients were told).

        Args:
            timeout (float or None): seconds the service may take to stop
                (default ``stop_timeout``); then it is killed and
                ``TimeoutError`` is raised.

        Raises:
            WorkerError: the object's ``close()`` raised.
        """
        self._state.close(self.stop_timeout if timeout is None else timeout)

    # -------------------------------------------------------- properties
    @property
    def name(self) -> Optional[str]:
        """str or None: its name, for [`lookup`][easycore.common.parallel.services.lookup]."""
        return self._name

    @property
    def namespace(self) -> Optional[str]:
        """str or None: its namespace (for Ray, the Ray namespace)."""
        return self._namespace

    @property
    def backend(self) -> str:
        """str: ``"process"`` or ``"ray"``."""
        return self._backend

    @property
    def device(self) -> str:
        """str: the device it runs on."""
        return self._state.target.device

    @property
    def pid(self) -> Optional[int]:
        """int or None: its process id."""
        return self._state.target.pid

    @property
    def is_owner(self) -> bool:
        """bool: whether closing this handle stops the service."""
        return self._state.owner is not None

    @property
    def closed(self) -> bool:
        """bool: whether this handle was closed."""
        return self._state.closed

    def __enter__(self) -> ServiceHandle:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # noqa: SIM105 - the except below says why it is broad
            self.close()
        except Exception:  # noqa: BLE001
            # Whatever close() raises, the exception already propagating
            # matters more: it must not be masked.
            pass

    def __reduce__(self) -> Any:
        # Never the owner, the channel or the lock: a copy is a new client.
        state = self._state
        args = (self._backend, state.target, state.transport_class, self._name, self._namespace,
                state.explicit)
        return (_rebuild, args)

    def __repr__(self) -> str:
        t = self._state.target
        role = "owner" if self.is_owner else "client"
        state = " closed" if self.closed else ""
        return (f"<ServiceHandle {t.label} {self._backend} device={t.device!r} pid={t.pid} "
                f"{role}{state}>")


def _left(timeout: Optional[float], start: float) -> Optional[float]:
    """What is left of ``timeout`` seconds since ``start``."""
    if timeout is None:
        return None
    return max(0.0, timeout - (time.monotonic() - start))


def _rebuild(backend: str, target: Any, transport_class: Optional[type], name: Optional[str],
             namespace: Optional[str], explicit: bool = False) -> ServiceHandle:
    return ServiceHandle(backend, target, transport_class, name=name, namespace=namespace,
                         explicit_transport=explicit)


class Service:
    """Host an object in its own worker and call it from anywhere.

    ``Service.start(factory, *args, **kwargs)`` builds ``factory(*args,
    **kwargs)`` in one easycore worker (a local process, or a Ray actor with
    ``backend="ray"``) and returns the owner's
    [`ServiceHandle`][easycore.common.parallel.services.ServiceHandle].
    Calls run one at a time, so the object needs no locks; each client's calls
    in the order it made them.

    Subclasses choose where services run: ``host_class`` (the runner that
    hosts a local service) and ``transport_class`` (how the owner's handle
    moves arguments and results).
    """

    #: the runner class that hosts a local service (one device, one worker)
    host_class: ClassVar[type] = ServiceHost
    #: how handles from ``start`` move values (shared memory for NumPy arrays)
    transport_class: ClassVar[type] = SharedMemoryTransport

    @classmethod
    def start(
        cls,
        factory: Callable[..., Any],
        *args: Any,
        name: Optional[str] = None,
        device: str = "cpu",
        backend: str = "process",
        namespace: Optional[str] = None,
        backend_options: Optional[Mapping[str, Any]] = None,
        groups: Union[str, Sequence[str], None] = None,
        **kwargs: Any,
    ) -> ServiceHandle:
        """Start ``factory(*args, **kwargs)`` as a service.

        Args:
            factory (callable): builds the service object in its worker, e.g.
                a class. Sent there pickled (by value with cloudpickle when
                installed, so lambdas work).
            *args: positional arguments for ``factory``.
            name (str or None): register it under this name, for
                [`lookup`][easycore.common.parallel.services.lookup]; unique
                per namespace (a ``ValueError`` if a live service holds it).
            device (str): the worker's device, e.g. ``"cpu"``; the host runner
                validates it (the torch one also ``"cuda:N"``).
            backend (str): ``"process"`` (a local process, reached through a
                Unix socket) or ``"ray"`` (a Ray named actor, reachable from
                the whole cluster).
            namespace (str or None): where the name lives: a sub-registry of
                the local directory, or the Ray namespace (None: the current one).
            backend_options (dict or None): for ``"process"``, keyword
                arguments of the host runner (e.g. ``start_method``); for
                ``"ray"``, ``address`` and ``ray_init_kwargs`` as for the
                runners' Ray back-end, and ``actor_options`` for
                ``ray.remote(...).options`` (e.g. ``num_cpus``).
            groups (str, list of str or None): groups the service is a member
                of while it runs, for [`names`][easycore.common.parallel.services.names]
                (needs a ``name``).
            **kwargs: keyword arguments for ``factory`` (to pass one named
                like a parameter above, use ``functools.partial``).

        Returns:
            ServiceHandle: the owner's handle; the service stops when it is
            closed or garbage-collected, or when this process ends.

        Raises:
            WorkerError: ``factory`` raised in the worker (its traceback included).
            ValueError: bad arguments, or the name is taken.
            TypeError: the factory or its arguments cannot be pickled.
        """
        if not callable(factory):
            raise TypeError(f"factory must be callable, got {factory!r}")
        check_backend(backend)
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"name must be a non-empty str or None, got {name!r}")
        member_of = _check_groups(groups, name)
        label = f"service {name!r}" if name else f"service <{describe(factory)}>"
        spec = dump_spec(factory, args, kwargs)
        options = dict(backend_options or {})
        if backend == "ray":
            from .ray_service import start_ray

            target, owner = start_ray(spec, label, name, device, namespace, options, member_of)
            return ServiceHandle("ray", target, None, name=name, namespace=target.namespace,
                                 owner=owner)
        return cls._start_process(spec, label, name, device, namespace, options, member_of)

    @classmethod
    def _start_process(
        cls, spec: bytes, label: str, name: Optional[str], device: str,
        namespace: Optional[str], options: Dict[str, Any], groups: List[str],
    ) -> ServiceHandle:
        if not hasattr(socket, "AF_UNIX"):  # pragma: no cover - Windows
            raise OSError("local services need Unix-domain sockets; use backend='ray' here")
        for key in ("devices", "cfg", "backend"):
            if key in options:
                raise ValueError(f"backend_options cannot set {key!r}")
        base = services_dir()
        if name is not None and find(base, name, namespace) is not None:
            raise ValueError(f"a service named {name!r} is already running; close it, or "
                             "choose another name")
        address = new_socket_address(base)
        authkey = os.urandom(32)
        cfg = {"spec": spec, "label": label, "address": address, "authkey": authkey.hex()}
        try:
            runner = cls.host_class(devices=[device], cfg=cfg, **options)
        except WorkerError as exc:
            remove_quietly(address)
            err = WorkerError(exc.device, f"starting {label}", 0, exc.pid, exc.exc_type,
                              exc.exc_message, exc.remote_traceback)
            raise err from exc.__cause__
        except BaseException:
            remove_quietly(address)
            raise
        pid = runner.worker_pids[0]
        device = runner.devices[0]
        target = ProcessTarget(address, authkey, pid, device, label, pid_namespace())
        token = secrets.token_hex(8)
        entry = None
        if name is not None:
            record = {
                "name": name, "namespace": namespace, "address": address,
                "authkey": authkey.hex(), "pid": pid, "owner_pid": os.getpid(),
                "device": device, "label": label, "token": token,
                "pidns": target.pidns, "transport": _class_path(cls.transport_class),
                "groups": groups,
            }
            try:
                entry = register(base, name, namespace, record)
            except BaseException:
                try:
                    runner.close(5.0)
                finally:
                    remove_quietly(address)
                raise
        owner = _ProcessOwner(runner, address, entry, token)
        return ServiceHandle("process", target, cls.transport_class, name=name,
                             namespace=namespace, owner=owner)


def lookup(
    name: str,
    *,
    backend: str = "process",
    namespace: Optional[str] = None,
    timeout: float = 10.0,
    address: Optional[str] = None,
) -> ServiceHandle:
    """Find a running service by name.

    Waits up to ``timeout`` seconds for it to appear (it may be starting).

    Args:
        name (str): what it was started with (``Service.start(..., name=name)``).
        backend (str): ``"process"`` (this user's local registry) or ``"ray"``
            (a Ray named actor).
        namespace (str or None): as given to ``Service.start``; for Ray, None
            is the current Ray namespace.
        timeout (float): seconds to wait for it.
        address (str or None): Ray only, when this process is not connected
            to Ray yet: the cluster to join (``ray.init(address=...)``;
            None: ``"auto"``, the Ray running on this machine).

    Returns:
        ServiceHandle: a client's handle (closing it only disconnects).

    Raises:
        ServiceNotFoundError: no such service within ``timeout`` (a
            ``LookupError``).
    """
    check_backend(backend)
    if backend == "ray":
        from .ray_service import lookup_ray

        ray_target = lookup_ray(name, namespace, timeout, address)
        return ServiceHandle("ray", ray_target, None, name=name, namespace=ray_target.namespace)
    base = services_dir()
    deadline = time.monotonic() + timeout
    while True:
        record = find(base, name, namespace)
        if record is not None:
            break
        if time.monotonic() >= deadline:
            where = "" if namespace is None else f" in namespace {namespace!r}"
            raise ServiceNotFoundError(
                f"no running service named {name!r}{where} (looked in {base!r} for {timeout} s)"
            )
        time.sleep(0.05)  # another process registers it: no event crosses processes
    target = ProcessTarget(record["address"], bytes.fromhex(record["authkey"]), record["pid"],
                           record["device"], record["label"], record.get("pidns"))
    transport = _import_class(record.get("transport")) or SharedMemoryTransport
    return ServiceHandle("process", target, transport, name=name, namespace=namespace)


def _check_groups(groups: Union[str, Sequence[str], None], name: Optional[str]) -> List[str]:
    if groups is None:
        return []
    found = [groups] if isinstance(groups, str) else list(groups)
    for group in found:
        if not isinstance(group, str) or not group:
            raise ValueError(f"groups must be non-empty strs, got {group!r}")
    if found and name is None:
        raise ValueError("a service in a group needs a name (groups list names)")
    return found


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _import_class(path: Optional[str]) -> Optional[type]:
    if not path:
        return None
    from ..defaults import import_object  # the one import of "module:qualname" paths

    try:
        obj: Any = import_object(path)
    except (ImportError, AttributeError):
        return None  # e.g. torch not installed here: arrays still go through shared memory
    return obj
