"""Command-line style overrides: ``merge_from_list``."""

from __future__ import annotations

import re

import pytest

from easycore.common.config import CfgNode, ConfigError, ConfigKeyError


def make_cfg() -> CfgNode:
    return CfgNode(
        {
            "MODEL": {
                "INPUT_SIZE": (224, 224),
                "IN_FEATURES": ["res3", "res4", "res5"],
                "NUM_CLASSES": 100,
                "PRETRAINED": True,
                "WEIGHTS": None,
            },
            "SOLVER": {"LR": 0.001, "STEPS": [10, 20]},
            "NAME": "run0",
        }
    )


# ------------------------------------------------------------ the two forms
def test_key_value_pairs():
    cfg = make_cfg()
    cfg.merge_from_list(["SOLVER.LR", "0.1", "NAME", "run1"])
    assert cfg.SOLVER.LR == 0.1 and type(cfg.SOLVER.LR) is float
    assert cfg.NAME == "run1"
    assert cfg.MODEL.NUM_CLASSES == 100  # untouched


def test_key_equals_value_items():
    cfg = make_cfg()
    cfg.merge_from_list(["SOLVER.LR=0.1", "NAME=run1"])
    assert cfg.SOLVER.LR == 0.1
    assert cfg.NAME == "run1"


def test_any_iterable_of_overrides():
    cfg = make_cfg()
    cfg.merge_from_list(item for item in ("SOLVER.LR=0.5",))
    assert cfg.SOLVER.LR == 0.5
    cfg.merge_from_list(("NAME", "run2"))
    assert cfg.NAME == "run2"
    cfg.merge_from_list([])
    assert cfg == make_cfg() | {"SOLVER": cfg.SOLVER, "NAME": "run2"}


def test_value_may_contain_equals_signs():
    cfg = make_cfg()
    cfg.merge_from_list(["NAME=a=b"])
    assert cfg.NAME == "a=b"
    cfg.merge_from_list(["NAME", "c=d"])
    assert cfg.NAME == "c=d"


def test_odd_list_of_pairs_is_refused():
    cfg = make_cfg()
    with pytest.raises(ConfigError, match="odd"):
        cfg.merge_from_list(["SOLVER.LR", "0.1", "NAME"])
    assert cfg == make_cfg()


def test_later_overrides_win():
    cfg = make_cfg()
    cfg.merge_from_list(["NAME=a", "NAME=b"])
    assert cfg.NAME == "b"


# ------------------------------------------------------------ literal parsing
@pytest.mark.parametrize(
    ("key", "raw", "expected"),
    [
        ("MODEL.INPUT_SIZE", "(320, 320)", (320, 320)),
        ("MODEL.IN_FEATURES", "['res4', 'res5']", ["res4", "res5"]),
        ("MODEL.NUM_CLASSES", "10", 10),
        ("MODEL.NUM_CLASSES", "-1", -1),
        ("MODEL.PRETRAINED", "False", False),
        ("SOLVER.LR", "1e-4", 1e-4),
        ("SOLVER.STEPS", "[]", []),
    ],
)
def test_values_are_parsed_as_python_literals(key, raw, expected):
    cfg = make_cfg()
    cfg.merge_from_list([key, raw])
    node, leaf = cfg, key
    while "." in leaf:
        head, leaf = leaf.split(".", 1)
        node = node[head]
    assert node[leaf] == expected and type(node[leaf]) is type(expected)


def test_none_value_may_become_anything_and_anything_may_become_none():
    cfg = make_cfg()
    cfg.merge_from_list(["MODEL.WEIGHTS", "'/path/to/weights.pth'"])
    assert cfg.MODEL.WEIGHTS == "/path/to/weights.pth"
    cfg.merge_from_list(["MODEL.NUM_CLASSES=None"])
    assert cfg.MODEL.NUM_CLASSES is None


def test_override_never_evaluates_code(tmp_path):
    marker = tmp_path / "ran"
    cfg = make_cfg()
    cfg.merge_from_list(["NAME", f"__import__('pathlib').Path({str(marker)!r}).touch()"])
    assert isinstance(cfg.NAME, str)
    assert not marker.exists()


# ------------------------------------------------------------ type coercion
def test_int_becomes_float_on_a_float_key():
    cfg = make_cfg()
    cfg.merge_from_list(["SOLVER.LR=1"])
    assert cfg.SOLVER.LR == 1.0 and type(cfg.SOLVER.LR) is float


def test_list_and_tuple_convert_to_the_existing_type():
    cfg = make_cfg()
    cfg.merge_from_list(["MODEL.INPUT_SIZE=[320, 320]", "MODEL.IN_FEATURES=('res4',)"])
    assert cfg.MODEL.INPUT_SIZE == (320, 320) and type(cfg.MODEL.INPUT_SIZE) is tuple
    assert cfg.MODEL.IN_FEATURES == ["res4"] and type(cfg.MODEL.IN_FEATURES) is list


@pytest.mark.parametrize("raw", ["123", "(1, 2)", "True", "0.5", "[1]", "plain", "a b"])
def test_string_keys_keep_the_raw_string(raw):
    cfg = make_cfg()
    cfg.merge_from_list([f"NAME={raw}"])
    assert raw == cfg.NAME and type(cfg.NAME) is str


def test_a_quoted_string_literal_gives_the_string_it_spells():
    cfg = make_cfg()
    cfg.merge_from_list(["NAME='run 7'"])
    assert cfg.NAME == "run 7"


@pytest.mark.parametrize(
    ("key", "raw", "expected_type"),
    [
        ("MODEL.NUM_CLASSES", "0.5", "int"),
        ("MODEL.NUM_CLASSES", "abc", "int"),
        ("MODEL.NUM_CLASSES", "True", "int"),
        ("MODEL.PRETRAINED", "1", "bool"),
        ("MODEL.INPUT_SIZE", "224", "tuple"),
        ("MODEL.IN_FEATURES", "res4", "list"),
        ("SOLVER.LR", "fast", "float"),
        ("SOLVER.LR", "True", "float"),
        ("SOLVER", "1", "CfgNode"),
    ],
)
def test_other_type_changes_are_refused_naming_the_key(key, raw, expected_type):
    cfg = make_cfg()
    with pytest.raises(ConfigError) as info:
        cfg.merge_from_list([key, raw])
    message = str(info.value)
    assert repr(key) in message
    assert repr(raw) in message
    assert f"expected {expected_type}" in message
    assert cfg == make_cfg()


# ------------------------------------------------------------ unknown keys
def test_unknown_leaf_key_is_refused_with_a_suggestion():
    cfg = make_cfg()
    with pytest.raises(ConfigKeyError) as info:
        cfg.merge_from_list(["SOLVER.LRR", "0.1"])
    assert str(info.value) == "config has no key 'SOLVER.LRR'; did you mean 'SOLVER.LR'?"
    assert "LRR" not in cfg.SOLVER


def test_unknown_parent_key_is_refused_with_a_suggestion():
    cfg = make_cfg()
    with pytest.raises(ConfigKeyError, match=r"'SOLVR'.*did you mean 'SOLVER'\?"):
        cfg.merge_from_list(["SOLVR.LR=0.1"])
    assert "SOLVR" not in cfg


def test_allow_new_adds_keys_and_parent_nodes():
    cfg = make_cfg()
    cfg.merge_from_list(
        ["SOLVER.MOMENTUM=0.9", "DATA.LOADER.WORKERS=4", "DATA.LOADER.NAME=coco"], allow_new=True
    )
    assert cfg.SOLVER.MOMENTUM == 0.9
    assert isinstance(cfg.DATA, CfgNode) and isinstance(cfg.DATA.LOADER, CfgNode)
    assert cfg.DATA.LOADER == {"WORKERS": 4, "NAME": "coco"}
    with pytest.raises(AttributeError, match=r"'DATA\.LOADER\.WORKER'.*'DATA\.LOADER\.WORKERS'"):
        _ = cfg.DATA.LOADER.WORKER
    # existing keys still keep their types
    with pytest.raises(ConfigError, match=re.escape("SOLVER.LR")):
        cfg.merge_from_list(["SOLVER.LR=fast"], allow_new=True)


def test_allow_new_still_checks_key_names():
    cfg = make_cfg()
    with pytest.raises(ConfigKeyError, match=r"SOLVER\.bad-key"):
        cfg.merge_from_list(["SOLVER.bad-key=1"], allow_new=True)
    with pytest.raises(ConfigKeyError, match="identifier"):
        cfg.merge_from_list(["SOLVER..LR=1"], allow_new=True)


def test_a_value_is_not_a_node():
    cfg = make_cfg()
    with pytest.raises(ConfigKeyError, match=r"'NAME' is a value"):
        cfg.merge_from_list(["NAME.FIRST=x"], allow_new=True)
    assert cfg.NAME == "run0"


def test_override_on_a_child_node_names_the_full_path():
    cfg = make_cfg()
    with pytest.raises(ConfigKeyError, match=r"'MODEL\.NUM_CLASES'.*'MODEL\.NUM_CLASSES'"):
        cfg.MODEL.merge_from_list(["NUM_CLASES=1"])
    cfg.MODEL.merge_from_list(["NUM_CLASSES=1"])
    assert cfg.MODEL.NUM_CLASSES == 1


# ------------------------------------------------------------ issue 22, item 8
def make_cfg_holding_live_objects(tmp_path):
    import socket
    import subprocess
    import sys
    import threading

    lock = threading.Lock()
    sock = socket.socket()
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=60)
    cfg = CfgNode(
        {"RUNTIME": {"LOCK": lock, "SOCKET": sock, "PROC": process}, "SOLVER": {"LR": 0.1}},
        copy=False,
    )
    return cfg, (lock, sock, process)


def test_merge_from_list_works_on_a_config_holding_a_lock_a_process_and_a_socket(tmp_path):
    cfg, (lock, sock, process) = make_cfg_holding_live_objects(tmp_path)
    try:
        cfg.merge_from_list(["SOLVER.LR=0.5", "RUNTIME.NAME=x"], allow_new=True)
        assert cfg.SOLVER.LR == 0.5 and cfg.RUNTIME.NAME == "x"
        assert cfg.RUNTIME.LOCK is lock and cfg.RUNTIME.SOCKET is sock
        assert cfg.RUNTIME.PROC is process
    finally:
        sock.close()


def test_a_failing_override_beside_live_objects_changes_nothing(tmp_path):
    cfg, (lock, sock, _) = make_cfg_holding_live_objects(tmp_path)
    try:
        with pytest.raises(ConfigError):
            cfg.merge_from_list(
                ["SOLVER.LR=0.5", "RUNTIME.NAME=x", "SOLVER.LR=word"], allow_new=True
            )
        assert cfg.SOLVER == {"LR": 0.1} and "NAME" not in cfg.RUNTIME
        assert cfg.RUNTIME.LOCK is lock
    finally:
        sock.close()


def test_the_rehearsal_leaves_nodes_lists_and_key_paths_untouched():
    cfg = make_cfg()
    model, steps = cfg.MODEL, cfg.SOLVER.STEPS
    with pytest.raises(ConfigKeyError):
        cfg.merge_from_list(["MODEL.NUM_CLASSES=5", "NEW.A.B=1", "SOLVER.NOPE=1"])
    assert cfg == make_cfg() and cfg.MODEL is model and cfg.SOLVER.STEPS is steps
    cfg.merge_from_list(["NEW.A.B=1", "NEW.A.C=2", "MODEL.NUM_CLASSES=5"], allow_new=True)
    assert cfg.MODEL is model and cfg.NEW.A == {"B": 1, "C": 2}
    with pytest.raises(ConfigKeyError, match=re.escape("'NEW.A.Z'")):
        cfg.NEW.A["Z"]  # the key path of a node made by an override


def test_the_rehearsal_respects_a_frozen_sub_config():
    from easycore.common.config import FrozenError

    cfg = make_cfg()
    cfg.SOLVER.freeze()
    with pytest.raises(FrozenError):
        cfg.merge_from_list(["MODEL.NUM_CLASSES=5", "SOLVER.LR=1.0"])
    assert cfg == make_cfg()


# ------------------------------------------------------------ issue 34, item 16
@pytest.mark.parametrize(
    "overrides, entry",
    [
        ([2, "A"], "entry 0 is 2 (int)"),
        (["A", "1", None, "2"], "entry 2 is None (NoneType)"),
        ([("A",), "1"], "entry 0 is ('A',) (tuple)"),
        ([b"A", "1"], "entry 0 is b'A' (bytes)"),
    ],
)
def test_a_key_that_is_not_a_string_is_named_with_what_was_expected(overrides, entry):
    cfg = CfgNode({"A": 1})
    with pytest.raises(ConfigError, match=re.escape(entry) + ".*a key is expected"):
        cfg.merge_from_list(overrides)
    assert cfg == {"A": 1}


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["A", 2], {"A": 2, "B": 0.5, "C": (1,), "S": "s"}),
        (["B", 2], {"A": 1, "B": 2.0, "C": (1,), "S": "s"}),  # int on a float key
        (["C", [3, 4]], {"A": 1, "B": 0.5, "C": (3, 4), "S": "s"}),  # kept a tuple
        (["A", None], {"A": None, "B": 0.5, "C": (1,), "S": "s"}),
    ],
)
def test_a_value_given_as_an_object_is_that_object_as_yacs_takes_it(overrides, expected):
    cfg = CfgNode({"A": 1, "B": 0.5, "C": (1,), "S": "s"})
    cfg.merge_from_list(overrides)
    assert cfg == expected and type(cfg.B) is float


@pytest.mark.parametrize("value", [2, 2.5, [1]])
def test_an_object_value_of_the_wrong_type_is_refused_naming_the_key(value):
    cfg = CfgNode({"S": "text"})
    with pytest.raises(ConfigError, match=r"'S'.*expected str"):
        cfg.merge_from_list(["S", value])
    assert cfg.S == "text"
