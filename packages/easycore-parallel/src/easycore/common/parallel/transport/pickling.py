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
import weakref

from .._os import inherit

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable, Optional

__all__ = ["dumps_code", "dumps_data", "loads_code", "names_main", "reduce_main"]

_PROTOCOL = pickle.HIGHEST_PROTOCOL


def _from_main(obj: Any) -> bool:
    module = getattr(obj, "__module__", None)
    return module in ("__main__", "__mp_main__")


class _MainFinder(pickle.Pickler):
    """A pickler that notes the code of ``__main__`` that what it pickles refers to.

    easycore's own wrappers (a seeded call, a worker's start, a queued call)
    pickle by reference, and so would hide a user's ``__main__`` function
    inside them from the by-value path: a worker started with ``spawn`` or
    ``forkserver`` then fails to find it.
    """

    def __init__(self, file: Any, protocol: int) -> None:
        super().__init__(file, protocol=protocol)
        self.found = False  # something of __main__ (code, or an instance of its class)
        self.code: list = []  # the functions and classes of __main__ named

    def reducer_override(self, obj: Any) -> Any:
        if _from_main(obj) or _from_main(type(obj)):
            self.found = True
            if isinstance(obj, (types.FunctionType, type)) and _from_main(obj):
                self.code.append(obj)
        return NotImplemented  # pickle it as usual


def _by_reference(obj: Any) -> tuple:
    """``obj`` pickled by reference (None if that fails), and the pickler that did it."""
    buffer = io.BytesIO()
    finder = _MainFinder(buffer, protocol=_PROTOCOL)
    try:
        finder.dump(obj)
    except (pickle.PicklingError, AttributeError, TypeError):
        return None, finder  # a lambda or a local function
    return buffer.getvalue(), finder


def dumps_code(obj: Any, main: Optional[inherit.MainCode] = None) -> bytes:
    """Pickle ``obj`` (functions, classes, or structures holding them) for a worker.

    Args:
        obj (Any): e.g. a function, or a tuple of a function and its options.
        main (MainCode or None): ``__main__``'s code when the workers started
            ([`main_code`][easycore.common.parallel._os.inherit.main_code]), if
            known: see
            [`dumps_either`][easycore.common.parallel.transport.pickling.dumps_either].

    Returns:
        bytes: readable with ``pickle.loads`` in any worker.

    Raises:
        pickle.PicklingError: neither pickle nor cloudpickle can pickle it.
    """
    by_reference, finder = _by_reference(obj)
    if by_reference is not None and not finder.found:
        return by_reference  # nothing of __main__, even inside a wrapper
    return dumps_either(obj, main, (by_reference, finder))


def dumps_either(obj: Any, main: Optional[inherit.MainCode] = None,
                 pickled: Optional[tuple] = None) -> bytes:
    """Pickle code of ``__main__`` by reference *and* by value; the worker takes the first it can.

    By reference where the worker has ``__main__`` (forked, or a script it
    re-ran): the code then shares the module's globals (what an initializer
    sets, a function reads, as with ``multiprocessing.Pool``) and takes no
    unpicklable global (a lock, an open file) along. By value where it cannot
    find it (a notebook, stdin, a block under ``if __name__ == "__main__":``).

    With ``main`` (``__main__``'s code when the workers started): code that
    forked workers have, every piece of it, goes by reference alone (no
    cloudpickle), and so do functions at the top level of a script file,
    which spawned workers define as they import the script again
    ([`rerun_defines`][easycore.common.parallel._os.inherit.rerun_defines]);
    code defined again since the workers started (a notebook cell run again)
    goes by value alone, or a worker would find and run its old copy.

    Args:
        obj (Any): what to pickle.
        main (MainCode or None): see above.
        pickled (tuple or None): ``_by_reference(obj)``, if already made.

    Returns:
        bytes: readable with ``pickle.loads`` in any worker.
    """
    by_reference, finder = pickled if pickled is not None else _by_reference(obj)
    if main is not None and by_reference is not None and finder.code:
        if any(inherit.inherited_as(main, code) is False for code in finder.code):
            by_reference = None  # a worker's copy of that name is out of date
        elif all(inherit.workers_have(main, code) for code in finder.code):
            return by_reference
    import cloudpickle

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
    """The inverse of [`dumps_code`][easycore.common.parallel.transport.pickling.dumps_code].

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
    if type(obj) is tuple:  # (the code's own structure; a named tuple is the user's data)
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


# --------------------------------------------------------------------- data
# Items, results and a runner's cfg are pickled by reference, like any data.
# Instances of a class of ``__main__`` then name ``__main__.Cls``, which the
# receiving process may not have: a notebook or a script read from stdin
# (its workers' ``__main__`` is empty), a class defined under
# ``if __name__ == "__main__":`` (not re-run by spawn and forkserver workers),
# one defined after the pool forked. Such data carries each of these classes
# (and functions) by reference *and* by value: the receiver takes its own
# where it has one, else the copy, which it then keeps in its ``__main__``.

#: Set once this process pickled data that refers to ``__main__``: from then
#: on such data is pickled in one pass (see dumps_data). Only a speed hint.
_main_seen = False
#: Classes of __main__ pickled by value, once each (the receiver keeps the
#: first copy it gets under that name anyway).
_class_copies: weakref.WeakKeyDictionary[type, bytes] = weakref.WeakKeyDictionary()


def reduce_main(obj: Any) -> Any:
    """A ``reducer_override``: classes and functions of ``__main__`` by reference or value.

    For picklers of data that have their own tables (easycore-torch's): use it
    in a second pass where
    [`names_main`][easycore.common.parallel.transport.pickling.names_main] says the first
    one needs it, as
    [`dumps_data`][easycore.common.parallel.transport.pickling.dumps_data] does.

    Args:
        obj (Any): what the pickler is about to save.

    Returns:
        Any: a reduction, or ``NotImplemented`` (pickle it as usual).
    """
    if (isinstance(obj, type) or type(obj) is types.FunctionType) and _from_main(obj):
        try:
            by_value = _by_value(obj)
        except Exception:  # noqa: BLE001  (whatever its attributes raise)
            return NotImplemented  # by reference only, as plain pickle does
        return _main_object, (obj.__module__, obj.__qualname__, isinstance(obj, type),
                              by_value)
    return NotImplemented


class _DataPickler(pickle.Pickler):
    """Pickles classes and functions of ``__main__`` by reference or value."""

    def reducer_override(self, obj: Any) -> Any:
        return reduce_main(obj)


def _by_value(obj: Any) -> bytes:
    import cloudpickle

    if not isinstance(obj, type):
        return cloudpickle.dumps(obj, protocol=_PROTOCOL)  # its globals as they are now
    blob = _class_copies.get(obj)
    if blob is None:
        blob = _class_copies[obj] = cloudpickle.dumps(obj, protocol=_PROTOCOL)
    return blob


def _main_object(module: str, qualname: str, is_class: bool, by_value: bytes) -> Any:
    """Unpickling: this process's own ``__main__.<qualname>``, else the copy by value."""
    main = sys.modules.get(module) or sys.modules.get("__main__")
    found: Any = main
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is not None and main is not None and (
            isinstance(found, type) if is_class else callable(found)):
        return found
    obj = pickle.loads(by_value)
    if main is not None and qualname.isidentifier() and not hasattr(main, qualname):
        # Kept, so that later data, and results pickled by reference here,
        # find this same class (pickling._share_main_globals does the same for
        # what a function brings).
        setattr(main, qualname, obj)
    return obj


def names_main(data: Any) -> bool:
    """Whether a pickle may refer to a global of ``__main__`` (or ``__mp_main__``).

    Such a reference spells the module's name; a string that merely contains
    it only costs a second pass.

    Args:
        data (bytes-like): a pickle.

    Returns:
        bool:
    """
    return b"_main__" in data


def dumps_data(
    obj: Any,
    protocol: int = _PROTOCOL,
    buffer_callback: Optional[Callable[[pickle.PickleBuffer], Any]] = None,
    restart: Optional[Callable[[], Any]] = None,
) -> bytes:
    """Pickle data (items, results, a cfg) that any process can read, ``__main__``'s classes too.

    Plain pickle first (C speed); only when the pickle names ``__main__``, or
    refuses (an instance of a class that came by value), it is pickled again
    carrying the classes and functions of ``__main__`` by reference and by
    value (see ``_main_object``). After the first such payload this process
    takes the second way at once.

    Args:
        obj (Any): what to pickle.
        protocol (int): the pickle protocol.
        buffer_callback (callable or None): as for ``pickle.dumps``.
        restart (callable or None): called before a second pass, to forget
            what ``buffer_callback`` collected in the first.

    Returns:
        bytes: readable with ``pickle.loads``.
    """
    global _main_seen
    if not _main_seen:
        try:
            data = pickle.dumps(obj, protocol=protocol, buffer_callback=buffer_callback)
        except (pickle.PicklingError, AttributeError):
            data = None  # e.g. a class of __main__ that came by value
        if data is not None:
            if not names_main(data):
                return data
            _main_seen = True
        if restart is not None:
            restart()
    buffer = io.BytesIO()
    _DataPickler(buffer, protocol=protocol, buffer_callback=buffer_callback).dump(obj)
    return buffer.getvalue()
