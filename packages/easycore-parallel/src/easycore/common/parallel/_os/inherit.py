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

from .._named_tuples import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Dict, Mapping, Optional

__all__ = ["Inherited", "keep", "release", "forked", "MainCode", "main_code", "inherited_as",
           "rerun_defines", "workers_have"]

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


class MainCode(NamedTuple):
    """``__main__``'s functions and classes when a back-end started its workers."""

    #: name -> function or class defined in ``__main__``
    names: Mapping[str, Any]
    #: whether the workers are copies of this process from that moment (``fork``):
    #: then they have each of these objects under its name
    forked: bool


def main_code(forked: bool) -> MainCode:
    """The functions and classes of ``__main__`` now, by name: what the workers a
    back-end starts right after this call know under those names.

    Held (and so kept alive) by the back-end. A job's function that is one of
    them needs no copy of its code in a forked worker; one that took the name
    of one of them since (a notebook cell run again) must go as a copy, or a
    worker would run its own, old version
    ([`inherited_as`][easycore.common.parallel._os.inherit.inherited_as]).

    Args:
        forked (bool): whether the workers are forked from this process.

    Returns:
        MainCode:
    """
    main = sys.modules.get("__main__")
    names = {
        name: obj for name, obj in list(vars(main).items())
        if isinstance(obj, (types.FunctionType, type))
        and getattr(obj, "__module__", None) == "__main__"
    } if main is not None else {}
    return MainCode(types.MappingProxyType(names), forked)


def rerun_defines(obj: Any) -> bool:
    """Whether a worker that runs the main script again defines ``obj`` under its name.

    A worker started with ``spawn`` imports the main script anew (as
    ``__mp_main__``, its ``if __name__ == "__main__":`` block skipped); one
    started with ``forkserver`` has it from the server, which imported it so
    (its default preload), or imports it itself. Either way it has the
    script's top-level functions, as ``multiprocessing`` relies on. True for
    a function of the script's file whose ``def`` (or first decorator) starts
    a line at the first column: the script's top level, not a guarded block.
    The same for a class (a runner defined in the script) where Python says
    where its ``class`` statement is (``__firstlineno__``, 3.13+) and its
    methods come from the script's file. False for anything else (a lambda, a
    class on older Pythons, a notebook's or stdin's code, ``python -m
    package``, whose ``__main__`` workers do not run again).

    Args:
        obj (Any): a function or class of ``__main__``.

    Returns:
        bool:
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not isinstance(path, str):
        return False
    spec_name = getattr(getattr(main, "__spec__", None), "name", None)
    if spec_name is not None and (spec_name == "__main__" or spec_name.endswith(".__main__")):
        return False  # a package's __main__: multiprocessing does not import it again
    if isinstance(obj, types.FunctionType):
        codes, first = [obj.__code__], obj.__code__.co_firstlineno
    elif isinstance(obj, type) and isinstance(getattr(obj, "__firstlineno__", None), int):
        codes = [f.__code__ for f in map(_function_of, vars(obj).values()) if f is not None]
        first = obj.__firstlineno__  # type: ignore[attr-defined]
    else:
        return False
    if any(os.path.abspath(code.co_filename) != os.path.abspath(path) for code in codes):
        return False  # e.g. made by exec()
    import linecache

    return linecache.getline(path, first).startswith(("def ", "async def ", "class ", "@"))


def _function_of(member: Any) -> Optional[types.FunctionType]:
    """The plain function a class member holds (a method, static or class method), if any."""
    member = getattr(member, "__func__", member)
    return member if isinstance(member, types.FunctionType) else None


def inherited_as(main: MainCode, obj: Any) -> Optional[bool]:
    """How a back-end's workers know ``obj``, a function or class of ``__main__``,
    under its name (``main``: from
    [`main_code`][easycore.common.parallel._os.inherit.main_code] at their start).

    Args:
        main (MainCode): ``__main__`` when the workers started.
        obj (Any): e.g. a job's function.

    Returns:
        bool or None: True: the name held this very object then. False: it held
        another object (``obj`` was defined again since): by reference, a
        worker would run its old copy. None: not by that name.
    """
    name = getattr(obj, "__qualname__", None)
    if not isinstance(name, str) or getattr(obj, "__module__", None) != "__main__":
        return None
    held = main.names.get(name)
    return None if held is None else held is obj


def workers_have(main: MainCode, obj: Any) -> bool:
    """Whether the back-end's workers have ``obj``, a function or class of
    ``__main__``, under its name: it held that name when they started, and they
    are copies of this process from then (``fork``) or define it again
    ([`rerun_defines`][easycore.common.parallel._os.inherit.rerun_defines]).
    Then it goes to them by reference alone, the same bytes every time.

    Args:
        main (MainCode): ``__main__`` when the workers started.
        obj (Any):

    Returns:
        bool:
    """
    return inherited_as(main, obj) is True and (main.forked or rerun_defines(obj))
