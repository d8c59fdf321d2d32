"""Handing objects to ``fork``-started workers by inheritance instead of by pickling.

A worker started with ``fork`` begins as a copy of its parent: every object
the parent held at that moment is already there, in pages shared with the
parent until one side writes to them. Pickling such an object into the
worker anyway (as every start method needs under ``spawn``) costs a full
private copy per worker: a ``BackgroundTask(dataset.getbatch)`` over a 200 MB
data set held 200 MB more in each worker.

So what a worker needs from its start (a ``BackgroundTask``'s target, a
runner's or pool's program with its initializer) is registered here
*before* the workers are forked, and only its token travels:
[`Inherited`][easycore.common.parallel._os.inherit.Inherited] pickles as
``_resolve(token)``, which in a forked worker returns the very object of the
table it inherited. Under ``spawn`` and ``forkserver`` the worker has no such
table (it starts from a fresh interpreter or from the fork server), so the
object itself is pickled, once per worker, as before: callers only use a
token when [`forked`][easycore.common.parallel._os.inherit.forked] says the
workers are forked from this very process.

What stays shared is what nobody writes: CPython writes an object's
reference count when it is used, so the pages of plain Python objects (lists,
dicts, strings) a worker touches become private copies over time, while the
data buffers of NumPy arrays and tensors, which hold no reference counts,
stay shared for as long as nobody writes into them.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import types
from typing import Any, Dict, Mapping

__all__ = ["Inherited", "keep", "release", "forked", "main_code", "names_inherited_code"]

#: token -> object, in the process that registered it (and, by inheritance,
#: in every worker forked from it afterwards)
_TABLE: Dict[str, Any] = {}
_LOCK = threading.Lock()
_COUNTER = itertools.count()


class Inherited:
    """A stand-in for an object that forked workers inherited: pickles as its token.

    Calling it calls the object (so it can stand where a callable is expected,
    e.g. a job's function); in a worker it unpickles as the object itself.
    """

    __slots__ = ("token",)

    def __init__(self, token: str) -> None:
        self.token = token

    def __reduce__(self) -> Any:
        return _resolve, (self.token,)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _resolve(self.token)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Inherited {self.token}>"


def keep(obj: Any) -> Inherited:
    """Register ``obj`` for workers forked from now on; returns its stand-in.

    Args:
        obj (Any): what the workers should inherit.

    Returns:
        Inherited: pickles as a token that a forked worker resolves to ``obj``.
    """
    token = f"{os.getpid()}-{next(_COUNTER)}"
    with _LOCK:
        _TABLE[token] = obj
    return Inherited(token)


def release(ref: Any) -> None:
    """Forget what [`keep`][easycore.common.parallel._os.inherit.keep] registered.

    ``release(None)`` does nothing.

    Workers already forked keep their inherited copy; only later forks lose it.
    """
    if isinstance(ref, Inherited):
        with _LOCK:
            _TABLE.pop(ref.token, None)


def forked(backend: Any) -> bool:
    """Whether ``backend``'s workers are forked from this process (so inherit the table).

    Args:
        backend: a back-end (the process back-end says its start method).

    Returns:
        bool: True only for worker processes started with ``fork``.
    """
    return getattr(backend, "start_method", None) == "fork"


def _resolve(token: str) -> Any:
    try:
        return _TABLE[token]
    except KeyError:
        raise RuntimeError(
            f"object {token!r} was meant to be inherited by a worker forked from process "
            f"{token.split('-')[0]}, but this process (pid {os.getpid()}) does not have it: "
            f"it was not forked from that process after the object was registered"
        ) from None


def main_code() -> Mapping[str, Any]:
    """The functions and classes of ``__main__`` now, by name: what a worker forked
    right after this call finds in its own ``__main__``.

    Held (and so kept alive) by the back-end that forks: an object named here
    is the very one its workers have under that name, and a job's function
    that is one of them needs no copy of its code
    ([`names_inherited_code`][easycore.common.parallel._os.inherit.names_inherited_code]).

    Returns:
        Mapping[str, Any]: name -> function or class defined in ``__main__``.
    """
    main = sys.modules.get("__main__")
    return types.MappingProxyType({
        name: obj for name, obj in list(vars(main).items())
        if isinstance(obj, (types.FunctionType, type))
        and getattr(obj, "__module__", None) == "__main__"
    } if main is not None else {})


def names_inherited_code(inherited: Mapping[str, Any], obj: Any) -> bool:
    """Whether ``obj`` is a function or class of ``__main__`` that workers forked
    when ``inherited`` ([`main_code`][easycore.common.parallel._os.inherit.main_code])
    was taken have under the same name, so that pickle by reference finds it.

    Args:
        inherited (Mapping): from ``main_code`` (empty: nothing is inherited).
        obj (Any): e.g. a job's function.

    Returns:
        bool:
    """
    name = getattr(obj, "__qualname__", None)
    return isinstance(name, str) and inherited.get(name) is obj
