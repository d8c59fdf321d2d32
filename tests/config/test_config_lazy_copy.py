"""lazy_copy: a copy that copies a part on first use, and never changes its source."""

from __future__ import annotations

import copy
import json
import pickle
import re
import threading

import pytest

from easycore.common.config import CfgNode, FrozenError
from easycore.common.config.lazy_copy import lazy_copy


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
