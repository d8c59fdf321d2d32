"""lazy_copy: a copy that copies a part on first use, and never changes its source."""

from __future__ import annotations

import copy
import json
import pickle
import re
import threading

import pytest

from easycore.common.config import CfgNode, FrozenError
from easycore.common.config import lazy_copy as lazy_copy_module
from easycore.common.config.lazy_copy import lazy_copy


@pytest.fixture(autouse=True, params=["default", "overlays"])
def overlays(request, monkeypatch) -> None:
    """Every test twice: as shipped (levels of 64 keys or more are overlays),
    and with every level an overlay over its source."""
    if request.param == "overlays":
        monkeypatch.setattr(lazy_copy_module, "OVERLAY_FROM", 0)


def _source() -> CfgNode:
    return CfgNode(
        {
            "N": 0,
            "NAME": "run",
            "SIZE": (224, 224),
            "LIST": [1, [2]],
            "SET": {1, 2},
            "MODEL": {"DEPTH": 50, "LAYERS": [3, 4], "HEAD": {"DIMS": [8]}},
            "TABLE": {f"k{i}": i for i in range(100)},
        }
    )


def _assert_untouched(src: CfgNode) -> None:
    assert src == _source()
    assert src.MODEL.HEAD.DIMS == [8] and src.LIST == [1, [2]] and {1, 2} == src.SET


def test_reads_give_the_same_values_and_class() -> None:
    src = _source()
    view = lazy_copy(src)
    assert view == src
    assert isinstance(view, CfgNode) and isinstance(view.MODEL, CfgNode)
    assert type(view).__name__ == "CfgNode"
    assert view.MODEL.DEPTH == 50 and view["MODEL"]["LAYERS"] == [3, 4]
    assert view.get("TABLE")["k7"] == 7
    assert sorted(view) == sorted(src) and len(view) == len(src) and "LIST" in view
    assert repr(view) == repr(src) and str(view) == str(src)


@pytest.mark.parametrize(
    "change",
    [
        lambda v: v.LIST.append(3),
        lambda v: v["LIST"][1].append(3),
        lambda v: v.get("LIST").append(3),
        lambda v: v.SET.add(3),
        lambda v: v.MODEL.LAYERS.append(5),
        lambda v: v.MODEL.HEAD.DIMS.append(9),
        lambda v: setattr(v.MODEL, "DEPTH", 101),
        lambda v: v["MODEL"].__setitem__("NEW", 1),
        lambda v: v.MODEL.HEAD.update({"DIMS": [0]}),
        lambda v: v.pop("LIST").append(3),
        lambda v: v.setdefault("MODEL").HEAD.DIMS.clear(),
        lambda v: [value.append(3) for value in v.values() if isinstance(value, list)],
        lambda v: [value.clear() for _, value in v.items() if isinstance(value, (list, set))],
        lambda v: dict(v)["LIST"].append(3),
        lambda v: {**v}["MODEL"].HEAD.DIMS.append(3),
        lambda v: v.dict()["MODEL"]["LAYERS"].append(3),
        lambda v: v.merge({"MODEL": {"HEAD": {"DIMS": [1]}}}),
        lambda v: v.merge_from_list(["MODEL.HEAD.DIMS=[5]", "MODEL.DEPTH=1"]),
        lambda v: v.freeze(),
        lambda v: v.TABLE.clear(),
        lambda v: v.popitem()[1],
        lambda v: v.MODEL.popitem()[1].DIMS.append(1),
        lambda v: v.clear(),
        lambda v: delattr(v.MODEL, "DEPTH"),
    ],
)
def test_no_change_to_a_copy_reaches_its_source(change) -> None:
    src = _source()
    cache: dict = {}
    view = lazy_copy(src, cache)
    result = change(view)
    if isinstance(result, list) and result and isinstance(result[-1], list):
        result[-1].append("x")
    _assert_untouched(src)
    assert not src.is_frozen() and not src.MODEL.is_frozen()
    # a second copy from the same cache starts from the source, not from the first copy
    assert lazy_copy(src, cache) == _source()


def test_changes_stay_in_the_copy() -> None:
    src = _source()
    view = lazy_copy(src)
    view.N += 1
    view.MODEL.LAYERS.append(5)
    view.MODEL.HEAD.DIMS[0] = 9
    assert view.N == 1 and view.MODEL.LAYERS == [3, 4, 5] and view["MODEL"].HEAD.DIMS == [9]
    assert view.MODEL is view["MODEL"]  # handed out once, then kept


def test_frozen_state_and_errors_are_those_of_a_copy() -> None:
    src = _source()
    src.freeze()
    view = lazy_copy(src)
    with pytest.raises(FrozenError):
        view.N = 1
    with pytest.raises(FrozenError):
        view.MODEL.DEPTH = 1
    with pytest.raises(AttributeError, match=re.escape("MODEL.DEPHT")):
        view.MODEL.DEPHT  # noqa: B018
    view.freeze(False)
    view.MODEL.DEPTH = 1
    assert src.is_frozen() and src.MODEL.is_frozen() and src.MODEL.DEPTH == 50


def test_dunder_keys_stay_items_only() -> None:
    src = CfgNode({"__BASE__": ["a.yaml"]}, copy=False)
    view = lazy_copy(src)
    with pytest.raises(AttributeError, match="items only"):
        view.__BASE__  # noqa: B018
    view["__BASE__"].append("b.yaml")
    assert src["__BASE__"] == ["a.yaml"]


def test_pickles_and_copies_are_plain_nodes() -> None:
    src = _source()
    view = lazy_copy(src)
    clones = (pickle.loads(pickle.dumps(view)), copy.deepcopy(view), view.copy(), copy.copy(view))
    for clone in clones:
        assert type(clone) is CfgNode and clone == src
    assert type(pickle.loads(pickle.dumps(view)).MODEL) is CfgNode
    view.pop("SET")
    assert json.loads(json.dumps(view))["MODEL"]["HEAD"] == {"DIMS": [8]}
    assert CfgNode.load(CfgNode.dump(lazy_copy(src))) == src


class MyCfg(CfgNode):
    def scaled(self) -> int:
        return self.N * 2


def test_subclass_is_kept() -> None:
    src = MyCfg({"N": 2, "A": {"B": [1]}})
    view = lazy_copy(src)
    assert isinstance(view, MyCfg) and view.scaled() == 4
    view.A.B.append(2)
    assert src.A.B == [1]
    assert type(pickle.loads(pickle.dumps(view))) is MyCfg


def test_objects_that_cannot_be_copied_are_fine_until_used() -> None:
    src = CfgNode({"LOCK": threading.Lock(), "N": 1}, copy=False)
    view = lazy_copy(src)
    view.N += 1  # the lock is never copied because it is never used
    assert view.N == 2 and src.N == 1


def test_a_copy_of_a_copy_is_independent_of_both() -> None:
    src = _source()
    first = lazy_copy(src)
    second = lazy_copy(first)
    second.MODEL.LAYERS.append(7)
    first.MODEL.LAYERS.append(6)
    assert src.MODEL.LAYERS == [3, 4]
    assert first.MODEL.LAYERS == [3, 4, 6] and second.MODEL.LAYERS == [3, 4, 7]


# ------------------------------------------------------------ issue 34, item 7
def _deep_source() -> CfgNode:
    """Nodes two levels down, inside a list, a nested list and a tuple."""
    return CfgNode(
        {
            "N": 0,
            "A": {"B": {"c": 1, "L": [1], "C": {"d": 1}}, "x": 2},
            "L": [CfgNode({"x": 1}), [CfgNode({"y": 2})], 3],
            "T": (CfgNode({"y": 1}), [4]),
        },
        copy=False,
    )


@pytest.mark.parametrize("source_frozen", [False, True], ids=["unfrozen", "frozen"])
@pytest.mark.parametrize(
    "freeze",
    [
        lambda v: v.freeze(),
        lambda v: v.A.freeze(),
        lambda v: v["A"].freeze(True),
        lambda v: v.freeze(False),
        lambda v: v.A.freeze(False),
        lambda v: v.L[0].freeze(not v.L[0].is_frozen()),
        lambda v: v.T[0].freeze(not v.T[0].is_frozen()),
    ],
    ids=["freeze", "A.freeze", "A.freeze(True)", "unfreeze", "A.unfreeze", "L[0]", "T[0]"],
)
def test_freeze_or_unfreeze_of_a_copy_never_reaches_the_source(freeze, source_frozen) -> None:
    src = _deep_source()
    src.freeze(source_frozen)
    cache: dict = {}
    freeze(lazy_copy(src, cache))
    nodes = [src, src.A, src.A.B, src.A.B.C, src.L[0], src.L[1][0], src.T[0]]
    assert [node.is_frozen() for node in nodes] == [source_frozen] * len(nodes)
    if not source_frozen:
        # what a runner's next call does with its own copy
        later = lazy_copy(src, cache)
        later.A.B.c = 5
        later.A.B.C.d = 5
        later.L[0].x = 5
        later.L[1][0].y = 5
        later.T[0].y = 5
        assert src == _deep_source()


def _snapshot(value: object) -> object:
    """Everything observable of a tree: keys, values, types and every node's freeze."""
    if isinstance(value, CfgNode):
        len(value)  # an overlay (a level of many keys) fills itself in: storage read below
        items = [(key, _snapshot(item)) for key, item in dict.items(value)]
        return ("node", type(value).__name__, value.is_frozen(), items)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_snapshot(item) for item in value])
    return ("value", repr(value))


_PATHS = {
    "root": lambda c: c,
    "A": lambda c: c.A,
    "A[]": lambda c: c["A"],
    "A.get": lambda c: c.get("A"),
    "A.B": lambda c: c.A.B,
    "A.B.L": lambda c: c["A"].B.L,
    "A.B.C": lambda c: c.A["B"].C,
    "L": lambda c: c.L,
    "L[0]": lambda c: c.L[0],
    "L[1]": lambda c: c.L[1],
    "L[1][0]": lambda c: c.L[1][0],
    "T[0]": lambda c: c.T[0],
    "T[1]": lambda c: c.T[1],
    "values": lambda c: next(v for v in c.values() if isinstance(v, CfgNode)),
    "items": lambda c: next(v for _, v in c.items() if isinstance(v, list)),
}

_ACTIONS = {
    "read": lambda t: _snapshot(t),
    "freeze": lambda t: t.freeze(),
    "unfreeze": lambda t: t.freeze(False),
    "set x": lambda t: setattr(t, "x", 7),
    "set c": lambda t: t.__setitem__("c", [7]),
    "new key": lambda t: t.__setitem__("NEW", {"d": 1}),
    "append": lambda t: t.append(CfgNode({"z": 0})),
    "append int": lambda t: t.append(9),
    "item set": lambda t: t.__setitem__(0, 8),
    "update": lambda t: t.update({"x": 3}),
    "merge": lambda t: t.merge({"B": {"c": 9}, "x": 4}),
    "merge_from_list": lambda t: t.merge_from_list(["B.c", "10"]),
    "pop": lambda t: t.pop("x"),
    "popitem": lambda t: t.popitem(),
    "setdefault": lambda t: t.setdefault("B"),
    "clear": lambda t: t.clear(),
    "delattr": lambda t: delattr(t, "x"),
    "dict": lambda t: t.dict(),
    "copy": lambda t: t.copy(),
    "is_frozen": lambda t: t.is_frozen(),
}


def _outcome(target: object, action) -> object:
    try:
        return ("ok", _snapshot(action(target)))
    except Exception as exc:  # noqa: BLE001 (the same error on both is the point)
        return ("error", type(exc).__name__)


@pytest.mark.parametrize("seed", range(100))
def test_every_sequence_of_operations_gives_what_a_deep_copy_gives(seed) -> None:
    import random

    rng = random.Random(seed)
    src = _deep_source()
    src.freeze(rng.random() < 0.3)
    pristine = _snapshot(src)
    cache: dict = {}
    view, deep = lazy_copy(src, cache), copy.deepcopy(src)
    for _ in range(16):
        path, action = rng.choice(list(_PATHS)), rng.choice(list(_ACTIONS))
        outcomes = []
        for tree in (view, deep):
            try:
                target = _PATHS[path](tree)
            except Exception as exc:  # noqa: BLE001
                outcomes.append(("no target", type(exc).__name__))
                continue
            outcomes.append(_outcome(target, _ACTIONS[action]))
        assert outcomes[0] == outcomes[1], (path, action)
        assert _snapshot(view) == _snapshot(deep), (path, action)
        assert _snapshot(src) == pristine, (path, action)
    assert _snapshot(lazy_copy(src, cache)) == pristine


# ------------------------------------------------ overlays over large levels
def _big() -> CfgNode:
    return CfgNode({"table": {f"key{i}": i for i in range(5_000)},
                    **{f"top{i}": i for i in range(5_000)}, "lst": [1]})


def test_writing_one_key_of_a_large_level_copies_that_key_only() -> None:
    src = _big()
    view = lazy_copy(src, {})
    view.table.key5 = -1
    view.top7 = -7
    view.sum = 0
    # The storage of each level holds the keys the copy touched, not 5,000.
    assert dict.__len__(view) < 10 and dict.__len__(view.table) < 10
    assert view.table.key5 == -1 and view.table.key6 == 6 and view["top7"] == -7
    assert "key4999" in view.table and view.table.get("nope", 3) == 3
    assert src.table.key5 == 5 and src.top7 == 7 and "sum" not in src


def test_an_overlay_reads_as_a_whole_copy_in_every_way() -> None:
    src = _big()
    view, deep = lazy_copy(src, {}), copy.deepcopy(src)
    for tree in (view, deep):
        tree.top3 = "three"  # an existing key keeps its place
        tree.table.key0 = "zero"
        tree.NEW = {"a": 1}  # a new key comes last
        tree.lst.append(2)
    assert list(view) == list(deep) and list(view.table) == list(deep.table)
    assert len(view) == len(deep) and view == deep and deep == view
    assert json.dumps(lazy_copy(src, {})) == json.dumps(src)
    assert json.dumps(view) == json.dumps(deep)
    assert pickle.loads(pickle.dumps(view)) == deep
    assert type(pickle.loads(pickle.dumps(view))) is CfgNode
    assert CfgNode.load(view.dump()) == deep
    assert src == _big()


def test_an_overlay_frozen_by_its_consumer_leaves_the_source_and_later_copies_alone() -> None:
    src = _big()
    cache: dict = {}
    view = lazy_copy(src, cache)
    view.table.key1 = 1
    view.freeze()
    assert view.is_frozen() and view.table.is_frozen()
    with pytest.raises(FrozenError):
        view.table.key2 = 0
    assert not src.is_frozen() and not src.table.is_frozen()
    later = lazy_copy(src, cache)
    later.table.key2 = 0  # not frozen
    assert not later.table.is_frozen() and src.table.key2 == 2


def test_an_overlay_of_a_frozen_source_refuses_writes() -> None:
    src = _big()
    src.freeze()
    view = lazy_copy(src, {})
    with pytest.raises(FrozenError):
        view.table.key1 = 0
    with pytest.raises(FrozenError):
        view["top1"] = 0
    assert view.table.key1 == 1


def test_missing_keys_of_an_overlay_are_the_nodes_own_errors() -> None:
    view = lazy_copy(_big(), {})
    with pytest.raises(AttributeError, match=r"table\.key5000"):
        view.table.key5000  # noqa: B018
    with pytest.raises(KeyError):
        view["nope"]
    del view.table.key3
    assert "key3" not in view.table and len(view.table) == 4_999
