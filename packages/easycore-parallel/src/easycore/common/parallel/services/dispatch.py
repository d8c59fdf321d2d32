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
import pickle
from typing import Any, Callable, Dict, Tuple

from ..errors import ErrorReport

__all__ = ["is_remote_call", "dump_spec", "build", "invoke", "close_object"]

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


def invoke(obj: Any, label: str, method: str, args: tuple, kwargs: Dict[str, Any]) -> Tuple:
    """Run ``obj.method(*args, **kwargs)``.

    Args:
        obj (Any): the service object.
        label (str): the service, for messages (e.g. ``"service 'store'"``).
        method (str): a public method name.
        args (tuple):
        kwargs (dict):

    Returns:
        tuple: ``("ok", result)`` or ``("error", ErrorReport)``.
    """
    token = _REMOTE.set(True)
    try:
        return ("ok", _lookup(obj, label, method)(*args, **kwargs))
    except BaseException as exc:
        return ("error", ErrorReport.capture(f"{method}() of {label}", exc))
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
