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

import hashlib
import pickle
import sys
import types
from typing import Any

__all__ = ["dumps_code", "loads_code"]

_PROTOCOL = pickle.HIGHEST_PROTOCOL


def _from_main(obj: Any) -> bool:
    module = getattr(obj, "__module__", None)
    return module in ("__main__", "__mp_main__")


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
        try:
            return pickle.dumps(obj, protocol=_PROTOCOL)
        except (pickle.PicklingError, AttributeError, TypeError):
            pass  # a lambda or a local function: by value below
    import cloudpickle

    if isinstance(obj, tuple):
        obj = tuple(_MainFunction(p) if _top_level_main_function(p) else p for p in obj)
    elif _top_level_main_function(obj):
        obj = _MainFunction(obj)
    return cloudpickle.dumps(obj, protocol=_PROTOCOL)


def _top_level_main_function(obj: Any) -> bool:
    return (isinstance(obj, types.FunctionType) and _from_main(obj)
            and obj.__qualname__ == obj.__name__ and obj.__name__ != "<lambda>")


def _fingerprint(fn: types.FunctionType) -> tuple:
    code = fn.__code__
    return (code.co_filename, code.co_firstlineno, hashlib.sha1(code.co_code).hexdigest())


class _MainFunction:
    """A function of ``__main__``'s top level, sent by name *and* by value.

    A worker that has the very same function in its ``__main__`` (forked from
    the caller, or a spawned one that re-imported the script) uses its own, as
    with ``multiprocessing.Pool``: then an initializer and a task share that
    module's globals. Others (a notebook, a script read from stdin, a function
    defined after the workers started) use the copy.
    """

    def __init__(self, fn: types.FunctionType) -> None:
        self.fn = fn

    def __reduce__(self) -> Any:
        import cloudpickle

        value = cloudpickle.dumps(self.fn, protocol=_PROTOCOL)
        return (_resolve_main_function, (self.fn.__name__, _fingerprint(self.fn), value))


def _resolve_main_function(name: str, fingerprint: tuple, value: bytes) -> Any:
    own = getattr(sys.modules.get("__main__"), name, None)
    if isinstance(own, types.FunctionType) and _fingerprint(own) == fingerprint:
        return own
    return pickle.loads(value)


def loads_code(data: bytes) -> Any:
    """The inverse of [`dumps_code`][easycore.common.parallel.pickling.dumps_code].

    Args:
        data (bytes):

    Returns:
        Any:
    """
    obj = pickle.loads(data)
    _adopt_main(obj)
    return obj


def _adopt_main(obj: Any) -> None:
    """Name the classes and functions of ``__main__`` that came by value in this
    process's ``__main__`` (a worker's).

    Why: cloudpickle rebuilds them as copies, while a worker forked from the
    caller (or one that re-imported the script) has its own ``__main__``
    versions, and a notebook's worker has none. A task returning an instance
    of a copied class could then not be pickled by reference ("not the same
    object as __main__.X"), and items of that class would arrive as another
    class than the task's. Named in ``__main__``, copies pickle by reference,
    and the caller reads them as its own classes.
    """
    main = sys.modules.get("__main__")
    if main is None:
        return
    seen = set()
    todo = [obj]
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, (tuple, list)):
            todo.extend(x)
            continue
        if isinstance(x, types.MethodType):
            todo.extend((x.__self__, x.__func__))
            continue
        if not isinstance(x, (type, types.FunctionType)):
            x = type(x)  # an instance (a callable one too): its class
        if not _from_main(x):
            continue
        name = getattr(x, "__name__", None)
        if isinstance(name, str) and name.isidentifier() and getattr(x, "__qualname__", "") == name:
            if getattr(main, name, None) is not x:
                setattr(main, name, x)
        if isinstance(x, types.FunctionType):
            todo.extend(x.__globals__.values())
            todo.extend(c.cell_contents for c in x.__closure__ or () if _filled(c))
            todo.extend(x.__defaults__ or ())
        elif isinstance(x, type):
            todo.extend(v for v in vars(x).values() if isinstance(v, types.FunctionType))
            todo.extend(b for b in x.__bases__ if b is not object)


def _filled(cell: Any) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:
        return False
    return True
