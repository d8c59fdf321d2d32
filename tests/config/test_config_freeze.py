"""Freeze means frozen: a frozen config refuses every change, at every level.

The original's freeze only guarded ``cfg.X = ...``; ``cfg["X"] = ...``,
``update`` and friends slipped through. Here each mutation raises
:class:`FrozenError` and leaves the config exactly as it was.
"""

from __future__ import annotations

import copy
import operator
import pickle

import pytest

from easycore.common.config import CfgNode, FrozenError


def make_cfg() -> CfgNode:
    return CfgNode(
        {
            "MODEL": {"NAME": "resnet", "DEPTH": 50, "BACKBONE": {"FREEZE_AT": 2}},
            "SOLVER": {"LR": 0.1},
            "NAME": "run0",
        }
    )


# Each mutation receives a node (the root or a child) and tries to change it.
MUTATIONS = {
    "setattr existing": lambda n: setattr(n, "NAME", "x"),
    "setattr new": lambda n: setattr(n, "NEW", 1),
    "setitem existing": lambda n: operator.setitem(n, "NAME", "x"),
    "setitem new": lambda n: operator.setitem(n, "NEW", 1),
    "delattr": lambda n: delattr(n, "NAME"),
    "delitem": lambda n: operator.delitem(n, "NAME"),
    "update": lambda n: n.update({"NAME": "x"}),
    "update kwargs": lambda n: n.update(NEW=1),
    "update nothing": lambda n: n.update(),
    "pop": lambda n: n.pop("NAME"),
    "pop default": lambda n: n.pop("MISSING", None),
    "popitem": lambda n: n.popitem(),
    "setdefault new": lambda n: n.setdefault("NEW", 1),
    "setdefault existing": lambda n: n.setdefault("NAME", "x"),
    "clear": lambda n: n.clear(),
    "ior": lambda n: operator.ior(n, {"NAME": "x"}),
    "merge": lambda n: n.merge({"NAME": "x"}),
    "merge empty": lambda n: n.merge({}),
    "merge_from_list pairs": lambda n: n.merge_from_list(["NAME", "x"]),
    "merge_from_list key=value": lambda n: n.merge_from_list(["NAME=x"]),
    "merge_from_list allow_new": lambda n: n.merge_from_list(["NEW.KEY=1"], allow_new=True),
}


def root(cfg):
    return cfg


def model(cfg):
    return cfg.MODEL  # has a NAME key, like the root


def backbone(cfg):
    cfg.MODEL.BACKBONE.NAME = "r50"  # give it the NAME key the mutations use
    return cfg.MODEL.BACKBONE


TARGETS = {"root": root, "child": model, "grandchild": backbone}


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_every_mutation_of_a_frozen_node_raises(mutation, target):
    cfg = make_cfg()
    node = TARGETS[target](cfg)
    cfg.freeze()
    before = copy.deepcopy(cfg.dict())

    with pytest.raises(FrozenError, match="frozen"):
        MUTATIONS[mutation](node)

    assert cfg.dict() == before
    assert cfg.is_frozen() and node.is_frozen()


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_unfreeze_restores_every_mutation(mutation):
    cfg = make_cfg()
    cfg.freeze()
    cfg.freeze(False)
    MUTATIONS[mutation](cfg)  # no error
    assert not cfg.is_frozen()


def test_frozen_error_is_an_attribute_error_naming_the_key():
    cfg = make_cfg()
    cfg.freeze()
    with pytest.raises(AttributeError) as info:
        cfg.MODEL.BACKBONE.FREEZE_AT = 3
    assert isinstance(info.value, FrozenError)
    message = str(info.value)
    assert "MODEL.BACKBONE.FREEZE_AT" in message
    assert "freeze(False)" in message  # says how to get out


def test_merge_into_a_frozen_child_through_an_unfrozen_parent():
    cfg = make_cfg()
    cfg.MODEL.freeze()
    assert not cfg.is_frozen() and cfg.MODEL.is_frozen()
    with pytest.raises(FrozenError):
        cfg.merge({"MODEL": {"DEPTH": 101}})
    assert cfg.MODEL.DEPTH == 50
    cfg.NAME = "allowed"  # the parent is not frozen
    assert cfg.NAME == "allowed"


def test_freeze_covers_nodes_added_before_freezing():
    cfg = CfgNode()
    cfg.SOLVER = CfgNode()
    cfg.SOLVER.SCHEDULE = {"STEPS": [1, 2]}
    cfg.freeze()
    assert cfg.SOLVER.SCHEDULE.is_frozen()
    with pytest.raises(FrozenError):
        cfg.SOLVER.SCHEDULE.STEPS = [3]


def test_reading_a_frozen_config_works():
    cfg = make_cfg()
    cfg.freeze()
    assert cfg.MODEL.BACKBONE.FREEZE_AT == 2
    assert cfg["SOLVER"]["LR"] == 0.1
    assert dict(cfg.items())["NAME"] == "run0"
    assert cfg.get("MISSING", 3) == 3
    assert CfgNode.load(CfgNode.dump(cfg)) == cfg


def test_operators_that_make_a_new_config_leave_the_frozen_one_alone():
    cfg = make_cfg()
    cfg.freeze()
    merged = cfg | {"NAME": "run1"}
    assert merged.NAME == "run1"
    assert cfg.NAME == "run0"
    thawed = cfg.copy()
    thawed.freeze(False)
    thawed.MODEL.DEPTH = 101
    assert cfg.MODEL.DEPTH == 50 and cfg.is_frozen()


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_frozen_config_pickles_frozen(protocol):
    cfg = make_cfg()
    cfg.freeze()
    again = pickle.loads(pickle.dumps(cfg, protocol=protocol))
    assert again == cfg
    assert again.is_frozen() and again.MODEL.is_frozen() and again.MODEL.BACKBONE.is_frozen()
    with pytest.raises(FrozenError):
        again.MODEL.BACKBONE.FREEZE_AT = 3
    with pytest.raises(FrozenError):
        again["NAME"] = "x"


def test_frozen_config_deep_copies_frozen():
    cfg = make_cfg()
    cfg.freeze()
    for again in (copy.deepcopy(cfg), cfg.copy()):
        assert again == cfg
        assert again.is_frozen() and again.MODEL.BACKBONE.is_frozen()
        with pytest.raises(FrozenError):
            again.MODEL.DEPTH = 101
        with pytest.raises(FrozenError):
            again.update(NAME="x")


def test_unfrozen_config_pickles_unfrozen():
    cfg = make_cfg()
    again = pickle.loads(pickle.dumps(cfg))
    assert not again.is_frozen() and not again.MODEL.is_frozen()
    again.MODEL.DEPTH = 101
    assert again.MODEL.DEPTH == 101


def test_freeze_frozen_argument_is_truthiness():
    cfg = make_cfg()
    cfg.freeze(1)
    assert cfg.is_frozen() is True
    cfg.freeze(0)
    assert cfg.is_frozen() is False


# ------------------------------------------------------------ issue 22, item 16
def make_cfg_with_nodes_in_sequences() -> CfgNode:
    cfg = CfgNode({"L": [CfgNode({"x": 1}), [CfgNode({"y": 2})]], "T": (CfgNode({"z": 3}),)})
    cfg.L.append({"plain": "dict"})  # a plain dict in a list is data, not a sub-config
    return cfg


@pytest.mark.parametrize(
    "get",
    [lambda c: c.L[0], lambda c: c.L[1][0], lambda c: c.T[0]],
    ids=["list", "nested", "tuple"],
)
@pytest.mark.parametrize("name", ["setattr existing", "setitem new", "update", "clear", "merge"])
def test_a_cfgnode_inside_a_list_or_tuple_of_a_frozen_config_is_frozen(get, name):
    cfg = make_cfg_with_nodes_in_sequences()
    cfg.freeze()
    node = get(cfg)
    before = dict(node)
    assert node.is_frozen()
    with pytest.raises(FrozenError):
        MUTATIONS[name](node)
    assert dict(node) == before
    cfg.freeze(False)
    assert not node.is_frozen()
    node.NAME = "changed"  # unfrozen with its config


def test_a_frozen_config_with_nodes_in_lists_copies_and_pickles_frozen():
    cfg = make_cfg_with_nodes_in_sequences()
    cfg.freeze()
    for other in (copy.deepcopy(cfg), pickle.loads(pickle.dumps(cfg))):
        with pytest.raises(FrozenError):
            other.L[0].x = 2
    assert not CfgNode(cfg).L[0].is_frozen()  # CfgNode(...) is a new, unfrozen tree


def test_calling_init_again_on_a_frozen_node_raises_and_changes_nothing():
    cfg = make_cfg()
    cfg.freeze()
    with pytest.raises(FrozenError):
        cfg.__init__({"NAME": "x"})
    with pytest.raises(FrozenError):
        cfg.MODEL.__init__()
    assert cfg == make_cfg() and cfg.is_frozen() and cfg.MODEL.is_frozen()


def test_freezing_a_list_that_holds_itself_terminates():
    cfg = CfgNode({"L": []})
    cfg.L.append(cfg.L)
    cfg.freeze()
    assert cfg.is_frozen()
