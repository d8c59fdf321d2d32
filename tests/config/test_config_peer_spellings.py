"""yacs's and fvcore's spellings on CfgNode mean what they mean there (issue 36, item 4).

Written for easycore in its own words; `scripts/peer_suites.py` runs the peers' own
suites against them.
"""

from __future__ import annotations

import copy
import io
import logging
import pickle

import pytest

from easycore.common.config import (
    CfgNode,
    ConfigError,
    ConfigKeyError,
    FrozenError,
    HierarchicalCfgNode,
    UnknownOverrideKeyError,
)
from easycore.common.config.lazy_copy import lazy_copy


def make() -> CfgNode:
    cfg = CfgNode()
    cfg.NUM_GPUS = 8
    cfg.TRAIN = CfgNode()
    cfg.TRAIN.LR = 0.1
    cfg.TRAIN.SCALES = (2, 4)
    cfg.MODEL = CfgNode({"TYPE": "resnet", "DEPTH": 50})
    cfg.KWARGS = CfgNode(new_allowed=True)
    cfg.KWARGS.z = 0
    cfg.KWARGS.Y = CfgNode()
    cfg.register_deprecated_key("FINAL_MSG")
    cfg.register_deprecated_key("MODEL.DILATION")
    cfg.register_renamed_key("MODEL.OLD", "MODEL.NEW", message="Move the value.")
    return cfg


# ------------------------------------------------------------ clone, defrost
def test_clone_is_a_deep_copy_that_keeps_the_class_and_the_freeze():
    cfg = make()
    cfg.freeze()
    other = cfg.clone()
    assert other == cfg and type(other) is CfgNode and other.is_frozen()
    other.defrost()
    assert not other.is_frozen() and not other.TRAIN.is_frozen()
    other.TRAIN.LR = 1.0
    assert cfg.TRAIN.LR == 0.1 and cfg.is_frozen() and cfg.TRAIN.is_frozen()


# ------------------------------------------------------------ merge_from_other_cfg
def test_merge_from_other_cfg_takes_the_keys_this_config_has():
    cfg = make()
    other = CfgNode({"TRAIN": {"LR": 0.5, "SCALES": [8]}, "MODEL": {"DEPTH": 101}})
    cfg.merge_from_other_cfg(other)
    assert cfg.TRAIN.LR == 0.5 and cfg.MODEL.DEPTH == 101
    assert cfg.TRAIN.SCALES == (8,) and type(cfg.TRAIN.SCALES) is tuple  # list -> tuple
    cfg.merge_from_other_cfg(CfgNode({"TRAIN": {"LR": 2}}))  # an int on a float key
    assert cfg.TRAIN.LR == 2.0 and type(cfg.TRAIN.LR) is float
    other.TRAIN.LR = 7.0
    assert cfg.TRAIN.LR == 2.0  # values are copied in


@pytest.mark.parametrize(
    "other, error, match",
    [
        ({"FOO": {"BAR": 1}}, KeyError, "FOO"),
        ({"MODEL": {"WIDTH": 1}}, KeyError, "MODEL.WIDTH"),
        ({"TRAIN": {"SCALES": 1}}, ValueError, "TRAIN.SCALES"),
        ({"MODEL": 1}, ValueError, "MODEL"),
        ({"NUM_GPUS": {"A": 1}}, ValueError, "NUM_GPUS"),
        ({"MODEL": {"OLD": 1}}, KeyError, "renamed to MODEL.NEW; please update your config. "
         "Note: Move the value."),
        ({"__BASE__": "x.yaml"}, ConfigError, "__BASE__"),
        ({"_BASE_": "x.yaml"}, ConfigError, "_BASE_"),
    ],
)
def test_merge_from_other_cfg_refuses_and_changes_nothing(other, error, match):
    cfg = make()
    before = cfg.clone()
    with pytest.raises(error, match=match):
        cfg.merge_from_other_cfg(CfgNode({"TRAIN": {"LR": 9.0}, **other}))
    assert cfg == before  # all or nothing: TRAIN.LR did not change either


def test_new_keys_go_where_new_allowed_says_and_deprecated_keys_are_skipped(caplog):
    cfg = make()
    with caplog.at_level(logging.WARNING, logger="easycore.common.config"):
        cfg.merge_from_other_cfg(
            CfgNode({"KWARGS": {"a": 1, "B": {"c": 2}}, "FINAL_MSG": "x", "MODEL": {"DILATION": 2}})
        )
    assert cfg.KWARGS.a == 1 and cfg.KWARGS.B.c == 2
    assert "FINAL_MSG" not in cfg and "DILATION" not in cfg.MODEL
    assert "Deprecated config key (ignoring): MODEL.DILATION" in caplog.text
    with pytest.raises(KeyError, match=r"KWARGS\.Y\.f"):  # KWARGS allows new keys, Y does not
        cfg.merge_from_other_cfg(CfgNode({"KWARGS": {"Y": {"f": 4}}}))
    assert not cfg.KWARGS.Y.is_new_allowed()
    cfg.set_new_allowed(True)  # this node and every one below it
    assert cfg.is_new_allowed() and cfg.KWARGS.Y.is_new_allowed()
    cfg.merge_from_other_cfg(CfgNode({"KWARGS": {"Y": {"f": 4}}, "EXTRA": 1}))
    assert cfg.KWARGS.Y.f == 4 and cfg.EXTRA == 1


def test_a_frozen_config_refuses_a_merge():
    cfg = make()
    cfg.freeze()
    with pytest.raises(FrozenError):
        cfg.merge_from_other_cfg(CfgNode({"TRAIN": {"LR": 1.0}}))
    with pytest.raises(FrozenError):
        cfg.TRAIN.merge_from_other_cfg(CfgNode({"LR": 1.0}))


# ------------------------------------------------------------ merge_from_list
def test_merge_from_list_skips_deprecated_keys_and_refuses_renamed_ones(caplog):
    cfg = make()
    cfg.merge_from_list(["FINAL_MSG", "x", "MODEL.DILATION", 2, "NUM_GPUS", 2])
    assert cfg.NUM_GPUS == 2 and "FINAL_MSG" not in cfg
    with pytest.raises(KeyError, match=r"renamed to MODEL\.NEW"):
        cfg.merge_from_list(["MODEL.OLD", "1"])


@pytest.mark.parametrize("key", ["MODEL.NOPE", "NOPE.X", "NOPE"])
def test_an_unknown_override_key_is_a_key_error_and_an_assertion_error(key):
    with pytest.raises(UnknownOverrideKeyError) as info:
        make().merge_from_list([key, "1"])
    assert isinstance(info.value, ConfigKeyError) and isinstance(info.value, KeyError)
    assert isinstance(info.value, AssertionError)  # what yacs raised


# ------------------------------------------------------------ the state travels
@pytest.mark.parametrize(
    "clone",
    [
        copy.deepcopy,
        lambda c: pickle.loads(pickle.dumps(c)),
        lambda c: c.clone(),
        lambda c: lazy_copy(c),
        lambda c: pickle.loads(pickle.dumps(lazy_copy(c))),
    ],
    ids=["deepcopy", "pickle", "clone", "lazy_copy", "pickled lazy_copy"],
)
def test_new_allowed_and_registered_keys_travel_with_copies(clone, caplog):
    cfg = make()
    other = clone(cfg)
    assert other.KWARGS.is_new_allowed() and not other.MODEL.is_new_allowed()
    assert other.key_is_deprecated("FINAL_MSG") and other.key_is_renamed("MODEL.OLD")
    other.register_deprecated_key("ONLY.IN.THE.COPY")
    other.KWARGS.set_new_allowed(False)
    assert not cfg.key_is_deprecated("ONLY.IN.THE.COPY")  # nothing shared that changes
    assert cfg.KWARGS.is_new_allowed()


def test_a_key_is_registered_once():
    cfg = make()
    with pytest.raises(ConfigError, match="FINAL_MSG"):
        cfg.register_deprecated_key("FINAL_MSG")
    with pytest.raises(ConfigError, match=r"MODEL\.OLD"):
        cfg.register_renamed_key("MODEL.OLD", "X")


# ------------------------------------------------------------ files
def test_merge_from_file_reads_both_base_keys_and_never_runs_code(tmp_path):
    (tmp_path / "base.yaml").write_text("TRAIN:\n  LR: 0.2\nMODEL:\n  TYPE: vgg\n")
    (tmp_path / "base2.yaml").write_text("MODEL:\n  TYPE: vit\n")
    (tmp_path / "one.yaml").write_text("_BASE_: base.yaml\nNUM_GPUS: 4\n")
    (tmp_path / "two.yaml").write_text("_BASE_: [base.yaml, base2.yaml]\n")
    (tmp_path / "ours.yaml").write_text("__BASE__: base.yaml\nMODEL:\n  DEPTH: 18\n")
    cfg = make()
    cfg.merge_from_file(tmp_path / "one.yaml")
    assert (cfg.TRAIN.LR, cfg.MODEL.TYPE, cfg.NUM_GPUS) == (0.2, "vgg", 4)
    cfg.merge_from_file(str(tmp_path / "two.yaml"))
    assert cfg.MODEL.TYPE == "vit"  # the later base wins
    cfg.merge_from_file(tmp_path / "ours.yaml")
    assert cfg.MODEL.DEPTH == 18
    marker = tmp_path / "ran"
    (tmp_path / "evil.yaml").write_text(
        f"NUM_GPUS: !!python/object/apply:os.system ['touch {marker}']\n"
    )
    with pytest.raises(ConfigError, match=r"evil\.yaml"):
        cfg.merge_from_file(tmp_path / "evil.yaml", allow_unsafe=True)
    assert not marker.exists()
    (tmp_path / "bad.yaml").write_text("MODEL:\n  NOPE: 1\n")
    with pytest.raises(KeyError, match=r"MODEL\.NOPE"):
        cfg.merge_from_file(tmp_path / "bad.yaml")


def test_load_cfg_and_dump_spelt_as_yacs_spells_them(tmp_path):
    cfg = make()
    text = cfg.dump()
    assert text == CfgNode.dump(cfg)
    assert CfgNode.load_cfg(text) == cfg
    path = tmp_path / "c.yaml"
    with open(path, "w", encoding="utf-8") as f:
        assert cfg.dump(f) is None
    with open(path, encoding="utf-8") as f:
        assert CfgNode.load_cfg(f) == cfg
    stream = io.BytesIO()
    CfgNode.dump(cfg, stream, "utf-8")  # easycore 0.4.2's classmethod spelling
    assert stream.getvalue().decode("utf-8") == text
    (tmp_path / "cfg.py").write_text("import os\ncfg = {}\n")
    with open(tmp_path / "cfg.py") as f, pytest.raises(ConfigError, match="never run code"):
        CfgNode.load_cfg(f)


# ------------------------------------------------------------ HierarchicalCfgNode
def test_a_list_of_bases_merges_in_order_and_a_shared_base_is_no_cycle(tmp_path):
    (tmp_path / "common.yaml").write_text("A: common\nB: common\nC: common\n")
    (tmp_path / "left.yaml").write_text("_BASE_: common.yaml\nB: left\n")
    (tmp_path / "right.yaml").write_text("__BASE__: common.yaml\nB: right\nC: right\n")
    (tmp_path / "top.yaml").write_text("__BASE__: [left.yaml, right.yaml]\nC: top\n")
    assert HierarchicalCfgNode.open(tmp_path / "top.yaml") == {
        "A": "common", "B": "right", "C": "top"
    }


def test_both_base_keys_in_one_file_and_cycles_through_lists_are_refused(tmp_path):
    (tmp_path / "both.yaml").write_text("__BASE__: a.yaml\n_BASE_: b.yaml\n")
    with pytest.raises(ConfigError, match="both __BASE__ and _BASE_"):
        HierarchicalCfgNode.open(tmp_path / "both.yaml")
    (tmp_path / "x.yaml").write_text("_BASE_: [ok.yaml, y.yaml]\n")
    (tmp_path / "ok.yaml").write_text("A: 1\n")
    (tmp_path / "y.yaml").write_text("__BASE__: x.yaml\n")
    with pytest.raises(ConfigError, match=r"circular __BASE__ chain: .*x.yaml -> .*y.yaml -> "):
        HierarchicalCfgNode.open(tmp_path / "x.yaml")


# ------------------------------------------------------------ where yacs refuses more
def test_merge_from_file_takes_the_yaml_types_yacs_refuses(tmp_path):
    # yacs refuses any value outside {tuple, list, str, int, float, bool, None}; easycore
    # keeps what its YAML holds (dates, sets, bytes), so a file's merge takes them too.
    import datetime

    (tmp_path / "run.yaml").write_text(
        "DAY: 2021-02-03\nTAGS: !!set {a, b}\nRAW: !!binary aGVsbG8=\n", encoding="utf-8"
    )
    cfg = CfgNode({"DAY": datetime.date(2020, 1, 1), "TAGS": {"x"}, "RAW": b"", "N": 1})
    cfg.merge_from_file(tmp_path / "run.yaml")
    day, tags = datetime.date(2021, 2, 3), {"a", "b"}
    assert (day, tags, b"hello", 1) == (cfg.DAY, cfg.TAGS, cfg.RAW, cfg.N)


def test_a_merge_keeps_objects_where_types_agree_and_refuses_a_change_of_type():
    class Net:
        pass

    cfg = CfgNode({"MODEL": None, "LR": 0.1})
    cfg.MODEL = Net()  # yacs: AssertionError; easycore: a runner's cfg carries objects
    newer = Net()
    cfg.merge_from_other_cfg({"MODEL": newer})
    assert cfg.MODEL is not newer and isinstance(cfg.MODEL, Net)  # a copy, as merges copy
    with pytest.raises(ConfigError, match=r"'LR'.*expected float, got Net"):
        cfg.merge_from_other_cfg({"LR": Net()})
    with pytest.raises(ConfigError, match="MODEL"):
        CfgNode.dump(cfg)  # what YAML cannot hold is refused when saved, by key
