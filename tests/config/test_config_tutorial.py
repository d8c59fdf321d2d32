"""The config tutorial and API of easycore 0.4.2, example by example.

Each test starts with the documented call, then checks its edge cases. The
spec's own typos (``IN_FEATRES`` in example.yaml, ``cfg_c`` in the merge
example) are the document's; the YAML keeps ``IN_FEATRES`` as written.
"""

from __future__ import annotations

import io

import pytest
import yaml

from easycore.common.config import CfgNode as CN

EXAMPLE_YAML = """\
MODEL:
  IN_FEATRES: ["res3", "res4", "res5"]
  INPUT_SIZE: (224, 224)
  NUM_CLASSES: 100
NAME: YuxinZhaozyx
"""

EXAMPLE_VALUES = {
    "MODEL": {
        "IN_FEATRES": ["res3", "res4", "res5"],
        "INPUT_SIZE": (224, 224),
        "NUM_CLASSES": 100,
    },
    "NAME": "YuxinZhaozyx",
}


def tutorial_dict():
    return {
        "MODEL": {
            "IN_FEATURES": ["res3", "res4", "res5"],
            "INPUT_SIZE": (224, 224),
            "NUM_CLASSES": 100,
        },
        "NAME": "YuxinZhaozyx",
    }


def same_types(a, b) -> bool:
    """Equal, and of the same types all the way down (1 == 1.0 == True is not enough)."""
    if type(a) is not type(b) and not (isinstance(a, dict) and isinstance(b, dict)):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_types(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_types(x, y) for x, y in zip(a, b))
    return a == b


@pytest.fixture
def example_yaml(tmp_path):
    path = tmp_path / "example.yaml"
    path.write_text(EXAMPLE_YAML, encoding="utf-8")
    return path


# ------------------------------------------------------------ 1.2.1 load a yaml file
def test_open_example_yaml_by_path(example_yaml, monkeypatch):
    monkeypatch.chdir(example_yaml.parent)
    cfg = CN.open("example.yaml")

    assert isinstance(cfg, CN) and isinstance(cfg, dict)
    assert isinstance(cfg.MODEL, CN)
    assert cfg.MODEL.IN_FEATRES == ["res3", "res4", "res5"]
    assert cfg.MODEL.INPUT_SIZE == (224, 224)
    assert isinstance(cfg.MODEL.INPUT_SIZE, tuple)  # "(224, 224)" is a Python literal
    assert cfg.MODEL.NUM_CLASSES == 100 and type(cfg.MODEL.NUM_CLASSES) is int
    assert cfg.NAME == "YuxinZhaozyx"
    assert same_types(cfg.dict(), EXAMPLE_VALUES)


def test_open_example_yaml_from_text_file_object(example_yaml):
    with open(example_yaml, encoding="utf-8") as f:
        cfg = CN.open(f)
    assert same_types(cfg.dict(), EXAMPLE_VALUES)


def test_open_accepts_pathlike_and_binary_file_objects(example_yaml):
    assert same_types(CN.open(example_yaml).dict(), EXAMPLE_VALUES)
    with open(example_yaml, "rb") as f:
        assert same_types(CN.open(f).dict(), EXAMPLE_VALUES)
    assert same_types(CN.open(io.BytesIO(EXAMPLE_YAML.encode())).dict(), EXAMPLE_VALUES)


def test_open_honours_encoding(tmp_path):
    path = tmp_path / "utf16.yaml"
    path.write_text("NAME: Zhào\n", encoding="utf-16")
    assert CN.open(path, encoding="utf-16").NAME == "Zhào"
    with pytest.raises(UnicodeDecodeError):
        CN.open(path)  # utf-8 by default


def test_open_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        CN.open(tmp_path / "nope.yaml")


# ------------------------------------------------------------ 1.2.2 empty config
def test_empty_config():
    cfg = CN()
    assert cfg == {} and len(cfg) == 0
    assert str(cfg) == "{}"
    assert not cfg.is_frozen()


def test_empty_yaml_gives_empty_config(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("", encoding="utf-8")
    assert CN.open(path) == {}
    assert CN.load("# only a comment\n") == {}


# ------------------------------------------------------------ 1.2.3 config from a dict
def test_config_from_python_dict():
    init_dict = tutorial_dict()
    cfg = CN(init_dict)

    assert cfg.MODEL.IN_FEATURES == ["res3", "res4", "res5"]
    assert cfg.MODEL.INPUT_SIZE == (224, 224)
    assert cfg.MODEL.NUM_CLASSES == 100
    assert cfg.NAME == "YuxinZhaozyx"
    assert isinstance(cfg.MODEL, CN)
    assert type(init_dict["MODEL"]) is dict  # the argument is not converted in place


def test_config_from_dict_copies_by_default():
    init_dict = tutorial_dict()
    cfg = CN(init_dict)

    init_dict["MODEL"]["IN_FEATURES"].append("res6")
    init_dict["MODEL"]["NUM_CLASSES"] = 1
    init_dict["NAME"] = "changed"

    assert cfg.MODEL.IN_FEATURES == ["res3", "res4", "res5"]
    assert cfg.MODEL.NUM_CLASSES == 100
    assert cfg.NAME == "YuxinZhaozyx"
    assert cfg.MODEL.IN_FEATURES is not init_dict["MODEL"]["IN_FEATURES"]


def test_config_from_dict_with_copy_false_shares_leaf_values():
    init_dict = tutorial_dict()
    cfg = CN(init_dict, copy=False)

    assert cfg.MODEL.IN_FEATURES is init_dict["MODEL"]["IN_FEATURES"]
    init_dict["MODEL"]["IN_FEATURES"].append("res6")
    assert cfg.MODEL.IN_FEATURES == ["res3", "res4", "res5", "res6"]
    # nested dicts still become CfgNodes with attribute access
    assert isinstance(cfg.MODEL, CN)


def test_config_from_none_and_from_config():
    assert CN(None) == {}
    original = CN(tutorial_dict())
    again = CN(original)
    assert again == original
    assert again.MODEL is not original.MODEL  # deep-copied
    assert again.MODEL.IN_FEATURES is not original.MODEL.IN_FEATURES


def test_config_from_non_mapping_is_a_type_error():
    with pytest.raises(TypeError, match="mapping"):
        CN([("A", 1)])


# ------------------------------------------------------------ 1.2.4 use config
def test_use_config():
    cfg = CN(tutorial_dict())

    in_features = cfg.MODEL.IN_FEATURES
    input_size = cfg.MODEL.INPUT_SIZE
    num_classes = cfg.MODEL.NUM_CLASSES
    name = cfg.NAME
    assert isinstance(in_features, list)
    assert isinstance(input_size, tuple)
    assert isinstance(num_classes, int)
    assert isinstance(name, str)

    # add new value to config
    cfg.LICENSE = "MIT"
    # add a new CfgNode to config
    cfg.SOLVER = CN()
    cfg.SOLVER.LEARNING_RATE = 0.001
    cfg.SOLVER.BATCH_SIZE = 128

    assert cfg["LICENSE"] == "MIT"
    assert cfg["SOLVER"]["LEARNING_RATE"] == 0.001
    assert cfg["SOLVER"] is cfg.SOLVER
    assert list(cfg) == ["MODEL", "NAME", "LICENSE", "SOLVER"]
    assert cfg.dict()["SOLVER"] == {"LEARNING_RATE": 0.001, "BATCH_SIZE": 128}


def test_attribute_and_item_access_agree():
    cfg = CN()
    cfg["A"] = 1
    cfg.B = 2
    assert cfg.A == cfg["A"] == 1
    assert cfg.B == cfg["B"] == 2
    cfg.A = 10
    assert cfg["A"] == 10
    cfg["B"] = 20
    assert cfg.B == 20
    assert cfg.A == 10
    cfg.C = 3
    assert cfg["C"] == 3


def test_assigned_plain_dicts_become_nodes():
    cfg = CN()
    cfg.SOLVER = {"LR": 0.1, "SCHEDULE": {"STEPS": [10, 20]}}
    assert isinstance(cfg.SOLVER, CN)
    assert isinstance(cfg.SOLVER.SCHEDULE, CN)
    assert cfg.SOLVER.SCHEDULE.STEPS == [10, 20]
    cfg.update(EXTRA={"X": 1})
    assert cfg.EXTRA.X == 1
    assert cfg.setdefault("MORE", {"Y": 2}).Y == 2


# ------------------------------------------------------------ 1.2.5 merge two configs
def test_merge_two_configs():
    cfg_a = CN()
    cfg_a.key1 = 1
    cfg_a.key2 = 2

    cfg_b = CN()
    cfg_b.key2 = 3
    cfg_b.key3 = 4  # the spec writes cfg_c here, a typo

    cfg_a.merge(cfg_b)

    assert cfg_a.key2 == 3
    assert cfg_a == {"key1": 1, "key2": 3, "key3": 4}
    assert cfg_b == {"key2": 3, "key3": 4}  # the argument is left alone


def test_merge_is_recursive_and_the_argument_wins():
    base = CN({"MODEL": {"DEPTH": 50, "NAME": "resnet", "HEAD": {"DIM": 256}}, "SEED": 0})
    other = CN({"MODEL": {"DEPTH": 101, "HEAD": {"DROPOUT": 0.5}}, "NEW": [1]})

    base.merge(other)

    assert base.dict() == {
        "MODEL": {"DEPTH": 101, "NAME": "resnet", "HEAD": {"DIM": 256, "DROPOUT": 0.5}},
        "SEED": 0,
        "NEW": [1],
    }
    assert isinstance(base.MODEL.HEAD, CN)


def test_merge_replaces_a_value_by_a_node_and_a_node_by_a_value():
    cfg = CN({"A": 1, "B": {"X": 1}})
    cfg.merge({"A": {"Y": 2}, "B": 5})
    assert isinstance(cfg.A, CN) and cfg.A.Y == 2
    assert cfg.B == 5


def test_merge_copies_values_in():
    cfg = CN({"A": 1})
    other = CN({"LIST": [1, 2], "NODE": {"X": 1}})
    cfg.merge(other)
    other.LIST.append(3)
    other.NODE.X = 2
    assert cfg.LIST == [1, 2]
    assert cfg.NODE.X == 1
    assert cfg.NODE is not other.NODE


def test_merge_accepts_a_plain_dict():
    cfg = CN({"A": {"B": 1, "C": 2}})
    cfg.merge({"A": {"B": 10}})
    assert cfg.A == {"B": 10, "C": 2}


# ------------------------------------------------------------ 1.2.6 copy
def test_copy_is_deep():
    cfg = CN(tutorial_dict())
    cfg_copy = cfg.copy()

    assert cfg_copy == cfg
    assert type(cfg_copy) is CN
    assert cfg_copy is not cfg
    assert cfg_copy.MODEL is not cfg.MODEL
    assert cfg_copy.MODEL.IN_FEATURES is not cfg.MODEL.IN_FEATURES

    cfg_copy.MODEL.IN_FEATURES.append("res6")
    cfg_copy.MODEL.NUM_CLASSES = 10
    cfg_copy.NEW = 1
    assert cfg.MODEL.IN_FEATURES == ["res3", "res4", "res5"]
    assert cfg.MODEL.NUM_CLASSES == 100
    assert "NEW" not in cfg


def test_copy_keeps_frozen_state():
    cfg = CN(tutorial_dict())
    assert not cfg.copy().is_frozen()
    cfg.freeze()
    frozen_copy = cfg.copy()
    assert frozen_copy.is_frozen() and frozen_copy.MODEL.is_frozen()


# ------------------------------------------------------------ 1.2.7 save
def test_save_to_path_and_open_again(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = CN(tutorial_dict())
    cfg.save("example-save.yaml")

    again = CN.open("example-save.yaml")
    assert same_types(again.dict(), cfg.dict())


def test_save_to_text_file_object(tmp_path):
    cfg = CN(tutorial_dict())
    path = tmp_path / "example-save.yaml"
    with open(path, "w", encoding="utf-8") as f:
        cfg.save(f)  # broken in the original
    assert same_types(CN.open(path).dict(), cfg.dict())

    buffer = io.StringIO()
    cfg.save(buffer)
    assert same_types(CN.load(buffer.getvalue()).dict(), cfg.dict())


def test_save_to_binary_file_object(tmp_path):
    cfg = CN({"NAME": "Zhào", "SIZE": (1, 2)})
    path = tmp_path / "binary.yaml"
    with open(path, "wb") as f:
        cfg.save(f)
    assert same_types(CN.open(path).dict(), cfg.dict())

    buffer = io.BytesIO()
    cfg.save(buffer, encoding="utf-16")
    data = buffer.getvalue()
    assert "Zhào".encode("utf-16-le") in data
    assert same_types(CN.load(data.decode("utf-16")).dict(), cfg.dict())


def test_save_with_encoding(tmp_path):
    cfg = CN({"NAME": "Zhào"})
    path = tmp_path / "utf16.yaml"
    cfg.save(path, encoding="utf-16")
    assert path.read_text(encoding="utf-16").strip() == "NAME: Zhào"
    assert CN.open(path, encoding="utf-16") == cfg


def test_save_writes_readable_block_yaml_in_key_order(tmp_path):
    cfg = CN({"Z": 1, "A": {"B": [1, 2]}, "NAME": "Zhào"})
    path = tmp_path / "out.yaml"
    cfg.save(path)
    text = path.read_text(encoding="utf-8")
    assert text.index("Z:") < text.index("A:")  # insertion order, not sorted
    assert "Zhào" in text  # unicode written as is
    assert "{" not in text  # block style
    assert yaml.safe_load(text) == {"Z": 1, "A": {"B": [1, 2]}, "NAME": "Zhào"}


def test_save_overwrites_an_existing_file(tmp_path):
    path = tmp_path / "out.yaml"
    CN({"A": 1, "B": 2}).save(path)
    CN({"C": 3}).save(path)
    assert CN.open(path) == {"C": 3}


# ------------------------------------------------------------ API: load / dump
def test_load_from_yaml_string():
    cfg = CN.load(EXAMPLE_YAML)
    assert same_types(cfg.dict(), EXAMPLE_VALUES)


def test_dump_returns_a_string_without_stream():
    cfg = CN(tutorial_dict())
    text = CN.dump(cfg)
    assert isinstance(text, str)
    assert same_types(CN.load(text).dict(), cfg.dict())


def test_dump_into_a_stream_returns_none():
    cfg = CN(tutorial_dict())
    stream = io.StringIO()
    assert CN.dump(cfg, stream) is None
    assert stream.getvalue() == CN.dump(cfg)


def test_dump_with_encoding_into_a_binary_stream():
    cfg = CN({"NAME": "Zhào"})
    stream = io.BytesIO()
    assert CN.dump(cfg, stream, encoding="utf-8") is None
    assert stream.getvalue().decode("utf-8") == CN.dump(cfg)


def test_dump_passes_yaml_options():
    cfg = CN({"A": 1})
    text = CN.dump(cfg, explicit_start=True, explicit_end=True)
    assert text.startswith("---")
    assert text.rstrip().endswith("...")
    assert CN.load(text) == cfg
    ascii_text = CN.dump(CN({"N": "à"}), allow_unicode=False)
    assert "à" not in ascii_text and ascii_text.isascii()
    assert CN.load(ascii_text).N == "à"


def test_dump_ignores_a_dumper_override():
    cfg = CN({"SIZE": (1, 2)})
    text = CN.dump(cfg, Dumper=yaml.Dumper)
    assert "!!" not in text
    assert CN.load(text).SIZE == (1, 2)


# ------------------------------------------------------------ API: dict / __str__
def test_dict_converts_to_nested_plain_dicts():
    cfg = CN(tutorial_dict())
    d = cfg.dict()
    assert type(d) is dict and type(d["MODEL"]) is dict
    assert d == tutorial_dict()
    assert d["MODEL"]["IN_FEATURES"] is cfg.MODEL.IN_FEATURES  # leaves are not copied
    d["NAME"] = "other"
    assert cfg.NAME == "YuxinZhaozyx"


def test_str_is_dict_format():
    cfg = CN({"A": "in example-A.yaml", "B": {"C": (1, 2)}})
    assert str(cfg) == "{'A': 'in example-A.yaml', 'B': {'C': (1, 2)}}"
    assert str(cfg) == str(cfg.dict())
    assert repr(cfg) == "CfgNode({'A': 'in example-A.yaml', 'B': {'C': (1, 2)}})"


# ------------------------------------------------------------ API: freeze / is_frozen
def test_freeze_and_is_frozen():
    cfg = CN(tutorial_dict())
    assert not cfg.is_frozen()

    cfg.freeze()
    assert cfg.is_frozen() and cfg.MODEL.is_frozen()

    cfg.freeze(False)
    assert not cfg.is_frozen() and not cfg.MODEL.is_frozen()
    cfg.freeze(frozen=True)
    assert cfg.is_frozen()
    # reading still works when frozen
    assert cfg.MODEL.INPUT_SIZE == (224, 224)
    assert same_types(CN.load(CN.dump(cfg)).dict(), cfg.dict())


def test_equality_and_dict_behaviour():
    cfg = CN({"A": 1, "B": {"C": 2}})
    assert cfg == {"A": 1, "B": {"C": 2}}
    assert dict(cfg.items())["B"] == {"C": 2}
    assert cfg.get("missing") is None
    assert cfg.get("A") == 1
    assert "A" in cfg and "missing" not in cfg
    assert (cfg | {"D": 4}) == {"A": 1, "B": {"C": 2}, "D": 4}
    assert "D" not in cfg
