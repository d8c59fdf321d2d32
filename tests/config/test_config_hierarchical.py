"""HierarchicalCfgNode: configs that extend a base file through ``__BASE__``."""

from __future__ import annotations

import os
import re
import warnings

import pytest
import yaml

from easycore.common.config import CfgNode, ConfigError, HierarchicalCfgNode

EXAMPLE_A = """\
__BASE__: ./example-B.yaml
A: in example-A.yaml
C: in example-A.yaml
"""

EXAMPLE_B = """\
A: in example-B.yaml
B: in example-B.yaml
"""


def write(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def example_dir(tmp_path):
    write(tmp_path / "example-A.yaml", EXAMPLE_A)
    write(tmp_path / "example-B.yaml", EXAMPLE_B)
    return tmp_path


# ------------------------------------------------------------ the documented example
def test_open_documented_example(example_dir, monkeypatch):
    monkeypatch.chdir(example_dir)
    cfg = HierarchicalCfgNode.open("./example-A.yaml")

    assert isinstance(cfg, CfgNode)
    assert str(cfg) == (
        "{'A': 'in example-A.yaml', 'B': 'in example-B.yaml', 'C': 'in example-A.yaml'}"
    )
    assert "__BASE__" not in cfg
    assert cfg.A == "in example-A.yaml"  # the file wins over its base
    assert cfg.B == "in example-B.yaml"  # inherited from the base


def test_open_a_file_without_base_is_like_cfgnode_open(example_dir):
    path = example_dir / "example-B.yaml"
    assert HierarchicalCfgNode.open(path) == CfgNode.open(path)


# ------------------------------------------------------------ where the base is looked for
def test_base_is_relative_to_the_file_not_the_cwd(tmp_path, monkeypatch):
    write(tmp_path / "configs" / "child.yaml", "__BASE__: base.yaml\nX: child\n")
    write(tmp_path / "configs" / "base.yaml", "X: base\nY: next to the file\n")
    write(tmp_path / "elsewhere" / "base.yaml", "X: cwd\nY: in the cwd\n")
    monkeypatch.chdir(tmp_path / "elsewhere")

    cfg = HierarchicalCfgNode.open(tmp_path / "configs" / "child.yaml")

    assert cfg == {"X": "child", "Y": "next to the file"}


def test_base_relative_to_the_file_in_another_directory(tmp_path, monkeypatch):
    write(tmp_path / "a" / "child.yaml", "__BASE__: ../b/base.yaml\nX: 1\n")
    write(tmp_path / "b" / "base.yaml", "X: 0\nY: 2\n")
    monkeypatch.chdir(tmp_path / "a")
    assert HierarchicalCfgNode.open("child.yaml") == {"X": 1, "Y": 2}


def test_base_falls_back_to_an_absolute_path(tmp_path):
    base = write(tmp_path / "shared" / "base.yaml", "X: 0\nY: absolute\n")
    child = write(tmp_path / "configs" / "child.yaml", f"__BASE__: {base}\nX: 1\n")
    assert os.path.isabs(str(base))
    assert HierarchicalCfgNode.open(child) == {"X": 1, "Y": "absolute"}


# ------------------------------------------------------------ chains
def test_chain_of_depth_three_merges_recursively(tmp_path):
    write(
        tmp_path / "base.yaml",
        "MODEL:\n  NAME: resnet\n  DEPTH: 50\n  HEAD:\n    DIM: 256\nSOLVER:\n  LR: 0.1\n",
    )
    write(tmp_path / "mid" / "mid.yaml", "__BASE__: ../base.yaml\nMODEL:\n  DEPTH: 101\n")
    write(
        tmp_path / "top" / "top.yaml",
        "__BASE__: ../mid/mid.yaml\nMODEL:\n  HEAD:\n    DROPOUT: 0.5\nSOLVER:\n  LR: 0.01\n",
    )

    cfg = HierarchicalCfgNode.open(tmp_path / "top" / "top.yaml")

    assert cfg.dict() == {
        "MODEL": {"NAME": "resnet", "DEPTH": 101, "HEAD": {"DIM": 256, "DROPOUT": 0.5}},
        "SOLVER": {"LR": 0.01},
    }
    assert "__BASE__" not in cfg
    with pytest.raises(AttributeError, match=r"MODEL\.HEAD\.DROPUOT.*MODEL\.HEAD\.DROPOUT"):
        _ = cfg.MODEL.HEAD.DROPUOT


def test_cycle_is_an_error_naming_the_chain(tmp_path):
    a = write(tmp_path / "a.yaml", "__BASE__: b.yaml\nX: 1\n")
    b = write(tmp_path / "b.yaml", "__BASE__: c.yaml\nX: 2\n")
    c = write(tmp_path / "c.yaml", "__BASE__: a.yaml\nX: 3\n")

    with pytest.raises(ConfigError, match="circular") as info:
        HierarchicalCfgNode.open(a)

    message = str(info.value)
    assert " -> ".join(str(p) for p in (a, b, c, a)) in message


def test_file_that_is_its_own_base(tmp_path):
    a = write(tmp_path / "self.yaml", "__BASE__: ./self.yaml\nX: 1\n")
    with pytest.raises(ConfigError, match="circular") as info:
        HierarchicalCfgNode.open(a)
    assert str(a) in str(info.value)


def test_missing_base_is_an_error_naming_the_file(tmp_path):
    child = write(tmp_path / "child.yaml", "__BASE__: missing-base.yaml\nX: 1\n")
    with pytest.raises(ConfigError) as info:
        HierarchicalCfgNode.open(child)
    message = str(info.value)
    assert str(child) in message
    assert "missing-base.yaml" in message
    assert "not found" in message


def test_missing_base_deep_in_the_chain_names_that_file(tmp_path):
    top = write(tmp_path / "top.yaml", "__BASE__: mid.yaml\n")
    mid = write(tmp_path / "mid.yaml", "__BASE__: gone.yaml\n")
    with pytest.raises(ConfigError) as info:
        HierarchicalCfgNode.open(top)
    assert str(mid) in str(info.value) and "gone.yaml" in str(info.value)


def test_base_must_be_a_path_string(tmp_path):
    child = write(tmp_path / "child.yaml", "__BASE__: [a.yaml]\n")
    with pytest.raises(ConfigError, match="__BASE__") as info:
        HierarchicalCfgNode.open(child)
    assert str(child) in str(info.value)


def test_error_in_a_base_file_names_the_base(tmp_path):
    write(tmp_path / "child.yaml", "__BASE__: base.yaml\n")
    base = write(tmp_path / "base.yaml", "A: [1,\nB: 2\n")
    with pytest.raises(ConfigError) as info:
        HierarchicalCfgNode.open(tmp_path / "child.yaml")
    assert str(base) in str(info.value)


# ------------------------------------------------------------ save
def test_save_without_base_is_like_cfg_save(tmp_path):
    cfg = CfgNode({"A": 1, "B": {"C": (1, 2)}})
    HierarchicalCfgNode.save(cfg, tmp_path / "h.yaml")
    cfg.save(tmp_path / "plain.yaml")
    assert (tmp_path / "h.yaml").read_text() == (tmp_path / "plain.yaml").read_text()


def test_save_writes_only_differences_and_the_base(example_dir):
    cfg = HierarchicalCfgNode.open(example_dir / "example-A.yaml")
    cfg.D = "new"
    out = example_dir / "example-save.yaml"

    HierarchicalCfgNode.save(cfg, out, base_cfg_path=example_dir / "example-B.yaml")

    written = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert written == {
        "__BASE__": "example-B.yaml",  # relative to the saved file by default
        "A": "in example-A.yaml",
        "C": "in example-A.yaml",
        "D": "new",
    }  # B is the same as in the base, so it is not written
    assert HierarchicalCfgNode.open(out) == cfg


def test_save_nested_differences_only(tmp_path):
    base = write(
        tmp_path / "base.yaml",
        "MODEL:\n  NAME: resnet\n  DEPTH: 50\n  SIZE: (224, 224)\nSOLVER:\n  LR: 0.1\n",
    )
    cfg = HierarchicalCfgNode.open(base)
    cfg.MODEL.DEPTH = 101
    out = tmp_path / "child.yaml"

    HierarchicalCfgNode.save(cfg, out, base_cfg_path=base)

    # an unchanged sub-config stays as an empty mapping, as in easycore 0.4.2
    assert yaml.safe_load(out.read_text()) == {
        "__BASE__": "base.yaml",
        "MODEL": {"DEPTH": 101},
        "SOLVER": {},
    }
    again = HierarchicalCfgNode.open(out)
    assert again == cfg
    assert again.MODEL.SIZE == (224, 224) and isinstance(again.MODEL.SIZE, tuple)


def test_save_treats_type_changes_as_differences(tmp_path):
    base = write(tmp_path / "base.yaml", "A: 1\nB: [1, 2]\nC: true\nD: x\n")
    cfg = CfgNode({"A": 1.0, "B": (1, 2), "C": 1, "D": "x"})
    out = tmp_path / "child.yaml"

    HierarchicalCfgNode.save(cfg, out, base_cfg_path=base)

    again = HierarchicalCfgNode.open(out)
    assert set(yaml.safe_load(out.read_text())) == {"__BASE__", "A", "B", "C"}
    for key in "ABCD":
        assert again[key] == cfg[key] and type(again[key]) is type(cfg[key])


def test_save_with_base_in_another_directory(tmp_path):
    base = write(tmp_path / "configs" / "base.yaml", "X: 0\nY: 0\n")
    cfg = CfgNode({"X": 1, "Y": 0})
    out = tmp_path / "runs" / "run1" / "config.yaml"
    out.parent.mkdir(parents=True)

    HierarchicalCfgNode.save(cfg, out, base_cfg_path=base)

    written = yaml.safe_load(out.read_text())
    assert written == {"__BASE__": os.path.join("..", "..", "configs", "base.yaml"), "X": 1}
    assert HierarchicalCfgNode.open(out) == cfg


def test_save_with_absolute_base_path(tmp_path, monkeypatch):
    base = write(tmp_path / "base.yaml", "X: 0\nY: 0\n")
    monkeypatch.chdir(tmp_path)
    cfg = CfgNode({"X": 1, "Y": 0})

    HierarchicalCfgNode.save(cfg, "child.yaml", base_cfg_path="base.yaml", base_path_relative=False)

    written = yaml.safe_load((tmp_path / "child.yaml").read_text())
    assert written["__BASE__"] == str(base)
    assert os.path.isabs(written["__BASE__"])
    assert HierarchicalCfgNode.open(tmp_path / "child.yaml") == cfg


def test_save_against_a_base_that_has_its_own_base(tmp_path):
    write(tmp_path / "root.yaml", "A: 0\nB: 0\nC: 0\n")
    mid = write(tmp_path / "mid.yaml", "__BASE__: root.yaml\nB: 1\n")
    cfg = CfgNode({"A": 0, "B": 1, "C": 2})
    out = tmp_path / "top.yaml"

    HierarchicalCfgNode.save(cfg, out, base_cfg_path=mid)

    assert yaml.safe_load(out.read_text()) == {"__BASE__": "mid.yaml", "C": 2}
    assert HierarchicalCfgNode.open(out) == cfg


def test_save_with_encoding(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("NAME: base\n", encoding="utf-16")
    cfg = CfgNode({"NAME": "Zhào"})
    out = tmp_path / "child.yaml"

    HierarchicalCfgNode.save(cfg, out, base_cfg_path=base, encoding="utf-16")

    assert "Zhào" in out.read_text(encoding="utf-16")
    assert HierarchicalCfgNode.open(out, encoding="utf-16") == cfg


def test_save_warns_about_base_keys_the_config_lacks(tmp_path):
    base = write(tmp_path / "base.yaml", "A: 1\nB: 2\nNODE:\n  X: 1\n  Y: 2\n")
    cfg = CfgNode({"A": 1, "NODE": {"X": 1}})
    out = tmp_path / "child.yaml"

    with pytest.warns(UserWarning, match=r"B, NODE\.Y|NODE\.Y, B"):
        HierarchicalCfgNode.save(cfg, out, base_cfg_path=base)

    # they come back from the base, as the warning says
    assert HierarchicalCfgNode.open(out) == {"A": 1, "B": 2, "NODE": {"X": 1, "Y": 2}}


def test_save_identical_config_writes_the_base_and_empty_sub_configs(tmp_path):
    base = write(tmp_path / "base.yaml", "A: 1\nB:\n  C: (1, 2)\n")
    cfg = HierarchicalCfgNode.open(base)
    out = tmp_path / "child.yaml"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        HierarchicalCfgNode.save(cfg, out, base_cfg_path=base)
    assert yaml.safe_load(out.read_text()) == {"__BASE__": "base.yaml", "B": {}}
    assert HierarchicalCfgNode.open(out) == cfg


def test_save_refuses_unsaveable_values_without_touching_the_file(tmp_path):
    base = write(tmp_path / "base.yaml", "A: 1\n")
    out = write(tmp_path / "child.yaml", "__BASE__: base.yaml\nA: 2\n")
    before = out.read_bytes()
    with pytest.raises(ConfigError, match=re.escape("NODE.BAD")):
        HierarchicalCfgNode.save(
            CfgNode({"A": 3, "NODE": {"BAD": object()}}), out, base_cfg_path=base
        )
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.yaml", "child.yaml"]


# ------------------------------------------------------------ issue 34, item 24
URLS = ["memory://b/x.yaml", "s3://bucket/cfg.yaml", "HTTPS://host/cfg.yaml", "file:///tmp/x.yaml"]


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize(
    "call",
    [
        lambda url: HierarchicalCfgNode.open(url),
        lambda url: CfgNode.open(url),
        lambda url: CfgNode({"A": 1}).save(url),
        lambda url: HierarchicalCfgNode.save(CfgNode({"A": 1}), url),
        lambda url: HierarchicalCfgNode.save(CfgNode({"A": 1}), "out.yaml", url),
    ],
    ids=["Hierarchical.open", "open", "save", "Hierarchical.save", "a base URL"],
)
def test_a_url_is_refused_naming_it_as_given(url, call, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        call(url)
    message = str(info.value)
    assert repr(url) in message and "local files" in message
    assert str(tmp_path) not in message  # never a path made from the working directory
    assert os.listdir(tmp_path) == []


def test_a_base_given_as_a_url_is_refused_naming_the_file_and_the_url(tmp_path):
    (tmp_path / "child.yaml").write_text("__BASE__: memory://b/base.yaml\nA: 1\n")
    with pytest.raises(ConfigError) as info:
        HierarchicalCfgNode.open(tmp_path / "child.yaml")
    message = str(info.value)
    assert "child.yaml" in message and "'memory://b/base.yaml' is a URL" in message


def test_names_that_only_look_like_a_scheme_are_local_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c:").mkdir()  # one letter: a drive, as PathManager reads it
    CfgNode({"A": 1}).save("c://x.yaml")
    assert HierarchicalCfgNode.open("c://x.yaml") == {"A": 1}
