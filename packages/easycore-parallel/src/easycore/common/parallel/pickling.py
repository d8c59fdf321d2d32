"""Sending code to workers: plain pickle first, cloudpickle for what it refuses.

Plain pickle sends a function or class *by reference* (its module and name),
which a worker started with ``spawn`` or ``forkserver`` can only follow if it
can import it. Lambdas, closures, and anything defined in ``__main__`` (a
script's ``if __name__ == "__main__":`` block, a notebook, code read from
stdin) cannot be imported there, so those go *by value* through
`cloudpickle <https://github.com/cloudpipe/cloudpickle>`_, which workers read
with plain ``pickle.loads``. Code is pickled once per job, never per item.
"""

from __future__ import annotations

import io
import pickle
import sys
import types
from typing import Any

__all__ = ["dumps_code", "loads_code"]

_PROTOCOL = pickle.HIGHEST_PROTOCOL


def _from_main(obj: Any) -> bool:
    module = getattr(obj, "__module__", None)
    return module in ("__main__", "__mp_main__")


class _MainFinder(pickle.Pickler):
    """A pickler that notes whether what it pickles refers to code of ``__main__``.

    easycore's own wrappers (a seeded call, a worker's start, a queued call)
    pickle by reference, and so would hide a user's ``__main__`` function
    inside them from the by-value path: a worker started with ``spawn`` or
    ``forkserver`` then fails to find it.
    """

    found = False

    def reducer_override(self, obj: Any) -> Any:
        if not self.found and (_from_main(obj) or _from_main(type(obj))):
            self.found = True
        return NotImplemented  # pickle it as usual


def _refers_to_main(obj: Any) -> bytes | None:
    """``obj`` pickled by reference, or None if that fails or it refers to ``__main__``."""
    buffer = io.BytesIO()
    finder = _MainFinder(buffer, protocol=_PROTOCOL)
    try:
        finder.dump(obj)
    except (pickle.PicklingError, AttributeError, TypeError):
        return None
    return None if finder.found else buffer.getvalue()


def dumps_code(obj: Any) -> bytes:
    """Pickle ``obj`` (functions, classes, or structures holding them) for a worker.

    Args:
        obj (Any): e.g. a function, or a tuple of a function and its options.

    Returns:
        bytes: readable with ``pickle.loads`` in any worker.

    Raises:
        pickle.PicklingError: neither pickle nor cloudpickle can pickle it.
    """
    parts = obj if isinstance(obj, tuple) else (obj,)
    if not any(_from_main(p) or _from_main(getattr(p, "__class__", None)) for p in parts):
        # Code of __main__ may also hide inside (a wrapper's attribute).
        by_reference = _refers_to_main(obj)
        if by_reference is not None:
            return by_reference
    return dumps_either(obj)


def dumps_either(obj: Any) -> bytes:
    """Pickle code of ``__main__`` by reference *and* by value; the worker takes the first it can.

    By reference where the worker has ``__main__`` (forked, or a script it
    re-ran): the code then shares the module's globals (what an initializer
    sets, a function reads, as with ``multiprocessing.Pool``) and takes no
    unpicklable global (a lock, an open file) along. By value where it cannot
    find it (a notebook, stdin, a block under ``if __name__ == "__main__":``).

    Args:
        obj (Any): what to pickle.

    Returns:
        bytes: readable with ``pickle.loads`` in any worker.
    """
    import cloudpickle

    try:
        by_reference: bytes | None = pickle.dumps(obj, protocol=_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError):
        by_reference = None  # a lambda or a local function
    try:
        by_value = cloudpickle.dumps(obj, protocol=_PROTOCOL)
    except Exception:
        if by_reference is None:
            raise
        return by_reference
    if by_reference is None:
        return by_value
    return pickle.dumps(_FirstThatLoads(by_reference, by_value), protocol=_PROTOCOL)


class _FirstThatLoads:
    """Unpickles as the first of its pickles that the unpickling process can resolve."""

    def __init__(self, *blobs: bytes) -> None:
        self.blobs = blobs

    def __reduce__(self) -> Any:
        return _load_first, self.blobs


def _load_first(*blobs: bytes) -> Any:
    for blob in blobs[:-1]:
        try:
            return pickle.loads(blob)
        except (AttributeError, ImportError):
            continue  # not found in this process: the next way
    return pickle.loads(blobs[-1])


def loads_code(data: bytes) -> Any:
    """The inverse of [`dumps_code`][easycore.common.parallel.pickling.dumps_code].

    Functions of ``__main__`` that came by value (a notebook, stdin, a block
    under ``if __name__ == "__main__":``) are rebound to this process's
    ``__main__`` namespace, so that they share globals as they did in the
    caller: an initializer that sets a global is seen by the tasks.

    Args:
        data (bytes):

    Returns:
        Any:
    """
    return _share_main_globals(pickle.loads(data))


def _share_main_globals(obj: Any, depth: int = 0) -> Any:
    if isinstance(obj, tuple):
        return tuple(_share_main_globals(part, depth) for part in obj)
    if depth < 2 and _is_wrapper(obj):
        # easycore's wrappers hold the user's code in attributes (a seeded
        # call's target, a worker start's initializer): share those too.
        for name, value in vars(obj).items():
            shared = _share_main_globals(value, depth + 1)
            if shared is not value:
                setattr(obj, name, shared)
        return obj
    if not isinstance(obj, types.FunctionType) or not _from_main(obj):
        return obj
    main = sys.modules.get("__main__")
    if main is None or obj.__globals__ is vars(main):
        return obj
    namespace = vars(main)
    for name, value in obj.__globals__.items():
        namespace.setdefault(name, value)  # what it brought, unless already there
    shared = types.FunctionType(obj.__code__, namespace, obj.__name__, obj.__defaults__,
                                obj.__closure__)
    shared.__kwdefaults__ = obj.__kwdefaults__
    shared.__dict__.update(obj.__dict__)
    shared.__qualname__ = obj.__qualname__
    shared.__module__ = obj.__module__
    return shared


def _is_wrapper(obj: Any) -> bool:
    module = getattr(type(obj), "__module__", "") or ""
    return module.startswith("easycore.") and hasattr(obj, "__dict__") and not isinstance(
        obj, type)
