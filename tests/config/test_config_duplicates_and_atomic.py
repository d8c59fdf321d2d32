"""Duplicate YAML keys are refused; merge and update change all or nothing (issue 15, "also noted").

A duplicated key used to keep its last value silently, which hides a typo or a
bad merge of two files. `merge()` stopped half-way at a frozen sub-config or an
invalid key, leaving the keys before it changed.
"""

from __future__ import annotations

import re

import pytest

from easycore.common.config import CfgNode, ConfigError, ConfigKeyError, FrozenError


# ------------------------------------------------------------ duplicate keys
def test_a_duplicate_key_names_the_file_both_lines_and_the_key(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("A: 1\nB:\n  C: 2\nA: 3\n", encoding="utf-8")
    with pytest.raises(
        ConfigError, match=r"dup\.yaml, line 4, column 1: duplicate key 'A' \(first at line 1\)"
    ):
        CfgNode.open(path)


@pytest.mark.parametrize(
    "text",
    [
        "B:\n  C: 1\n  C: 2\n",  # nested
        "A: 1\n'A': 2\n",  # quoted and plain are the same key
        "A: {X: 1, X: 2}\n",  # flow mapping
        "L:\n- {X: 1, X: 2}\n",  # inside a list
        'A: 1\n"A": 2\n',
    ],
)
def test_duplicates_are_refused_wherever_they_are(text):
    with pytest.raises(ConfigError, match="duplicate key"):
        CfgNode.load(text)


def test_merge_keys_still_override_without_being_duplicates():
    cfg = CfgNode.load(
        "BASE: &base {LR: 0.1, EPOCHS: 10}\n"
        "FAST:\n  <<: *base\n  LR: 0.5\n"
        "NESTED: &nested\n  <<: *base\n  EPOCHS: 20\n"
        "AGAIN:\n  <<: [*nested, *base]\n  LR: 0.7\n"
    )
    assert cfg.FAST.dict() == {"LR": 0.5, "EPOCHS": 10}
    assert cfg.NESTED.dict() == {"LR": 0.1, "EPOCHS": 20}
    assert cfg.AGAIN.dict() == {"LR": 0.7, "EPOCHS": 20}


def test_a_duplicate_next_to_a_merge_key_is_still_refused():
    with pytest.raises(ConfigError, match="duplicate key 'LR'"):
        CfgNode.load("BASE: &base {LR: 0.1}\nFAST:\n  <<: *base\n  LR: 0.5\n  LR: 0.6\n")


# ------------------------------------------------------------ merge is atomic
def test_merge_stopped_by_a_frozen_sub_config_changes_nothing():
    cfg = CfgNode({"A": 1, "B": {"X": 1}, "C": 1})
    cfg.B.freeze()
    with pytest.raises(FrozenError):
        cfg.merge({"A": 2, "B": {"X": 2}, "C": 2})
    assert cfg.dict() == {"A": 1, "B": {"X": 1}, "C": 1}


def test_merge_stopped_by_an_invalid_key_changes_nothing():
    cfg = CfgNode({"A": 1, "B": {"X": 1}})
    with pytest.raises(ConfigKeyError, match=re.escape("B.bad-key")):
        cfg.merge({"A": 2, "B": {"X": 2, "bad-key": 3}})
    with pytest.raises(ConfigKeyError, match=re.escape("NEW.bad-key")):
        cfg.merge({"A": 2, "NEW": {"ok": 1, "bad-key": 3}})
    assert cfg.dict() == {"A": 1, "B": {"X": 1}}


def test_merge_stopped_by_a_value_that_cannot_be_copied_changes_nothing():
    class NoCopy:
        def __deepcopy__(self, memo):
            raise RuntimeError("cannot copy")

    cfg = CfgNode({"A": 1, "B": 1})
    with pytest.raises(RuntimeError):
        cfg.merge({"A": 2, "B": NoCopy()})
    assert cfg.dict() == {"A": 1, "B": 1}


def test_merge_still_merges_nested_configs_and_copies_values():
    cfg = CfgNode({"A": 1, "B": {"X": 1, "Y": 1}})
    other = CfgNode({"B": {"Y": 2, "Z": [3]}, "C": {"D": 4}})
    cfg.merge(other)
    assert cfg.dict() == {"A": 1, "B": {"X": 1, "Y": 2, "Z": [3]}, "C": {"D": 4}}
    assert cfg.B.Z is not other.B.Z and cfg.C is not other.C
    assert cfg.C._key_path == "C" and isinstance(cfg.C, CfgNode)


# ------------------------------------------------------------ update is atomic
@pytest.mark.parametrize(
    "change",
    [
        lambda c: c.update({"A": 2, "bad-key": 3}),
        lambda c: c.update({"A": 2, "NODE": {"ok": 1, "bad key": 2}}),
        lambda c: c.__ior__({"A": 2, "1x": 3}),
    ],
)
def test_update_with_an_invalid_key_changes_nothing(change):
    cfg = CfgNode({"A": 1})
    with pytest.raises(ConfigKeyError):
        change(cfg)
    assert cfg.dict() == {"A": 1} and cfg.A == 1
