"""Inside a service: building the object, and running one call on it.

Shared by both back-ends, so a method behaves the same in a process and in a
Ray actor: public methods only, exceptions captured as an
[`ErrorReport`][easycore.common.parallel.ErrorReport] (the traceback always
travels, the exception object when it pickles), and
[`is_remote_call`][easycore.common.parallel.services.is_remote_call] true
while the method runs.
"""

from __future__ import annotations

import contextvars
import itertools
import pickle
import threading
import time

from ..errors import ErrorReport
from .wire import Outcome

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable, Dict, List, Optional

__all__ = [
    "REF",
    "RUN",
    "Dispatcher",
    "RefToken",
    "build",
    "close_object",
    "dump_spec",
    "invoke",
    "is_remote_call",
]

#: the method name of ``handle.run``: args ``(fn, remote, *args)``
RUN = "__easycore_run__"
#: the method name of remote references: args ``(op, ref_id, ...)``
REF = "__easycore_ref__"

_REMOTE = contextvars.ContextVar("easycore_services_remote_call", default=False)


def is_remote_call() -> bool:
    """Whether the code running was called through a service handle.

    Then its arguments were unpickled for this call and its result will be
    pickled, so both are private to it: a service may skip defensive copies
    (as [`VersionedStore`][easycore.common.parallel.services.VersionedStore] does).

    Returns:
        bool: False when the object is used directly, in-process.
    """
    return _REMOTE.get()


def dump_spec(factory: Callable[..., Any], args: tuple, kwargs: Dict[str, Any]) -> bytes:
    """Pickle ``factory(*args, **kwargs)``'s ingredients for the hosting worker.

    cloudpickle when installed, so that lambdas and locally defined classes
    work under every start method; else pickle (module-level names only).

    Args:
        factory (callable): builds the service object.
        args (tuple): its positional arguments.
        kwargs (dict): its keyword arguments.

    Returns:
        bytes:

    Raises:
        TypeError: when they cannot be pickled; says what to do.
    """
    try:
        import cloudpickle

        dumps: Callable[..., bytes] = cloudpickle.dumps
    except ImportError:  # pragma: no cover - cloudpickle comes with Ray and most stacks
        dumps = pickle.dumps
    try:
        return dumps((factory, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise TypeError(
            f"the service factory {describe(factory)} or its arguments cannot be pickled "
            f"({type(exc).__name__}: {exc}); they are sent to the process hosting the "
            "service: use importable (module-level) functions and classes, or install "
            "cloudpickle for lambdas and local definitions"
        ) from exc


def describe(factory: Any) -> str:
    """A short name for ``factory`` in messages."""
    return getattr(factory, "__qualname__", None) or type(factory).__name__


def build(spec: bytes) -> Any:
    """Unpickle a spec made by [`dump_spec`][easycore.common.parallel.services.dispatch.dump_spec]
    and call the factory."""
    factory, args, kwargs = pickle.loads(spec)
    return factory(*args, **kwargs)


def invoke(obj: Any, label: str, method: str, args: tuple, kwargs: Dict[str, Any]) -> Outcome:
    """Run ``obj.method(*args, **kwargs)``.

    Args:
        obj (Any): the service object.
        label (str): the service, for messages (e.g. ``"service 'store'"``).
        method (str): a public method name.
        args (tuple):
        kwargs (dict):

    Returns:
        Outcome: the method's result, or the report of what it raised.
    """
    token = _REMOTE.set(True)
    try:
        return Outcome(_lookup(obj, label, method)(*args, **kwargs), None)
    except BaseException as exc:  # noqa: BLE001
        # whatever the method raised (KeyboardInterrupt included) is its caller's to see.
        return Outcome(None, ErrorReport.capture(f"{method}() of {label}", exc))
    finally:
        _REMOTE.reset(token)


class RefToken:
    """What travels back for a result kept in the service: its id and type."""

    __slots__ = ("ref_id", "type_name")

    def __init__(self, ref_id: int, type_name: str) -> None:
        self.ref_id = ref_id
        self.type_name = type_name

    def __reduce__(self) -> Any:
        return (RefToken, (self.ref_id, self.type_name))


class _Kept:
    """A value kept for remote references: whose it is, and how long it may wait."""

    __slots__ = ("client", "expires", "lease", "parent", "value")

    def __init__(self, value: Any, client: Optional[int], parent: Optional[int] = None,
                 lease: float = 0.0) -> None:
        self.value = value
        self.client = client  # the connection that holds it (None: Ray, or unclaimed)
        self.parent = parent  # a pickled copy's original, until the copy is claimed
        self.lease = lease
        self.expires: Optional[float] = None  # set when the original goes first


class Dispatcher:
    """One service object's calls, ``handle.run`` callables and remote references.

    Both back-ends call [`invoke`][easycore.common.parallel.services.dispatch.Dispatcher.invoke]
    for every call. Values kept for a
    [`RemoteRef`][easycore.common.parallel.services.RemoteRef] live in a table
    keyed by id; each entry remembers the client connection that holds it, so
    that a client that disconnects or dies releases its references
    (``drop_client``), and its last reference released by the client's
    garbage collector does the same.

    A reference pickled for another process (``dup``) is an entry of its
    own that the process loading the pickle *claims* (then it is that
    connection's). Until then it lives as long as the original does, and
    ``lease`` seconds more once the original is released: a pickle that is
    never loaded (a failed send, a size check) pins nothing for good.

    Args:
        obj (Any): the service object.
        label (str): the service, for messages.
    """

    def __init__(self, obj: Any, label: str) -> None:
        self.obj = obj
        self.label = label
        self._refs: Dict[int, _Kept] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._leases = 0  # entries whose lease runs: ``expire`` has work

    def invoke(self, method: Any, args: tuple, kwargs: Dict[str, Any],
               client: Optional[int] = None) -> Outcome:
        """Run one call: its result, or the report of what it raised.

        Args:
            method (str): a public method, or ``RUN`` / ``REF``.
            args (tuple):
            kwargs (dict):
            client (int or None): the connection it came on (owner of new references).
        """
        if method == RUN:
            what = f"run({_name(args[0]) if args else '?'}) in {self.label}"
            return _guarded(what, lambda: self._run(args, kwargs, client))
        if method == REF:
            what = f"a remote reference of {self.label}"
            return _guarded(what, lambda: self._ref(args, kwargs, client))
        return invoke(self.obj, self.label, method, args, kwargs)

    def _run(self, args: tuple, kwargs: Dict[str, Any], client: Optional[int]) -> Any:
        fn, remote, *rest = args
        if not callable(fn):
            raise TypeError(f"run() needs a callable, got {type(fn).__name__}")
        return self._maybe_keep(fn(*rest, **kwargs), remote, client)

    def _maybe_keep(self, value: Any, remote: bool, client: Optional[int]) -> Any:
        if not remote:
            return value
        return self._keep(_Kept(value, client))

    def _keep(self, kept: _Kept) -> RefToken:
        with self._lock:
            ref_id = next(self._ids)
            self._refs[ref_id] = kept
        return RefToken(ref_id, type(kept.value).__qualname__)

    def _value(self, ref_id: int) -> Any:
        with self._lock:
            entry = self._refs.get(ref_id)
        if entry is None:
            raise LookupError(f"remote reference #{ref_id} of {self.label} was released")
        return entry.value

    def _ref(self, args: tuple, kwargs: Dict[str, Any], client: Optional[int]) -> Any:
        op, ref_id, *rest = args
        self.expire(time.monotonic())
        if op == "release":
            self._release(ref_id if isinstance(ref_id, list) else [ref_id])
            return None
        if op == "claim":  # the copy was loaded: the loader's connection holds it now
            with self._lock:
                entry = self._refs.get(ref_id)
                if entry is not None and entry.parent is not None:
                    if entry.expires is not None:
                        self._leases -= 1
                    entry.client, entry.parent, entry.expires = client, None, None
            if entry is None:
                raise LookupError(f"remote reference #{ref_id} of {self.label} was released "
                                  "before its pickle was loaded")
            return None
        value = self._value(ref_id)
        if op == "get":
            return value
        if op == "call":
            method, remote, *call_args = rest
            label = f"remote {type(value).__name__} #{ref_id} of {self.label}"
            return self._maybe_keep(_lookup(value, label, method)(*call_args, **kwargs),
                                    remote, client)
        if op == "dup":  # a copy pickled for another process: unclaimed until loaded
            lease = float(rest[0]) if rest else 0.0
            return self._keep(_Kept(value, None, ref_id, lease))
        raise ValueError(f"unknown remote reference operation {op!r}")

    def _release(self, ref_ids: List[int]) -> None:
        """Drop ``ref_ids``; their unclaimed copies start their lease."""
        now = time.monotonic()
        with self._lock:
            gone = {i for i in ref_ids if self._refs.pop(i, None) is not None}
            self._orphan(gone, now)
        self.expire(now)

    def _orphan(self, gone: set, now: float) -> None:
        """The unclaimed copies of ``gone`` start their lease (the lock held)."""
        if not gone:
            return
        for entry in self._refs.values():
            if entry.parent in gone and entry.expires is None:
                entry.expires = now + entry.lease
                self._leases += 1

    def drop_client(self, client: int) -> None:
        """Release every reference made for ``client`` (it disconnected or died)."""
        with self._lock:
            mine = [i for i, entry in self._refs.items() if entry.client == client]
        self._release(mine)

    def expire(self, now: float) -> Optional[float]:
        """Drop the unclaimed copies whose lease ended.

        Returns:
            float or None: when the next lease ends (``time.monotonic``), if any runs.
        """
        if not self._leases:
            return None
        with self._lock:
            ended = [i for i, e in self._refs.items() if e.expires is not None
                     and e.expires <= now]
            for ref_id in ended:
                del self._refs[ref_id]
            self._leases -= len(ended)
            self._orphan(set(ended), now)  # copies of those copies
            running = [e.expires for e in self._refs.values() if e.expires is not None]
        return min(running, default=None)

    @property
    def ref_count(self) -> int:
        """int: references held (for tests and leak checks)."""
        return len(self._refs)


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _guarded(what: str, body: Callable[[], Any]) -> Outcome:
    token = _REMOTE.set(True)
    try:
        return Outcome(body(), None)
    except BaseException as exc:  # noqa: BLE001
        # whatever user code raised (KeyboardInterrupt included) is its caller's to see.
        return Outcome(None, ErrorReport.capture(what, exc))
    finally:
        _REMOTE.reset(token)


def _lookup(obj: Any, label: str, method: Any) -> Callable[..., Any]:
    # Only public methods: "_x" and dunders are the object's own business.
    if not isinstance(method, str) or not method or method.startswith("_"):
        raise AttributeError(
            f"{label} has no public method {method!r} (names cannot start with '_')"
        )
    fn = getattr(obj, method, None)
    if fn is None or not callable(fn):
        public = sorted(
            n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n, None))
        )
        raise AttributeError(
            f"{label} ({type(obj).__name__}) has no method {method!r}; it has: {', '.join(public)}"
        )
    return fn


def close_object(obj: Any) -> None:
    """Call ``obj.close()`` if it has one (the service is stopping)."""
    close = getattr(obj, "close", None)
    if callable(close):
        close()
