"""Keys can never become protocol hooks or shadow methods (issue 15, item 1).

A key such as `__array_interface__` used to become a real attribute of the
node, and NumPy honours that attribute: `np.asarray(cfg.MEAN)` read (and could
write) memory at an address chosen by the YAML file. Dunder keys are now items
only, whichever way they get into a config; so are keys named like a method or
attribute of CfgNode.
"""

from __future__ import annotations

import copy
import pickle

import pytest

from easycore.common.config import CfgNode, HierarchicalCfgNode

DUNDERS = ["__array_interface__", "__array_struct__", "__torch_function__", "__BASE__", "__x__"]
METHODS = ["keys", "items", "freeze", "copy", "merge", "dict", "save"]
SPECIAL = ["__class__", "__dict__", "__getattr__", "__reduce__", "__setattr__"]


def assert_item_only(node: CfgNode, key: str, value: object) -> None:
    assert dict.__getitem__(node, key) == value
    assert node[key] == value
    assert key not in vars(node)  # not mirrored into the instance dict
    assert getattr(node, key, None) != value  # and not reachable as an attribute


def test_array_interface_in_a_config_file_cannot_read_memory(tmp_path):
    np = pytest.importorskip("numpy")
    secret = np.frombuffer(b"secret!!", dtype=np.uint8)
    address = secret.ctypes.data
    path = tmp_path / "evil.yaml"
    path.write_text(
        "MEAN:\n"
        "  __array_interface__:\n"
        "    shape: [8]\n"
        "    typestr: '|u1'\n"
        f"    data: [{address}, true]\n"
        "    version: 3\n",
        encoding="utf-8",
    )

    cfg = CfgNode.open(path)
    array = np.asarray(cfg.MEAN)

    assert array.dtype == object  # the node itself, not memory at `address`
    assert array.shape == ()
    assert cfg.MEAN["__array_interface__"]["data"] == [address, True]  # still readable as data


@pytest.mark.parametrize("key", DUNDERS + SPECIAL)
@pytest.mark.parametrize(
    "way",
    [
        "init",
        "load",
        "setitem",
        "update",
        "setdefault",
        "merge",
        "merge_from_list",
        "or",
        "ior",
        "pickle",
        "deepcopy",
    ],
)
def test_dunder_keys_are_items_only_whichever_way_they_come_in(key, way):
    if way == "init":
        node = CfgNode({key: 1})
    elif way == "load":
        node = CfgNode.load(f"{key}: 1\n")
    elif way == "setitem":
        node = CfgNode()
        node[key] = 1
    elif way == "update":
        node = CfgNode()
        node.update({key: 1})
    elif way == "setdefault":
        node = CfgNode()
        node.setdefault(key, 1)
    elif way == "merge":
        node = CfgNode()
        node.merge({key: 1})
    elif way == "merge_from_list":
        node = CfgNode()
        node.merge_from_list([f"{key}=1"], allow_new=True)
    elif way == "or":
        node = CfgNode() | {key: 1}
    elif way == "ior":
        node = CfgNode()
        node |= {key: 1}
    elif way == "pickle":
        node = pickle.loads(pickle.dumps(CfgNode({key: 1})))
    else:
        node = copy.deepcopy(CfgNode({key: 1}))
    assert_item_only(node, key, 1)
    # the node still behaves as a CfgNode
    assert type(node) is CfgNode and node.dict() == {key: 1}


@pytest.mark.parametrize("key", DUNDERS)
def test_setting_a_dunder_attribute_is_refused_with_a_hint(key):
    cfg = CfgNode()
    with pytest.raises(AttributeError, match=rf"cfg\['{key}'\] = \.\.\."):
        setattr(cfg, key, 1)
    assert key not in cfg


def test_dunder_key_in_a_sub_config_and_a_nested_override():
    cfg = CfgNode({"MODEL": {"X": 1}})
    cfg.merge_from_list(["MODEL.__array_interface__={'shape': (1,)}"], allow_new=True)
    assert "__array_interface__" not in vars(cfg.MODEL)
    assert cfg.MODEL["__array_interface__"] == {"shape": (1,)}
    with pytest.raises(AttributeError):
        _ = cfg.MODEL.__array_interface__


def test_dunder_key_cannot_be_deleted_as_an_attribute():
    cfg = CfgNode({"__BASE__": "base.yaml"})
    with pytest.raises(AttributeError):
        del cfg.__BASE__
    del cfg["__BASE__"]
    assert cfg == {}


@pytest.mark.parametrize("key", METHODS)
@pytest.mark.parametrize("way", ["merge_from_list", "merge", "load", "hierarchical"])
def test_method_name_keys_stay_items_through_every_way_in(key, way, tmp_path):
    if way == "merge_from_list":
        cfg = CfgNode({"A": 1})
        cfg.merge_from_list([f"{key}=5"], allow_new=True)
    elif way == "merge":
        cfg = CfgNode({"A": 1})
        cfg.merge({key: 5})
    elif way == "load":
        cfg = CfgNode.load(f"A: 1\n{key}: 5\n")
    else:
        (tmp_path / "base.yaml").write_text(f"{key}: 4\nA: 1\n", encoding="utf-8")
        (tmp_path / "child.yaml").write_text(f"__BASE__: base.yaml\n{key}: 5\n", encoding="utf-8")
        cfg = HierarchicalCfgNode.open(tmp_path / "child.yaml")
    assert cfg[key] == 5
    assert callable(getattr(cfg, key))  # still the method
    assert key not in vars(cfg)
    with pytest.raises(AttributeError, match="use cfg"):
        setattr(cfg, key, 6)
    assert cfg.A == 1 and cfg.copy() == cfg


def test_method_name_key_cannot_be_deleted_as_an_attribute():
    cfg = CfgNode({"keys": 1})
    with pytest.raises(AttributeError):
        del cfg.keys
    assert cfg["keys"] == 1 and callable(cfg.keys)


def test_reading_a_dunder_key_as_an_attribute_says_how_to_read_it():
    cfg = CfgNode.load("__BASE__: base.yaml\nA: 1\n")
    with pytest.raises(
        AttributeError, match=r"'__BASE__' is a key with a dunder name.*cfg\['__BASE__'\]"
    ):
        _ = cfg.__BASE__
    with pytest.raises(AttributeError, match=r"^__other__$"):
        _ = cfg.__other__  # a probe for a hook the config does not have stays quiet
