"""Say once when a call ships a big object to every worker (issue 33 item 6).

``Pool.map(obj.method, ...)`` pickles ``obj`` into every worker, as the
standard library does; so do items that each carry a large object. Past
``BIG_CALL`` bytes (10 MiB), a
``UserWarning`` names the type that was carried, its size and the remedies,
once per type and process. Insights count the bytes each worker was sent.
"""

from __future__ import annotations

import functools
import threading
import types
import warnings

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, List, Set

__all__ = ["BIG_CALL", "warn_if_big_function", "warn_if_big_items"]

#: bytes past which a call's function, or one chunk's items, is called big
BIG_CALL = 10 * 2**20

_REMEDIES = (
    "Keep big data out of the call: store a big sequence once in a SharedList, give "
    "the object to the workers once (a BackgroundTask's target, a runner's cfg, a Pool "
    "initializer that builds or loads it in each worker), or pass a module-level "
    "function with small arguments. (Warned once per type.)"
)
_warned: Set[str] = set()  # the types warned about, once per process
_lock = threading.Lock()


def warn_if_big_function(func: Any, size: int, stacklevel: int = 5) -> None:
    """Warn once per type when ``func`` pickled to more than ``BIG_CALL`` bytes.

    Args:
        func (callable): the call's function (a bound method, a partial, ...).
        size (int): the bytes its pickle took.
        stacklevel (int): as for ``warnings.warn``: the user's line.
    """
    if size <= BIG_CALL:
        return
    name = _carried(func)
    if _first_time(name):
        warnings.warn(
            f"the function of this call pickles to {size / 2**20:.0f} MB (it carries a "
            f"{name} object), and every worker is sent a copy (a private one per worker, "
            f"also under fork). {_REMEDIES}", UserWarning, stacklevel=stacklevel)


def warn_if_big_items(items: List[Any], first: int, size: int) -> None:
    """Warn once per type when one chunk's items took more than ``BIG_CALL`` bytes.

    Args:
        items (list): the chunk's items.
        first (int): the index of the first of them in the call's input.
        size (int): the bytes the chunk moved.
    """
    if size <= BIG_CALL:
        return
    kinds = sorted({kind for item in items for kind in _kinds(item, 2)})
    name = ", ".join(kinds[:3]) + (", ..." if len(kinds) > 3 else "")
    if _first_time("items:" + name):
        warnings.warn(
            f"the items from index {first} of this call pickle to {size / 2**20:.0f} MB "
            f"in one chunk of {len(items)} (they carry {name} objects), each sent to a "
            f"worker. If the same big object travels with many items, {_REMEDIES[0].lower()}"
            f"{_REMEDIES[1:]}", UserWarning, stacklevel=2)


def _first_time(name: str) -> bool:
    with _lock:
        if name in _warned:
            return False
        _warned.add(name)
        return True


def _carried(func: Any) -> str:
    """What a function drags along when pickled, named: a bound method's object,
    a partial's arguments, a JobQueue call's function; else the function's type."""
    inner = getattr(func, "fn", None)  # a JobQueue's call wrapper
    if callable(inner) and type(func).__name__ == "_QueueCall":
        return _carried(inner)
    if isinstance(func, functools.partial):
        parts = [*func.args, *func.keywords.values()]
        if parts:
            return "functools.partial with " + ", ".join(_type_name(p) for p in parts)
        return _carried(func.func)
    owner = getattr(func, "__self__", None)
    if owner is not None and not isinstance(owner, (type, types.ModuleType)):
        return _type_name(owner)
    return _type_name(func)


_SMALL = (int, float, bool, type(None))


def _kinds(obj: Any, depth: int) -> Set[str]:
    """The types an item carries: inside the tuples, lists and dicts that wrap
    arguments (starmap's tuples, apply's (args, kwds)), not them."""
    if depth and type(obj) in (tuple, list, dict):
        values = obj.values() if type(obj) is dict else obj
        found = {kind for value in values if not isinstance(value, _SMALL)
                 for kind in _kinds(value, depth - 1)}
        return found or {_type_name(obj)}
    return {_type_name(obj)}


def _type_name(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"
