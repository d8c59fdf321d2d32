"""Keys and errors: identifiers only, method names stay methods, errors carry the path."""

from __future__ import annotations

import copy
import pickle

import pytest

from easycore.common.config import CfgNode, ConfigError, ConfigKeyError, FrozenError

INVALID_KEYS = ["a-b", "1x", "a.b", "", 3, "with space", None, ("t",), "é-x"]


def make_cfg() -> CfgNode:
    return CfgNode({"MODEL": {"BACKBONE": {"DEPTH": 50, "NAME": "resnet"}}, "SEED": 0})


# ------------------------------------------------------------ valid keys
def test_identifier_keys_are_accepted():
    cfg = CfgNode({"a": 1, "_private": 2, "CamelCase": 3, "ünïcode": 4, "x1": 5, "__BASE__": 6})
    assert cfg.a == 1 and cfg._private == 2 and cfg.ünïcode == 4 and cfg["__BASE__"] == 6


# ------------------------------------------------------------ invalid keys
@pytest.mark.parametrize("key", INVALID_KEYS, ids=repr)
def test_invalid_key_is_refused_naming_the_dotted_path(key):
    cfg = make_cfg()
    with pytest.raises(ConfigKeyError) as info:
        cfg.MODEL.BACKBONE[key] = 1
    message = str(info.value)
    assert f"MODEL.BACKBONE.{key}" in message
    assert "identifier" in message
    assert key not in cfg.MODEL.BACKBONE


@pytest.mark.parametrize("key", INVALID_KEYS, ids=repr)
def test_invalid_key_in_a_nested_init_dict(key):
    with pytest.raises(ConfigKeyError, match="identifier") as info:
        CfgNode({"MODEL": {"HEAD": {key: 1}}})
    assert f"MODEL.HEAD.{key}" in str(info.value)


@pytest.mark.parametrize(
    "add",
    [
        lambda n: setattr(n, "a-b", 1),
        lambda n: n.update({"a-b": 1}),
        lambda n: n.update(**{"a-b": 1}),
        lambda n: n.setdefault("a-b", 1),
        lambda n: n.merge({"a-b": 1}),
        lambda n: n.merge_from_list(["a-b", "1"], allow_new=True),
        lambda n: n.__ior__({"a-b": 1}),
        lambda n: setattr(n, "NEW", {"OK": {"a-b": 1}}),
    ],
    ids=["setattr", "update", "update kwargs", "setdefault", "merge", "overrides", "ior", "nested"],
)
def test_invalid_key_is_refused_by_every_way_in(add):
    cfg = make_cfg()
    with pytest.raises(ConfigKeyError, match=r"a-b"):
        add(cfg.MODEL)


@pytest.mark.parametrize(
    ("yaml_text", "dotted"),
    [
        ("a-b: 1\n", "a-b"),
        ("MODEL:\n  1x: 1\n", "MODEL.1x"),
        ("MODEL:\n  HEAD:\n    a.b: 1\n", "MODEL.HEAD.a.b"),
        ("3: three\n", "3"),
        ("MODEL:\n  '': empty\n", "MODEL."),
    ],
)
def test_invalid_key_in_yaml_is_a_config_error_naming_the_file(yaml_text, dotted, tmp_path):
    path = tmp_path / "bad-key.yaml"
    path.write_text(yaml_text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        CfgNode.open(path)
    message = str(info.value)
    assert str(path) in message
    assert repr(dotted) in message


def test_config_key_error_is_a_key_error_with_a_readable_str():
    with pytest.raises(KeyError) as info:
        CfgNode()["a-b"] = 1
    assert isinstance(info.value, ConfigKeyError)
    assert str(info.value).startswith("invalid config key 'a-b'")  # not repr'd in quotes


# ------------------------------------------------------------ keys named like methods
@pytest.mark.parametrize("name", ["copy", "items", "freeze", "dict", "keys", "merge", "save"])
def test_method_names_are_item_only_keys(name):
    cfg = CfgNode()
    cfg[name] = 1

    assert cfg[name] == 1
    assert name in cfg
    assert callable(getattr(cfg, name))  # still the method
    with pytest.raises(AttributeError) as info:
        setattr(cfg, name, 2)
    assert not isinstance(info.value, FrozenError)
    assert f"cfg[{name!r}]" in str(info.value)  # the hint
    assert cfg[name] == 1


def test_copy_key_and_copy_method_together():
    cfg = CfgNode({"copy": 1, "A": {"items": [1, 2]}})
    assert cfg["copy"] == 1
    duplicate = cfg.copy()
    assert duplicate == cfg and duplicate is not cfg
    assert cfg.A["items"] == [1, 2]
    assert list(cfg.A.items()) == [("items", [1, 2])]
    cfg["freeze"] = True
    cfg.freeze()
    assert cfg.is_frozen()
    with pytest.raises(FrozenError):
        cfg["copy"] = 2


def test_method_name_keys_round_trip_through_yaml_and_pickle(tmp_path):
    path = tmp_path / "methods.yaml"
    path.write_text("copy: 1\nitems: [a]\nNODE:\n  freeze: false\n", encoding="utf-8")
    cfg = CfgNode.open(path)
    assert cfg["copy"] == 1 and cfg["items"] == ["a"] and cfg.NODE["freeze"] is False
    assert callable(cfg.copy) and callable(cfg.NODE.freeze)
    for again in (CfgNode.load(CfgNode.dump(cfg)), pickle.loads(pickle.dumps(cfg)), cfg.copy()):
        assert again == cfg
        assert callable(again.copy) and again["copy"] == 1


def test_method_name_key_can_be_deleted_and_overridden():
    cfg = CfgNode({"items": 1, "NODE": {"copy": 1}})
    cfg.merge_from_list(["NODE.copy=2"])
    assert cfg.NODE["copy"] == 2
    del cfg["items"]
    assert "items" not in cfg and callable(cfg.items)
    assert cfg.NODE.pop("copy") == 2


def test_internal_slots_cannot_be_set_as_keys_by_attribute():
    cfg = CfgNode()
    with pytest.raises(AttributeError):
        cfg._frozen = True
    assert not cfg.is_frozen()
    cfg["_frozen"] = "just a key"
    assert not cfg.is_frozen() and cfg["_frozen"] == "just a key"


# ------------------------------------------------------------ errors carry the path
def test_missing_attribute_names_the_dotted_path_and_suggests():
    cfg = make_cfg()
    with pytest.raises(AttributeError) as info:
        _ = cfg.MODEL.BACKBONE.DEPT
    message = str(info.value)
    assert "'MODEL.BACKBONE.DEPT'" in message
    assert "did you mean 'MODEL.BACKBONE.DEPTH'?" in message


def test_missing_item_names_the_dotted_path_and_suggests():
    cfg = make_cfg()
    with pytest.raises(KeyError) as info:
        cfg["MODEL"]["BACKBONE"]["DEPT"]
    assert isinstance(info.value, ConfigKeyError)
    message = str(info.value)
    assert message == (
        "config has no key 'MODEL.BACKBONE.DEPT'; did you mean 'MODEL.BACKBONE.DEPTH'?"
    )


def test_missing_key_at_the_top_level():
    cfg = make_cfg()
    with pytest.raises(AttributeError, match=r"'SEEDS'.*did you mean 'SEED'\?"):
        _ = cfg.SEEDS
    with pytest.raises(KeyError, match=r"'MODLE'.*did you mean 'MODEL'\?"):
        _ = cfg["MODLE"]


def test_missing_key_without_close_match_has_no_suggestion():
    cfg = make_cfg()
    with pytest.raises(AttributeError) as info:
        _ = cfg.MODEL.TOTALLY_DIFFERENT
    assert "did you mean" not in str(info.value)
    assert "MODEL.TOTALLY_DIFFERENT" in str(info.value)


def test_paths_are_right_however_the_node_was_built(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("MODEL:\n  BACKBONE:\n    DEPTH: 50\n", encoding="utf-8")
    built = {
        "from dict": make_cfg(),
        "from yaml": CfgNode.open(path),
        "copied": make_cfg().copy(),
        "deep-copied": copy.deepcopy(make_cfg()),
        "pickled": pickle.loads(pickle.dumps(make_cfg())),
        "assigned": CfgNode(),
        "merged": CfgNode(),
        "overridden": CfgNode(),
    }
    built["assigned"].MODEL = {"BACKBONE": {"DEPTH": 50}}
    built["merged"].merge(make_cfg())
    built["overridden"].merge_from_list(["MODEL.BACKBONE.DEPTH=50"], allow_new=True)
    for how, cfg in built.items():
        with pytest.raises(AttributeError, match=r"'MODEL\.BACKBONE\.DEPT'") as info:
            _ = cfg.MODEL.BACKBONE.DEPT
        assert "did you mean 'MODEL.BACKBONE.DEPTH'" in str(info.value), how


def test_a_node_moved_under_another_key_takes_that_path():
    source = make_cfg()
    cfg = CfgNode()
    cfg.OTHER = CfgNode()
    cfg.OTHER.NET = source.MODEL
    with pytest.raises(AttributeError, match=r"'OTHER\.NET\.BACKBONE\.DEPT'"):
        _ = cfg.OTHER.NET.BACKBONE.DEPT


def test_getattr_default_and_hasattr_work():
    cfg = make_cfg()
    assert getattr(cfg, "MISSING", "default") == "default"
    assert not hasattr(cfg.MODEL, "MISSING")
    assert hasattr(cfg.MODEL, "BACKBONE")
    assert cfg.get("MISSING") is None


def test_dunder_probes_stay_quiet():
    cfg = make_cfg()
    with pytest.raises(AttributeError) as info:
        _ = cfg.__not_a_thing__
    assert str(info.value) == "__not_a_thing__"


def test_deleting_missing_keys_names_the_path():
    cfg = make_cfg()
    with pytest.raises(AttributeError, match=r"'MODEL\.BACKBONE\.DEPT'.*DEPTH"):
        del cfg.MODEL.BACKBONE.DEPT
    with pytest.raises(KeyError, match=r"'MODEL\.BACKBONE\.DEPT'"):
        del cfg.MODEL.BACKBONE["DEPT"]
    with pytest.raises(KeyError, match=r"'MODEL\.BACKBONE\.DEPT'"):
        cfg.MODEL.BACKBONE.pop("DEPT")
    assert cfg.MODEL.BACKBONE.pop("DEPT", "fallback") == "fallback"


# ------------------------------------------------------------ attributes follow the items
@pytest.mark.parametrize(
    "remove",
    [
        lambda c: c.__delitem__("A"),
        lambda c: c.__delattr__("A"),
        lambda c: c.pop("A"),
        lambda c: c.clear(),
        lambda c: c.popitem() and c.popitem(),
    ],
    ids=["del item", "del attr", "pop", "clear", "popitem"],
)
def test_removed_keys_are_gone_as_attributes_too(remove):
    cfg = CfgNode({"A": 1, "B": 2})
    remove(cfg)
    assert "A" not in cfg
    with pytest.raises(AttributeError, match="'A'"):
        _ = cfg.A


def test_changed_values_show_through_attributes():
    cfg = CfgNode({"A": 1})
    cfg["A"] = 2
    assert cfg.A == 2
    cfg.update(A=3, B=4)
    assert (cfg.A, cfg.B) == (3, 4)
    cfg |= {"A": 5}
    assert cfg.A == 5
    assert cfg.setdefault("C", 6) == 6 and cfg.C == 6
    cfg.merge({"A": 7})
    assert cfg.A == 7
