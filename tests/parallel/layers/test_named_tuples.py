"""easycore-parallel's ``NamedTuple`` (``_named_tuples``) makes the class
``typing.NamedTuple`` makes, without compiling each annotation (the package's 23
named tuples cost about 2.5 ms of every import)."""

from __future__ import annotations

import ast
import collections
import copy
import importlib
import inspect
import pickle
import typing
from pathlib import Path
from typing import Optional

import pytest

from easycore.common.parallel._named_tuples import NamedTuple

SRC = Path(__file__).resolve().parents[3] / "packages" / "easycore-parallel" / "src"
PARALLEL = SRC / "easycore" / "common" / "parallel"


class _Named:
    """A descriptor that records the name it was given (``__set_name__``)."""

    def __set_name__(self, owner, name):
        self.owner, self.name = owner, name

    def __get__(self, obj, owner=None):
        return self.name


def _point_class(base):
    """The same class body on ``base``: easycore's ``NamedTuple`` or ``typing``'s."""

    class Point(base):
        """A point."""

        x: int
        y: Optional[int] = None
        label: str = "p"
        named = _Named()

        @property
        def norm1(self) -> int:
            return abs(self.x) + abs(self.y or 0)

        def __str__(self) -> str:
            return f"({self.x}, {self.y})"

        @classmethod
        def origin(cls):
            return cls(0, 0)

    Point.__qualname__ = Point.__name__ = "Point" if base is NamedTuple else "PointRef"
    return Point


Point = _point_class(NamedTuple)
PointRef = _point_class(typing.NamedTuple)


def test_a_named_tuple_is_the_named_tuple_typing_makes():
    assert Point.__bases__ == PointRef.__bases__ == (tuple,)
    assert Point._fields == PointRef._fields == ("x", "y", "label")
    assert Point._field_defaults == PointRef._field_defaults
    assert list(Point.__annotations__) == list(PointRef.__annotations__)
    assert Point.__doc__ == PointRef.__doc__ == "A point."
    assert (Point.__module__, Point.__qualname__) == (__name__, "Point")
    p, q = Point(3, -4), PointRef(3, -4)
    assert tuple(p) == tuple(q) == (3, -4, "p")
    assert repr(p) == repr(q).replace("PointRef", "Point")
    assert str(p) == str(q) == "(3, -4)"
    assert p.norm1 == q.norm1 == 7
    assert Point.origin() == (0, 0, "p") and type(Point.origin()) is Point
    assert p._replace(x=1) == (1, -4, "p") and p._asdict()["label"] == "p"
    assert Point._make([1, 2, "a"]) == (1, 2, "a")
    # __set_name__ ran, with the class made (as typing.NamedTuple does from 3.13 on)
    assert Point.named == "named" and Point.__dict__["named"].owner is Point
    assert type(Point).__name__ == type(PointRef).__name__ == "type"


def test_a_named_tuple_pickles_by_reference():
    p = Point(1, label="q")
    again = pickle.loads(pickle.dumps(p, protocol=pickle.HIGHEST_PROTOCOL))
    assert again == p and type(again) is Point


def test_a_named_tuple_can_be_subclassed_as_a_named_tuple_can():
    class Labelled(Point):
        def shout(self) -> str:
            return self.label.upper()

    assert Labelled(1).shout() == "P" and Labelled._fields == Point._fields


def test_a_field_without_a_default_after_one_with_a_default_is_refused():
    with pytest.raises(TypeError, match="Bad"):
        class Bad(NamedTuple):
            a: int = 0
            b: int


@pytest.mark.parametrize("name", ["_make", "__new__", "_fields", "_replace"])
def test_the_named_tuples_own_attributes_cannot_be_overwritten(name):
    with pytest.raises(AttributeError, match=name):
        type(NamedTuple)("Bad", (NamedTuple,), {
            "__module__": __name__, "__annotations__": {"a": "int"}, name: lambda *a: None})


def test_a_body_without_annotations_goes_typings_way():
    # (Python 3.14 without the future import keeps no __annotations__ in the body)
    Empty = type(NamedTuple)("Empty", (NamedTuple,),
                             {"__module__": __name__, "__qualname__": "Empty"})
    assert Empty._fields == () and Empty() == () and Empty.__qualname__ == "Empty"


def _sources():
    for path in sorted(PARALLEL.rglob("*.py")):
        if path.name != "_named_tuples.py":
            yield path, ast.parse(path.read_text(encoding="utf-8"))


def _named_tuple_classes():
    """Every class of easycore-parallel on a ``NamedTuple`` base, as (module, name)."""
    found = []
    for path, tree in _sources():
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.Name) and b.id == "NamedTuple" for b in node.bases):
                found.append((".".join(path.relative_to(SRC).with_suffix("").parts), node.name))
    return found


def test_easycore_parallel_takes_its_named_tuple_base_from_one_place():
    from_typing = []
    for path, tree in _sources():
        for node in ast.walk(tree):
            imported = isinstance(node, ast.ImportFrom) and node.module == "typing" and any(
                a.name == "NamedTuple" for a in node.names)
            if imported or (isinstance(node, ast.Attribute) and node.attr == "NamedTuple"):
                from_typing.append(str(path.relative_to(SRC)))
    assert from_typing == [], ("import NamedTuple from easycore.common.parallel._named_tuples "
                               "(an import's cost): " + ", ".join(from_typing))
    assert len(_named_tuple_classes()) >= 20


@pytest.mark.parametrize("module, name", _named_tuple_classes())
def test_each_named_tuple_of_the_package_is_one(module, name):
    if module.endswith("backends.ray"):
        pytest.importorskip("ray")
    cls = getattr(importlib.import_module(module), name)
    assert cls.__bases__ == (tuple,)
    assert cls._fields == tuple(cls.__annotations__)
    assert (cls.__module__, cls.__qualname__) == (module, name)
    assert set(cls._field_defaults) <= set(cls._fields)


def _pair(n_fields: int, n_defaults: int):
    """A class of ``n_fields`` fields made both ways: easycore's, and ``collections``'."""
    fields = [f"f{i}" for i in range(n_fields)]
    defaults = {f: i * 10 for i, f in enumerate(fields) if i >= n_fields - n_defaults}
    ours = type(NamedTuple)("Wide", (NamedTuple,), {
        "__module__": __name__, "__qualname__": "Wide",
        "__annotations__": dict.fromkeys(fields, "int"), **defaults})
    theirs = collections.namedtuple("Wide", fields, defaults=tuple(defaults.values()))
    return ours, theirs


@pytest.mark.parametrize("n_fields, n_defaults", [(0, 0), (1, 0), (1, 1), (3, 1), (7, 4),
                                                  (12, 0), (16, 2), (17, 3), (24, 0)])
def test_a_named_tuple_behaves_as_collections_namedtuple_makes_it(n_fields, n_defaults):
    # 16 fields: the last __new__ compiled with the module; 17 and more: collections'.
    ours, theirs = _pair(n_fields, n_defaults)
    assert ours._fields == theirs._fields and ours.__match_args__ == theirs.__match_args__
    assert ours._field_defaults == theirs._field_defaults
    assert str(inspect.signature(ours)) == str(inspect.signature(theirs))
    assert ours.__new__.__doc__ == theirs.__new__.__doc__
    assert ours.__new__.__qualname__ == theirs.__new__.__qualname__
    assert ours.__doc__ == theirs.__doc__ and ours.__slots__ == ()
    required = n_fields - n_defaults
    args = list(range(100, 100 + required))
    a, b = ours(*args), theirs(*args)
    assert tuple(a) == tuple(b) and repr(a) == repr(b) and a._asdict() == b._asdict()
    assert not hasattr(a, "__dict__")
    for i, field in enumerate(ours._fields):
        assert getattr(a, field) == a[i]
        assert vars(ours)[field].__doc__ == vars(theirs)[field].__doc__
    kwargs = {f: -i for i, f in enumerate(ours._fields)}
    assert ours(**kwargs) == theirs(**kwargs)
    assert type(ours._make(kwargs.values())) is ours
    assert copy.copy(a) == a and copy.deepcopy(a) == a  # (pickling: a class at top level)
    assert a.__getnewargs__() == b.__getnewargs__() == tuple(a)
    if n_fields:
        assert a._replace(f0=7).f0 == 7 and type(a._replace(f0=7)) is ours
    def failures(make):
        got = []
        for call in (lambda: make(*args, *range(n_fields + 1)),
                     lambda: make(*args[:-1]) if required else make(nope=1),
                     lambda: make._make(range(n_fields + 1)),
                     lambda: make(*args)._replace(nope=1)):
            with pytest.raises((TypeError, ValueError)) as info:
                call()
            got.append((type(info.value), str(info.value)))
        return got

    errors = [failures(ours), failures(theirs)]
    assert errors[0] == errors[1]


def test_a_named_tuple_is_made_without_the_c_getter_where_there_is_none(monkeypatch):
    import easycore.common.parallel._named_tuples as named

    monkeypatch.setattr(named, "_tuplegetter", None)  # (an interpreter without _collections)
    Plain = _point_class(NamedTuple)
    p = Plain(1, 2)
    assert (p.x, p.y, p.label) == (1, 2, "p") and Plain.x.__doc__ == "Alias for field number 0"
    with pytest.raises(AttributeError):
        p.x = 3


@pytest.mark.parametrize("fields, error", [
    (["class"], "keyword"), (["_hidden"], "underscore"), (["not a name"], "identifiers"),
    ([1], "strings")])
def test_field_names_are_checked_as_collections_checks_them(fields, error):
    with pytest.raises((TypeError, ValueError), match=error):
        type(NamedTuple)("Bad", (NamedTuple,), {
            "__module__": __name__, "__annotations__": dict.fromkeys(fields, "int")})
