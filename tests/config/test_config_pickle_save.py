"""Pickling (configs travel to worker processes) and atomic saves."""

from __future__ import annotations

import copy
import multiprocessing
import operator
import os
import pickle
import stat

import pytest

from easycore.common.config import CfgNode, ConfigError, HierarchicalCfgNode


class MyCfg(CfgNode):
    """A user subclass; must survive pickling as itself."""


def make_cfg() -> CfgNode:
    return CfgNode(
        {
            "MODEL": {"BACKBONE": {"DEPTH": 50, "SIZE": (224, 224)}, "NAME": "resnet"},
            "SOLVER": {"LR": 0.1, "STEPS": [10, 20]},
            "copy": "a key named like a method",
        }
    )


# ------------------------------------------------------------ pickle
@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_round_trip_keeps_attribute_access(protocol):
    cfg = make_cfg()
    again = pickle.loads(pickle.dumps(cfg, protocol=protocol))

    assert again == cfg
    assert type(again) is CfgNode and type(again.MODEL.BACKBONE) is CfgNode
    assert again.MODEL.BACKBONE.DEPTH == 50
    assert again.MODEL.BACKBONE.SIZE == (224, 224)
    assert again["copy"] == "a key named like a method" and callable(again.copy)
    with pytest.raises(AttributeError, match=r"'MODEL\.BACKBONE\.DEPT'.*DEPTH"):
        _ = again.MODEL.BACKBONE.DEPT
    again.MODEL.BACKBONE.DEPTH = 101  # still mutable, and the attribute follows
    assert again["MODEL"]["BACKBONE"]["DEPTH"] == 101
    assert cfg.MODEL.BACKBONE.DEPTH == 50


def test_pickle_a_subtree():
    cfg = make_cfg()
    sub = pickle.loads(pickle.dumps(cfg.MODEL))
    assert sub.BACKBONE.DEPTH == 50
    with pytest.raises(AttributeError, match=r"'MODEL\.BACKBONE\.DEPT'"):
        _ = sub.BACKBONE.DEPT


def test_pickle_keeps_the_subclass():
    cfg = MyCfg({"A": {"B": 1}})
    again = pickle.loads(pickle.dumps(cfg))
    assert type(again) is MyCfg
    assert again.A.B == 1


def test_shallow_copy_shares_children():
    cfg = make_cfg()
    shallow = copy.copy(cfg)
    assert shallow == cfg
    assert shallow.MODEL is cfg.MODEL
    shallow.NEW = 1
    assert "NEW" not in cfg


@pytest.mark.timeout(120)
def test_config_travels_to_a_spawned_worker_process():
    cfg = make_cfg()
    cfg.freeze()
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        depth = pool.apply(operator.attrgetter("MODEL.BACKBONE.DEPTH"), (cfg,))
        size = pool.apply(operator.attrgetter("MODEL.BACKBONE.SIZE"), (cfg,))
        back = pool.apply(copy.copy, (cfg,))  # a round trip: pickled there and back
    assert depth == 50
    assert size == (224, 224)
    assert back == cfg and back.is_frozen() and back.SOLVER.is_frozen()
    assert back.SOLVER.STEPS == [10, 20]


# ------------------------------------------------------------ atomic save
def _listing(directory) -> list[str]:
    return sorted(os.listdir(directory))


def test_unsaveable_value_leaves_the_existing_file_untouched(tmp_path):
    path = tmp_path / "config.yaml"
    make_cfg().save(path)
    before = path.read_bytes()
    listing = _listing(tmp_path)

    cfg = make_cfg()
    cfg.MODEL.BACKBONE.HOOK = object()
    with pytest.raises(ConfigError) as info:
        cfg.save(path)

    assert "'MODEL.BACKBONE.HOOK'" in str(info.value)
    assert path.read_bytes() == before
    assert _listing(tmp_path) == listing  # no temporary file left behind


def test_unsaveable_value_in_a_list_names_its_index(tmp_path):
    path = tmp_path / "config.yaml"
    cfg = make_cfg()
    cfg.SOLVER.STEPS = [10, object()]
    with pytest.raises(ConfigError, match=r"'SOLVER\.STEPS\[1\]'"):
        cfg.save(path)
    assert not path.exists()
    assert _listing(tmp_path) == []


def test_failure_while_writing_leaves_the_existing_file_untouched(tmp_path):
    path = tmp_path / "config.yaml"
    make_cfg().save(path)
    before = path.read_bytes()

    with pytest.raises(UnicodeEncodeError):
        CfgNode({"NAME": "Zhào"}).save(path, encoding="ascii")

    assert path.read_bytes() == before
    assert _listing(tmp_path) == ["config.yaml"]


def test_save_into_a_missing_directory_fails_cleanly(tmp_path):
    with pytest.raises(FileNotFoundError):
        make_cfg().save(tmp_path / "no" / "such" / "dir.yaml")
    assert _listing(tmp_path) == []


def test_successful_save_leaves_only_the_file(tmp_path):
    path = tmp_path / "config.yaml"
    for _ in range(3):
        make_cfg().save(path)
    assert _listing(tmp_path) == ["config.yaml"]
    assert CfgNode.open(path) == make_cfg()


def test_new_file_gets_the_mode_open_would_give(tmp_path):
    reference = tmp_path / "reference.yaml"
    reference.write_text("", encoding="utf-8")
    path = tmp_path / "config.yaml"
    make_cfg().save(path)
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(reference.stat().st_mode)


def test_existing_file_keeps_its_mode(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("A: 1\n", encoding="utf-8")
    path.chmod(0o640)
    make_cfg().save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert CfgNode.open(path) == make_cfg()


def test_hierarchical_save_is_atomic_too(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("A: 1\n", encoding="utf-8")
    out = tmp_path / "child.yaml"
    HierarchicalCfgNode.save(CfgNode({"A": 2}), out, base_cfg_path=base)
    before = out.read_bytes()

    with pytest.raises(ConfigError, match="'B'"):
        HierarchicalCfgNode.save(CfgNode({"A": 3, "B": object()}), out, base_cfg_path=base)

    assert out.read_bytes() == before
    assert _listing(tmp_path) == ["base.yaml", "child.yaml"]
