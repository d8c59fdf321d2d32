"""``NamedTuple``: ``typing.NamedTuple``'s class syntax, built without compiling anything.

easycore-parallel describes its messages, reports and readings as named tuples
(about 25 classes load with a pool). ``typing.NamedTuple`` checks each field's
annotation as it makes the class, and under ``from __future__ import
annotations`` every annotation is a string, which it compiles into a
``ForwardRef``: 160 us for a 7-field class. ``collections.namedtuple``, which
it calls, then compiles the class's ``__new__`` from source (``eval``, 20 us of
its 35). Both are paid by every import of the package: a short script's, and
every ``spawn`` or ``forkserver`` worker's.

So the classes are built here in one ``type()`` call, the class body included.
Their ``__new__`` is one of the functions below, compiled once with this module
(its ``.pyc``) for each number of fields, and renamed per class
(``CodeType.replace``): ``Point(1, y=2)`` takes the field names as keywords, and
its errors name them, as a ``collections.namedtuple``'s do. The class is that
same kind of class, attribute for attribute (``_fields``, ``_field_defaults``,
``_make``, ``_replace``, ``_asdict``, ``__match_args__``, the fields' getters,
pickling by reference); ``tests/parallel/layers/test_named_tuples.py`` compares
them. A class of more fields than the templates have goes through
``collections.namedtuple``.

A class on this ``NamedTuple`` is written as on ``typing.NamedTuple`` (fields with
annotations, defaults last, methods, properties, a docstring). Type checkers see
``typing.NamedTuple`` itself.
"""

from __future__ import annotations

import collections
import sys
import types
from keyword import iskeyword  # (collections imported it already)

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Dict, Iterable, List, Tuple

_tuplegetter: Any
try:  # the fields' getter of collections.namedtuple (a C descriptor, no public name)
    from _collections import _tuplegetter  # type: ignore[import-not-found,no-redef]
except ImportError:  # another interpreter: what collections itself falls back to
    _tuplegetter = None

__all__ = ["NamedTuple"]

# What the class is made of and a class body must not replace (typing.NamedTuple's list).
_PROHIBITED = frozenset({"__init__", "__new__", "__slots__", "__getnewargs__", "_fields",
                         "_field_defaults", "_make", "_replace", "_asdict", "_source"})
_namedtuple: Any = collections.namedtuple  # (called with names known only here)
_tuple_new = tuple.__new__
#: what ``_replace`` raises for a name that is not a field (collections' own, per version)
_UNEXPECTED_FIELD = TypeError if sys.version_info >= (3, 13) else ValueError

# ``__new__`` for 0 to 16 fields; a class renames the parameters to its fields.
_NEW_BY_FIELDS = (
    lambda _cls: _tuple_new(_cls, ()),
    lambda _cls, a: _tuple_new(_cls, (a,)),
    lambda _cls, a, b: _tuple_new(_cls, (a, b)),
    lambda _cls, a, b, c: _tuple_new(_cls, (a, b, c)),
    lambda _cls, a, b, c, d: _tuple_new(_cls, (a, b, c, d)),
    lambda _cls, a, b, c, d, e: _tuple_new(_cls, (a, b, c, d, e)),
    lambda _cls, a, b, c, d, e, f: _tuple_new(_cls, (a, b, c, d, e, f)),
    lambda _cls, a, b, c, d, e, f, g: _tuple_new(_cls, (a, b, c, d, e, f, g)),
    lambda _cls, a, b, c, d, e, f, g, h: _tuple_new(_cls, (a, b, c, d, e, f, g, h)),
    lambda _cls, a, b, c, d, e, f, g, h, i: _tuple_new(_cls, (a, b, c, d, e, f, g, h, i)),
    lambda _cls, a, b, c, d, e, f, g, h, i, j: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, i, j)),
    lambda _cls, a, b, c, d, e, f, g, h, i, j, k: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, i, j, k)),
    lambda _cls, a, b, c, d, e, f, g, h, i, j, k, m: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, i, j, k, m)),
    lambda _cls, a, b, c, d, e, f, g, h, i, j, k, m, n: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, i, j, k, m, n)),
    lambda _cls, a, b, c, d, e, f, g, h, i, j, k, m, n, o: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, i, j, k, m, n, o)),
    lambda _cls, a, b, c, d, e, f, g, h, i, j, k, m, n, o, p: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, i, j, k, m, n, o, p)),
    lambda _cls, a, b, c, d, e, f, g, h, i, j, k, m, n, o, p, q: _tuple_new(
        _cls, (a, b, c, d, e, f, g, h, i, j, k, m, n, o, p, q)),
)


# The methods every class shares: what collections.namedtuple makes per class,
# reading the class's fields instead of a closure's.
def _make(cls: Any, iterable: Iterable[Any]) -> Any:
    """Make a new object of this class from a sequence or iterable."""
    result = _tuple_new(cls, iterable)
    if len(result) != len(cls._fields):
        raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(result)}")
    return result


def _replace(self: Any, /, **kwds: Any) -> Any:
    """Return a new object of this class replacing specified fields with new values."""
    result = self._make(map(kwds.pop, self._fields, self))
    if kwds:
        raise _UNEXPECTED_FIELD(f"Got unexpected field names: {list(kwds)!r}")
    return result


def __repr__(self: Any) -> str:
    """Return a nicely formatted representation string."""
    return (self.__class__.__name__ + "("
            + ", ".join([f"{name}={value!r}" for name, value in zip(self._fields, self)]) + ")")


def _asdict(self: Any) -> Dict[str, Any]:
    """Return a new dict which maps field names to their values."""
    return dict(zip(self._fields, self))


def __getnewargs__(self: Any) -> Tuple[Any, ...]:
    """Return self as a plain tuple.  Used by copy and pickle."""
    return tuple(self)


_METHODS: Dict[str, Any] = {"_make": classmethod(_make), "_replace": _replace,
                            "__repr__": __repr__, "_asdict": _asdict,
                            "__getnewargs__": __getnewargs__}
if sys.version_info >= (3, 13):  # copy.replace(), as collections.namedtuple has it there
    _METHODS["__replace__"] = _replace


def _getter(index: int) -> Any:
    doc = f"Alias for field number {index}"
    if _tuplegetter is not None:
        return _tuplegetter(index, sys.intern(doc))
    from operator import itemgetter

    return property(itemgetter(index), doc=doc)


def _check_fields(name: str, fields: List[str]) -> None:
    """collections.namedtuple's checks of the names (an ``__annotations__`` given by hand)."""
    for each in [name, *fields]:
        if type(each) is not str:
            raise TypeError("Type names and field names must be strings")
        if not each.isidentifier():
            raise ValueError(f"Type names and field names must be valid identifiers: {each!r}")
        if iskeyword(each):
            raise ValueError(f"Type names and field names cannot be a keyword: {each!r}")
    for each in fields:
        if each.startswith("_"):
            raise ValueError(f"Field names cannot start with an underscore: {each!r}")


def _build(name: str, fields: Tuple[str, ...], defaults: Tuple[Any, ...],
           body: Dict[str, Any]) -> Any:
    """The named tuple class ``name``: its fields, their defaults (the last ones'), the body."""
    if len(fields) >= len(_NEW_BY_FIELDS):  # rare: collections.namedtuple compiles one
        made = _namedtuple(name, fields, defaults=defaults, module=body["__module__"])
        namespace = dict(vars(made))
    else:
        arg_list = ", ".join(fields) + ("," if len(fields) == 1 else "")
        template = _NEW_BY_FIELDS[len(fields)].__code__
        code = template.replace(co_name="__new__", co_varnames=("_cls", *fields))
        scope = {"_tuple_new": _tuple_new, "__builtins__": {}, "__name__": f"namedtuple_{name}"}
        new = types.FunctionType(code, scope, "__new__", defaults or None)
        new.__qualname__ = f"{name}.__new__"
        new.__doc__ = f"Create new instance of {name}({arg_list})"
        namespace = {"__doc__": f"{name}({arg_list})", "__slots__": (), "_fields": fields,
                     "_field_defaults": dict(zip(fields[len(fields) - len(defaults):], defaults)),
                     "__new__": new, **_METHODS, "__match_args__": fields}
        for index, field in enumerate(fields):
            namespace[field] = _getter(index)
    namespace.update(body)
    return type(name, (tuple,), namespace)


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
        _check_fields(name, fields)
        defaults = [ns[f] for f in fields if f in ns]
        if defaults and any(f not in ns for f in fields[len(fields) - len(defaults):]):
            raise TypeError(f"{name}: a field without a default follows one with a default")
        body = {"__annotations__": dict(annotations)}
        for key, value in ns.items():
            if key in _PROHIBITED:
                raise AttributeError(f"{name}: cannot overwrite the named tuple's {key}")
            if key not in annotations and key != "__annotations__":
                body[key] = value  # (``type()`` calls their ``__set_name__``)
        cls = _build(sys.intern(name), tuple(fields), tuple(defaults), body)
        for field, value in zip(fields[len(fields) - len(defaults):], defaults):
            set_name = getattr(type(value), "__set_name__", None)
            if set_name is not None:  # a default's too, as typing.NamedTuple does
                set_name(value, cls, field)
        return cls


if TYPE_CHECKING:
    from typing import NamedTuple
else:
    class NamedTuple(metaclass=_NamedTupleMeta):
        """Base of a named tuple class written as on ``typing.NamedTuple`` (see the module)."""

        _base_of_named_tuples = True
