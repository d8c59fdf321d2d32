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
import yaml

from easycore.common.config import CfgNode, FrozenError, HierarchicalCfgNode


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
    assert CfgNode.load(CfgNode.dump(cfg.MODEL)) == cfg.MODEL


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


# ------------------------------------------------------------ issue 34, item 21
def _new_node() -> CfgNode:
    return CfgNode({"x": 1, "SUB": {"y": 2}})


# Each puts a new node into a list of the frozen config and returns where it landed.
ADDITIONS = {
    "append": lambda c, n: (c.L.append(n), c.L[-1])[1],
    "extend": lambda c, n: (c.L.extend([n]), c.L[-1])[1],
    "insert": lambda c, n: (c.L.insert(0, n), c.L[0])[1],
    "item": lambda c, n: (c.L.__setitem__(0, n), c.L[0])[1],
    "slice": lambda c, n: (c.L.__setitem__(slice(0, 1), [n]), c.L[0])[1],
    "iadd": lambda c, n: (c.L.__iadd__([n]), c.L[-1])[1],
    "nested list": lambda c, n: (c.L[1].append(n), c.L[1][-1])[1],
    "list in a tuple": lambda c, n: (c.T[1].append(n), c.T[1][-1])[1],
    "in a new list": lambda c, n: (c.L.append([[n]]), c.L[-1][0][0])[1],
    "in a new tuple": lambda c, n: (c.L.append(([n],)), c.L[-1][0][0])[1],
    "child's list": lambda c, n: (c.MODEL.LAYERS.append(n), c.MODEL.LAYERS[-1])[1],
    "inside a list's node": lambda c, n: (c.L[0].ITEMS.append(n), c.L[0].ITEMS[-1])[1],
}


def _with_lists() -> CfgNode:
    return CfgNode(
        {
            "L": [CfgNode({"x": 0, "ITEMS": []}), [CfgNode({"y": 0})]],
            "T": (CfgNode({"z": 0}), []),
            "MODEL": {"LAYERS": [1, 2]},
        },
        copy=False,
    )


@pytest.mark.parametrize("add", list(ADDITIONS.values()), ids=list(ADDITIONS))
def test_a_node_put_into_a_list_of_a_frozen_config_is_frozen(add):
    cfg = _with_lists()
    cfg.freeze()
    node = add(cfg, _new_node())
    assert node.is_frozen() and node.SUB.is_frozen()
    with pytest.raises(FrozenError):
        node.x = 2
    with pytest.raises(FrozenError):
        node.SUB.y = 3
    assert node == _new_node()
    cfg.freeze(False)
    node.x = 2  # unfrozen with its config
    node.SUB.y = 3


def test_lists_of_a_frozen_config_stay_lists_and_become_plain_again():
    cfg = _with_lists()
    lists = [cfg.L, cfg.L[1], cfg.T[1], cfg.MODEL.LAYERS, cfg.L[0].ITEMS]
    cfg.freeze()
    frozen_lists = [cfg.L, cfg.L[1], cfg.T[1], cfg.MODEL.LAYERS, cfg.L[0].ITEMS]
    assert all(isinstance(x, list) for x in frozen_lists)
    assert frozen_lists == lists
    cfg.MODEL.LAYERS.append(3)  # a list still takes values
    assert cfg.MODEL.LAYERS == [1, 2, 3]
    assert CfgNode.load(CfgNode.dump(cfg.MODEL)) == cfg.MODEL
    plain = cfg.dict()  # the types a file gives back, which any YAML dumper takes
    assert type(plain["MODEL"]["LAYERS"]) is list and type(plain["L"][1]) is list
    assert yaml.safe_load(yaml.safe_dump(cfg.MODEL.dict())) == {"LAYERS": [1, 2, 3]}
    cfg.freeze(False)
    assert [type(x) for x in (cfg.L, cfg.L[1], cfg.T[1], cfg.MODEL.LAYERS)] == [list] * 4
    assert type(cfg.L[0].ITEMS) is list


@pytest.mark.parametrize(
    "clone",
    [copy.deepcopy, lambda c: pickle.loads(pickle.dumps(c)), lambda c: c.copy()],
    ids=["deepcopy", "pickle", "copy"],
)
def test_copies_of_a_frozen_config_freeze_what_their_lists_receive(clone):
    cfg = _with_lists()
    cfg.freeze()
    other = clone(cfg)
    other.L.append(_new_node())
    with pytest.raises(FrozenError):
        other.L[-1].x = 2
    fresh = CfgNode(cfg)  # a new, unfrozen tree: plain lists
    fresh.L.append(_new_node())
    fresh.L[-1].x = 2
    assert type(fresh.L) is list


def test_a_list_holding_itself_freezes_and_unfreezes():
    cfg = CfgNode({"L": [CfgNode({"x": 1})]})
    cfg.L.append(cfg.L)
    cfg.freeze()
    assert cfg.L[1] is cfg.L and cfg.L[0].is_frozen()
    cfg.freeze(False)
    assert cfg.L[1] is cfg.L and type(cfg.L) is list and not cfg.L[0].is_frozen()


def test_saving_a_frozen_config_over_its_base_writes_only_what_differs(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("LAYERS: [1, 2]\nNAME: a\n", encoding="utf-8")
    cfg = HierarchicalCfgNode.open(base)
    cfg.NAME = "b"
    cfg.freeze()
    HierarchicalCfgNode.save(cfg, tmp_path / "run.yaml", base)
    saved = CfgNode.open(tmp_path / "run.yaml")
    assert dict(saved) == {"__BASE__": "base.yaml", "NAME": "b"}
