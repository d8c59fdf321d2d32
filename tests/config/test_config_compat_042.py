"""Behaviour kept from easycore 0.4.2, as its own test suite checks it (issue 16).

The hierarchical tests below are 0.4.2's `test/config/test_hierarchical_config.py`,
with its data files written into a temporary directory.
"""

from __future__ import annotations

import pytest

from easycore.common.config import CfgNode, ConfigError, HierarchicalCfgNode


@pytest.fixture
def hierarchy(tmp_path):
    (tmp_path / "hierarchical_config" / "folder").mkdir(parents=True)
    (tmp_path / "hierarchical_config" / "example-A.yaml").write_text(
        "__BASE__: ./folder/example-B.yaml\nA: in example-A.yaml\nB:\n  D: in example-A.yaml\n"
        "C: in example-A.yaml",
        encoding="utf-8",
    )
    (tmp_path / "hierarchical_config" / "folder" / "example-B.yaml").write_text(
        "A: in example-B.yaml\nB: \n  C: in example-B.yaml\n  D: in example-B.yaml\n"
        "E: in example-B.yaml",
        encoding="utf-8",
    )
    return tmp_path


def test_base_key_class_attribute():
    assert HierarchicalCfgNode.__BASE__ == "__BASE__"


def test_open(hierarchy):  # 0.4.2's test_open
    cfg = HierarchicalCfgNode.open(hierarchy / "hierarchical_config" / "example-A.yaml")

    assert cfg.A == "in example-A.yaml"
    assert cfg.B.C == "in example-B.yaml"
    assert cfg.B.D == "in example-A.yaml"
    assert cfg.C == "in example-A.yaml"
    assert cfg.E == "in example-B.yaml"
    assert HierarchicalCfgNode.__BASE__ not in cfg


def test_save(hierarchy):  # 0.4.2's test_save
    cfg = CfgNode()
    cfg.A = "in example-C.yaml"
    cfg.B = CfgNode()
    cfg.B.C = "in example-B.yaml"
    cfg.D = "in example-C.yaml"

    save_path = hierarchy / "example-C.yaml"
    base_cfg_path = hierarchy / "hierarchical_config" / "example-A.yaml"

    with pytest.warns(UserWarning, match="B.D"):  # ours also says B.D comes back from the base
        HierarchicalCfgNode.save(cfg, save_path, base_cfg_path)
    cfg = HierarchicalCfgNode.open(save_path)

    assert cfg.A == "in example-C.yaml"
    assert cfg.B.C == "in example-B.yaml"
    assert cfg.D == "in example-C.yaml"

    cfg = CfgNode.open(save_path)

    assert "C" not in cfg.B  # B is written, as an empty mapping


def test_a_sub_config_equal_to_the_base_is_kept_as_an_empty_mapping(tmp_path):
    (tmp_path / "base.yaml").write_text("A: 1\nB:\n  C: 2\n  D:\n    E: 3\n", encoding="utf-8")
    cfg = HierarchicalCfgNode.open(tmp_path / "base.yaml")
    cfg.A = 5
    HierarchicalCfgNode.save(cfg, tmp_path / "child.yaml", tmp_path / "base.yaml")
    saved = CfgNode.open(tmp_path / "child.yaml")
    assert saved.dict() == {"__BASE__": "base.yaml", "A": 5, "B": {"D": {}}}
    assert HierarchicalCfgNode.open(tmp_path / "child.yaml") == cfg


def test_a_missing_base_raises_file_not_found_error(tmp_path):
    (tmp_path / "child.yaml").write_text("__BASE__: missing.yaml\n", encoding="utf-8")
    with pytest.raises(FileNotFoundError) as info:
        HierarchicalCfgNode.open(tmp_path / "child.yaml")
    assert isinstance(info.value, ConfigError)


def test_saving_against_a_missing_base_raises_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        HierarchicalCfgNode.save(CfgNode({"A": 1}), tmp_path / "out.yaml", tmp_path / "nope.yaml")
    assert not (tmp_path / "out.yaml").exists()
