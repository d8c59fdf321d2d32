"""The Ray back-end of services: one Ray named actor per service.

Ray does the hosting, the placement (``num_gpus=1`` for a CUDA device), the
naming (named actors in a namespace, so
[`lookup`][easycore.common.parallel.services.lookup] works from any driver
or task of the cluster) and the transport (its object store). The actor
wraps the object with the same dispatch as the process back-end, so methods,
errors and [`is_remote_call`][easycore.common.parallel.services.is_remote_call]
behave alike. ``max_concurrency=1``: calls run one at a time.

The actor is not detached: like a local service it ends with the driver
that started it. Ray itself is joined or started as the runners' Ray
back-end does (a Ray started here is private: loopback, no dashboard, and
shut down when the last user closes).
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections import deque
from concurrent.futures import InvalidStateError
from dataclasses import dataclass

from .._future import Future
from .._os import interrupts
from ..backends.ray import acquire_ray, death_cause, import_ray, is_cuda, release_ray
from ..errors import (
    DeathCause,
    ErrorReport,
    ServiceClosedError,
    ServiceDiedError,
    ServiceNotFoundError,
    WorkerError,
)
from .dispatch import REF, Dispatcher, build, close_object
from .wire import Outcome, ServiceInfo

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Dict, Optional, Sequence, Tuple

__all__ = ["CallFailed", "RayChannel", "RayTarget", "lookup_ray", "start_ray"]


class CallFailed(Exception):
    """Raised by the actor when a method raised: carries its ErrorReport.

    Success returns the bare result (no wrapping tuple: a call costs what a
    plain actor call costs); failure travels as Ray's task error around this.
    """

    def __init__(self, report: ErrorReport) -> None:
        super().__init__(report)
        self.report = report


class _ServiceActor:
    """The object, in a Ray actor; made a Ray actor class by :func:`start_ray`."""

    def __init__(self, spec: bytes, label: str, device: str, groups: tuple = ()) -> None:
        self._label, self._device = label, device
        self._groups = list(groups)
        self._error: Optional[ErrorReport] = None
        self._obj: Any = None
        try:
            self._obj = build(spec)
        except BaseException as exc:  # noqa: BLE001 - reported by ready(), not as a failed actor
            self._error = ErrorReport.capture(f"starting {label}", exc)
        self._dispatcher = Dispatcher(self._obj, label)

    def ready(self) -> Outcome:
        """The service's `ServiceInfo`, or the report of its factory's error."""
        if self._error is not None:
            return Outcome(None, self._error)
        return Outcome(ServiceInfo(os.getpid(), self._label, self._device), None)

    def groups(self) -> list:
        return self._groups

    def call(self, method: str, /, *args: Any, **kwargs: Any) -> Any:
        outcome = self._dispatcher.invoke(method, args, kwargs)
        if outcome.report is None:
            return outcome.value
        raise CallFailed(outcome.report)

    def stop(self) -> Outcome:
        try:
            close_object(self._obj)
        except BaseException as exc:  # noqa: BLE001 - close()'s error goes to the owner
            return Outcome(None, ErrorReport.capture(f"close() of {self._label}", exc))
        return Outcome(None, None)


@dataclass(frozen=True)
class RayTarget:
    """How to reach a Ray service: its actor's name and namespace, and the cluster."""

    name: str
    namespace: str
    gcs_address: Optional[str]
    device: str
    label: str
    pid: Optional[int]

    def died(self, reason: str, cause: Optional[DeathCause] = None) -> ServiceDiedError:
        return ServiceDiedError(self.label, self.device, self.pid, None, reason, cause)

    def open_channel(self, transport_class: Optional[type]) -> RayChannel:
        return RayChannel(self)


class RayChannel:
    """Calls on a service's actor from this process (joins Ray if needed)."""

    #: seconds between sends of remote references' releases
    release_tick = 0.2
    #: never reset (an interrupted Ray call leaves no half frame)
    reset = False

    def __init__(self, target: RayTarget) -> None:
        self.target = target
        self.pid = os.getpid()
        self._releases: deque = deque()
        self._release_lock = threading.Lock()
        self._releaser: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._ray = ray = import_ray()
        self._owns_session = False
        if not ray.is_initialized():
            self._owns_session = acquire_ray(ray, target.gcs_address, {})
        try:
            self._actor = ray.get_actor(target.name, namespace=target.namespace)
        except ValueError:
            self.close()
            raise ServiceClosedError(
                f"{target.label} is gone: no Ray actor {target.name!r} in namespace "
                f"{target.namespace!r}"
            ) from None

    def call(self, method: str, args: tuple, kwargs: Dict[str, Any],
             timeout: Optional[float]) -> Any:
        ray = self._ray
        ref = self._actor.call.remote(method, *args, **kwargs)
        error: BaseException
        try:
            return ray.get(ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(
                f"{method}() of {self.target.label} did not return within {timeout} s"
            ) from None
        except ray.exceptions.RayError as exc:
            error = self._error(exc)
        raise error from error.__cause__  # the method's own exception, when it travelled

    def submit(self, method: str, args: tuple, kwargs: Dict[str, Any],
               timeout: Optional[float]) -> Future:
        ray, target = self._ray, self.target
        result: Future = Future()
        result.set_running_or_notify_cancel()
        ref = self._actor.call.remote(method, *args, **kwargs)

        def done(inner: Future) -> None:
            try:
                value = inner.result()
            except ray.exceptions.RayError as exc:
                error = self._error(exc)
            except BaseException as exc:  # noqa: BLE001 - whatever it is, the caller's future gets it
                error = exc
            else:
                _settle(result, value=value)
                return
            _settle(result, error=error)

        ref.future().add_done_callback(done)
        if timeout is not None:
            _expire_later(result, timeout, f"{method}() of {target.label}")
        return result

    def _error(self, exc: Any) -> BaseException:
        """Ray's error as ours: the method's WorkerError, or the actor's death."""
        ray, t = self._ray, self.target
        cause = getattr(exc, "cause", None)
        if isinstance(cause, CallFailed):
            return WorkerError.from_report(cause.report, t.device, 0, t.pid)
        if isinstance(exc, ray.exceptions.RayActorError):
            text = str(exc).strip().splitlines()
            return t.died("Ray: " + (text[0] if text else type(exc).__name__), death_cause(exc))
        return WorkerError(t.device, f"a call of {t.label}", 0, t.pid, type(exc).__name__,
                           (str(exc).strip().splitlines() or [""])[0], str(exc))

    def release(self, ref_id: int) -> None:
        """Release a remote reference soon; takes no lock (a finalizer calls it)."""
        self._releases.append(ref_id)

    def track_refs(self) -> None:
        """A RemoteRef was made: start the thread that sends releases."""
        with self._release_lock:
            if self._releaser is None and not self._stop.is_set():
                self._releaser = threading.Thread(target=self._release_loop, daemon=True,
                                                  name="easycore-service-release")
                self._releaser.start()

    def _release_loop(self) -> None:
        while not self._stop.wait(self.release_tick):
            self._send_releases()
        self._send_releases()

    def _send_releases(self) -> None:
        ids = []
        while self._releases:
            ids.append(self._releases.popleft())
        if ids:
            try:  # noqa: SIM105 - the except below says why it is broad
                self._actor.call.remote(REF, "release", ids)  # nobody waits on it
            except Exception:  # noqa: BLE001
                # Best effort: a lost release only leaves values in a service
                # that is gone or closing, and the releaser thread must outlive
                # whatever Ray raises while it shuts down.
                pass

    def close(self) -> None:
        self._stop.set()
        releaser = self._releaser
        if releaser is not None and releaser is not threading.current_thread():
            interrupts.join(releaser, 5.0)
        if self._owns_session and os.getpid() == self.pid:
            self._owns_session = False
            try:  # noqa: SIM105 - the except below says why it is broad
                release_ray(self._ray)
            except Exception:  # noqa: BLE001
                # Closing a handle: Ray failing to shut down (whatever it
                # raises) must not fail the close; the session is left as is.
                pass


def _expire_later(future: Future, timeout: float, what: str) -> None:
    def expire() -> None:
        _settle(future, error=TimeoutError(f"{what} did not return within {timeout} s"))

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    future.add_done_callback(lambda _: timer.cancel())


def _settle(future: Future, value: Any = None, error: Optional[BaseException] = None) -> None:
    """Resolve ``future`` unless the reply and the timeout raced and the other won."""
    try:
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)
    except InvalidStateError:
        pass


class _RayOwner:
    """What the owner of a Ray service holds: the actor, and maybe the Ray session."""

    #: seconds to wait for a killed actor's name to be free again
    kill_timeout = 10.0

    def __init__(self, ray: Any, actor: Any, target: RayTarget, owns_session: bool) -> None:
        self.ray, self.actor, self.target = ray, actor, target
        self.owns_session = owns_session
        self.pid = os.getpid()

    def close(self, timeout: Optional[float]) -> None:
        if os.getpid() != self.pid:
            return  # a forked copy: the service is the parent's to stop
        ray, error = self.ray, None
        try:
            if ray.is_initialized():
                try:
                    stopped = ray.get(self.actor.stop.remote(), timeout=timeout)
                    if stopped.report is not None:
                        error = WorkerError.from_report(stopped.report, self.target.device, 0,
                                                        self.target.pid)
                except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                    pass  # died earlier (its clients were told), or stuck: killed below
                self._kill()
        finally:
            if self.owns_session:
                release_ray(ray)
        if error is not None:
            raise error

    def _kill(self) -> None:
        # ray.kill travels through Ray's control plane: wait until the name is
        # free, so that a service of the same name can start right after.
        ray, t = self.ray, self.target
        ray.kill(self.actor, no_restart=True)
        deadline = time.monotonic() + self.kill_timeout
        while time.monotonic() < deadline:
            try:
                ray.get_actor(t.name, namespace=t.namespace)
            except ValueError:
                return
            time.sleep(0.05)


def start_ray(spec: bytes, label: str, name: Optional[str], device: str,
              namespace: Optional[str], options: Dict[str, Any],
              groups: Sequence[str] = ()) -> Tuple[RayTarget, _RayOwner]:
    """Start a service as a Ray named actor; see ``Service.start``.

    Returns:
        tuple: ``(target, owner)``, from which ``Service.start`` makes the owner's handle.
    """
    ray = import_ray()
    address = options.pop("address", None)
    init_kwargs = dict(options.pop("ray_init_kwargs", None) or {})
    actor_options = dict(options.pop("actor_options", None) or {})
    if options:
        raise ValueError(f"unknown backend_options for backend='ray': {sorted(options)}")
    owns = acquire_ray(ray, address, init_kwargs)
    try:
        context = ray.get_runtime_context()
        ns = context.namespace if namespace is None else namespace
        actor_name = name if name is not None else f"easycore-service-{secrets.token_hex(8)}"
        actor_options.setdefault("num_gpus", 1 if is_cuda(device) else 0)
        actor_cls = ray.remote(_ServiceActor)
        try:
            actor = actor_cls.options(
                name=actor_name, namespace=ns, max_restarts=0, max_concurrency=1,
                **actor_options,
            ).remote(spec, label, device, tuple(groups))
        except ValueError as exc:
            if "already" in str(exc) or "taken" in str(exc):
                raise ValueError(f"a service named {name!r} is already running in Ray "
                                 f"namespace {ns!r}; close it, or choose another name") from None
            raise
        try:
            ready = ray.get(actor.ready.remote())
        except ray.exceptions.RayActorError as exc:
            raise WorkerError(device, f"starting {label}", 0, None, type(exc).__name__,
                              "the actor could not be created (is the factory importable on "
                              "the Ray nodes? see runtime_env in ray_init_kwargs)", str(exc)
                              ) from None
        target = RayTarget(actor_name, ns, context.gcs_address, device, label, None)
        if ready.report is not None:
            _RayOwner(ray, actor, target, False)._kill()
            raise WorkerError.from_report(ready.report, device, 0, None)
        target = RayTarget(actor_name, ns, context.gcs_address, device, label, ready.value.pid)
    except BaseException:
        if owns:
            release_ray(ray)
        raise
    return target, _RayOwner(ray, actor, target, owns)


def ray_names(group: Optional[str], namespace: Optional[str],
              address: Optional[str]) -> list:
    """Names of the live Ray services in ``namespace`` (in ``group``); see ``names``."""
    ray = import_ray()
    if not ray.is_initialized():
        ray.init(address=address or "auto")
    ns = ray.get_runtime_context().namespace if namespace is None else namespace
    found = []
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry.get("namespace") != ns:
            continue
        try:
            actor = ray.get_actor(entry["name"], namespace=ns)
            groups = ray.get(actor.groups.remote(), timeout=30)
        except AttributeError:
            continue  # a named actor that is not a service
        except (ValueError, ray.exceptions.RayError):
            continue  # died meanwhile: no longer a member
        if group is None or group in groups:
            found.append(entry["name"])
    return sorted(found)


def lookup_ray(name: str, namespace: Optional[str], timeout: float,
               address: Optional[str]) -> RayTarget:
    """Find a Ray service by name; see ``lookup``.

    Returns:
        RayTarget: how to reach it, from which ``lookup`` makes a handle.
    """
    ray = import_ray()
    if not ray.is_initialized():
        ray.init(address=address or "auto")
    ns = ray.get_runtime_context().namespace if namespace is None else namespace
    deadline = time.monotonic() + timeout
    while True:
        try:
            actor = ray.get_actor(name, namespace=ns)
            break
        except ValueError:
            if time.monotonic() >= deadline:
                raise ServiceNotFoundError(
                    f"no running service named {name!r} in Ray namespace {ns!r} "
                    f"(waited {timeout} s)"
                ) from None
            time.sleep(0.05)
    try:
        ready = ray.get(actor.ready.remote(), timeout=max(1.0, deadline - time.monotonic()))
    except ray.exceptions.RayActorError:
        raise ServiceNotFoundError(f"the Ray service named {name!r} is dead") from None
    if ready.report is not None:
        raise ServiceNotFoundError(f"the Ray service named {name!r} failed to start")
    info: ServiceInfo = ready.value
    return RayTarget(name, ns, ray.get_runtime_context().gcs_address, info.device,
                     info.label, info.pid)
