"""``NamedTuple``: ``typing.NamedTuple``'s class syntax, built without its type checks.

easycore-parallel describes its messages, reports and readings as named tuples
(23 classes load with the package). ``typing.NamedTuple`` checks each field's
annotation as it makes the class, and under ``from __future__ import
annotations`` every annotation is a string, which it compiles into a
``ForwardRef``: 160 us for a 7-field class, against 60 us for the same
``collections.namedtuple``, so about 2.5 ms of every import of the package (a
short script's, and every ``spawn`` or ``forkserver`` worker's).

A class on this ``NamedTuple`` is written as on ``typing.NamedTuple`` (fields with
annotations, defaults last, methods, properties, a docstring) and is the same kind
of class: a ``collections.namedtuple``, with the annotations kept as written.
Type checkers see ``typing.NamedTuple`` itself.
"""

from __future__ import annotations

import collections
import types

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Dict, Tuple

__all__ = ["NamedTuple"]

# What collections.namedtuple makes and a class body must not replace, and what
# is not copied onto the class (as typing.NamedTuple's own lists).
_PROHIBITED = frozenset({"__init__", "__new__", "__slots__", "__getnewargs__", "_fields",
                         "_field_defaults", "_make", "_replace", "_asdict", "_source"})
_SPECIAL = frozenset({"__module__", "__name__", "__annotations__"})
_namedtuple: Any = collections.namedtuple  # (called with names known only here)


class _NamedTupleMeta(type):
    def __new__(mcls, name: str, bases: Tuple[type, ...], ns: Dict[str, Any]) -> Any:
        if ns.get("_base_of_named_tuples"):
            return super().__new__(mcls, name, bases, ns)
        annotations = ns.get("__annotations__")
        if annotations is None or bases != (NamedTuple,):
            # No annotations dictionary in the class body (a module without the
            # future import, under Python 3.14's lazy annotations), or another
            # base: typing.NamedTuple's own way, whatever it accepts.
            import typing

            body = {k: v for k, v in ns.items() if k != "__qualname__"}
            theirs = tuple(typing.NamedTuple if b is NamedTuple else b for b in bases)
            made = types.new_class(name, theirs, exec_body=lambda n: n.update(body))
            made.__qualname__ = ns.get("__qualname__", name)
            return made
        fields = list(annotations)
        defaults = [ns[f] for f in fields if f in ns]
        if defaults and any(f not in ns for f in fields[len(fields) - len(defaults):]):
            raise TypeError(f"{name}: a field without a default follows one with a default")
        cls: Any = _namedtuple(name, fields, defaults=defaults, module=ns["__module__"])
        cls.__annotations__ = dict(annotations)
        for key, value in ns.items():
            if key in _PROHIBITED:
                raise AttributeError(f"{name}: cannot overwrite the named tuple's {key}")
            if key in _SPECIAL:
                continue
            if key not in cls._fields:
                setattr(cls, key, value)
            set_name = getattr(type(value), "__set_name__", None)
            if set_name is not None:
                set_name(value, cls, key)
        return cls


if TYPE_CHECKING:
    from typing import NamedTuple
else:
    class NamedTuple(metaclass=_NamedTupleMeta):
        """Base of a named tuple class written as on ``typing.NamedTuple`` (see the module)."""

        _base_of_named_tuples = True
