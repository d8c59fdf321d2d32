"""Hostile or odd YAML read as a hostile user writes it (issue 22, items 5, 6, 18, 19, 23, 26).

Every bad value gives a `ConfigError` naming the file and line, whatever tag
it carries; a few aliases of a long string cannot blow up into gigabytes;
an explicit `!!str` is the string written; anchored lists are independent;
keys are reported as the file spells them. Deep nesting is easycore's own
refusal whatever libyaml's version (issue 23); regular files are capped at
the size streams are.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from easycore.common.config import CfgNode, ConfigError, HierarchicalCfgNode
from easycore.common.config.files import MAX_STREAM_BYTES
from easycore.common.config.yaml_io import MAX_DEPTH

MAX_EXPANDED_BYTES = 64 * 2**20  # easycore.common.config.yaml_io.MAX_EXPANDED_BYTES

TIMEOUT = 120


def run_cli(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "easycore.common.config", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


# ------------------------------------------------------------ item 6: every tag's bad value
BAD_VALUES = {
    "bool": "!!bool 'zz'",
    "bool_plain": "!!bool zz",
    "timestamp": "!!timestamp 'zzz'",
    "timestamp_date": "!!timestamp 2020-02-30",
    "int": "!!int 'zz'",
    "int_empty": "!!int ''",
    "float": "!!float 'zz'",
    "float_empty": "!!float ''",
    "binary": "!!binary 'a'",
    "omap": "!!omap [1, 2]",
    "pairs": "!!pairs [1]",
    "set": "!!set [1, 2]",
    "seq": "!!seq 'x'",
    "map": "!!map 'x'",
    "str_of_a_map": "!!str {a: 1}",
    "unknown": "!!value x",
}


@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_a_bad_value_of_any_standard_tag_is_a_config_error_with_the_line(case, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(f"OK: 1\nA: {BAD_VALUES[case]}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.yaml, line 2, column \d+: "):
        CfgNode.open(path)


@pytest.mark.parametrize("case", ["bool", "timestamp", "float_empty"])
def test_a_bad_tagged_value_is_a_config_error_in_a_list_and_as_a_key(case):
    with pytest.raises(ConfigError, match=r"line 3"):
        CfgNode.load(f"A: 1\nL:\n  - {BAD_VALUES[case]}\n")
    with pytest.raises(ConfigError, match=r"line 2"):
        CfgNode.load(f"A: 1\nB: {{{BAD_VALUES[case]}: 1}}\n")


@pytest.mark.parametrize("case", ["bool", "timestamp", "int_empty"])
def test_cli_prints_error_for_a_bad_tagged_value_and_exits_2(case, tmp_path):
    (tmp_path / "bad.yaml").write_text(f"A: {BAD_VALUES[case]}\n", encoding="utf-8")
    result = run_cli("bad.yaml", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and "bad.yaml, line 1, column" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_good_tagged_values_still_load():
    cfg = CfgNode.load(
        "A: !!bool yes\nB: !!timestamp 2001-12-14\nC: !!binary aGk=\nD: !!float 1\n"
        "E: !!set {a, b}\nF: !!omap [x: 1]\n"
    )
    assert cfg.A is True and str(cfg.B) == "2001-12-14" and cfg.C == b"hi"
    assert cfg.D == 1.0 and {"a", "b"} == cfg.E and cfg.F == [("x", 1)]


# ------------------------------------------------------------ item 18: explicit !!str
@pytest.mark.parametrize(
    "text, expected",
    [
        ("!!str 1", "1"),
        ("!!str None", "None"),
        ("!!str (1, 2)", "(1, 2)"),
        ("!!str True", "True"),
        ("&a !!str (3,)", "(3,)"),
        ("!!str &a (1,)", "(1,)"),
        ("!<tag:yaml.org,2002:str> 2.5", "2.5"),
    ],
)
def test_an_explicit_str_tag_gives_the_string_written(text, expected):
    assert expected == CfgNode.load(f"A: {text}\n").A


def test_an_explicit_str_tag_is_honoured_after_a_byte_order_mark_and_in_lists():
    cfg = CfgNode.load("\ufeffA: !!str 1\nL:\n  - !!str (1, 2)\n  - (1, 2)\n")
    assert cfg.A == "1" and cfg.L == ["(1, 2)", (1, 2)]


def test_untagged_literals_and_anchors_keep_their_meaning():
    cfg = CfgNode.load("A: &a (1, 2)\nB: *a\nC: None\nD: '(1, 2)'\n")
    assert cfg.A == (1, 2) and cfg.B == (1, 2) and cfg.C is None and cfg.D == "(1, 2)"


# ------------------------------------------------------------ item 19: a file that opens saves
@pytest.mark.parametrize(
    "value",
    ["...", "(1, ...)", "!!omap [a: 1]", "!!set {a, b}", "!!binary aGk=", "(1e400,)", "x ... y"],
)
def test_a_file_that_opens_saves_and_reopens_the_same(value, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(f"A: {value}\n", encoding="utf-8")
    cfg = CfgNode.open(path)
    cfg.save(tmp_path / "again.yaml")
    assert CfgNode.open(tmp_path / "again.yaml") == cfg


def test_an_unquoted_ellipsis_is_the_text():
    assert CfgNode.load("A: ...x\nB: (1, ...)\n") == {"A": "...x", "B": "(1, ...)"}


# ------------------------------------------------------------ item 23: anchored lists
def test_an_anchored_list_under_two_keys_gives_two_lists():
    cfg = CfgNode.load("a: &x [1, 2]\nb: *x\n")
    cfg.a.append(3)
    assert cfg.b == [1, 2] and cfg.a == [1, 2, 3]


def test_lists_inside_an_anchored_mapping_and_sets_are_independent_too():
    cfg = CfgNode.load(
        "a: &m {L: [1], S: !!set {x}}\nb: *m\nc: &l [[1], {k: [2]}]\nd: *l\nT: &t ([1],)\nU: *t\n"
    )
    cfg.a.L.append(2)
    cfg.a.S.add("y")
    cfg.c[0].append(9)
    cfg.c[1]["k"].append(9)
    cfg.T[0].append(9)
    assert cfg.b.L == [1] and {"x"} == cfg.b.S
    assert cfg.d == [[1], {"k": [2]}] and cfg.U == ([1],)


# ------------------------------------------------------------ item 5: alias byte bomb
def byte_bomb(string_bytes: int, aliases: int) -> str:
    return f"a: &a {'x' * string_bytes}\nb: [{', '.join(['*a'] * aliases)}]\n"


def test_aliases_of_a_long_string_are_refused_by_their_expanded_bytes(tmp_path):
    # 1,001 nodes and a 75 KB file, but ~75 MB of text once dumped or printed
    text = byte_bomb(75_000, 1_000)
    assert len(text) < 100_000 and MAX_EXPANDED_BYTES < 75_000 * 1_000
    path = tmp_path / "bomb.yaml"
    path.write_text(text, encoding="utf-8")
    expected = r"bomb\.yaml, line \d+: aliases expand to more than 64 MiB"
    with pytest.raises(ConfigError, match=expected):
        CfgNode.open(path)
    with pytest.raises(ConfigError, match="MiB of text"):
        CfgNode.load(text)
    with pytest.raises(ConfigError, match="MiB of text"):
        HierarchicalCfgNode.open(path)
    result = run_cli("bomb.yaml", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.startswith("error: ")
    assert "MiB of text" in result.stderr and result.stdout == ""


def test_aliases_in_mapping_keys_and_nested_lists_count_their_bytes():
    text = (
        f"a: &a {'y' * 40_000}\n"
        "l1: &l1 [" + ", ".join(["*a"] * 40) + "]\n"
        "l2: [" + ", ".join(["*l1"] * 45) + "]\n"
    )
    with pytest.raises(ConfigError, match="MiB of text"):
        CfgNode.load(text)


def test_a_few_aliases_of_a_long_string_still_load():
    cfg = CfgNode.load(byte_bomb(100_000, 10))
    assert len(cfg.b) == 10 and cfg.b[9] == cfg.a


# ------------------------------------------------------------ item 26: keys as written
@pytest.mark.parametrize(
    "key, kind", [("NO", "bool"), ("on", "bool"), ("yes", "bool"), ("1", "int"), ("~", "null")]
)
def test_a_key_yaml_reads_as_another_type_is_reported_as_written_with_its_line(key, kind):
    with pytest.raises(ConfigError) as err:
        CfgNode.load(f"MODEL:\n  A: 1\n  {key}: 2\n")
    message = str(err.value)
    assert f"<string>, line 3, column 3: invalid config key 'MODEL.{key}'" in message
    assert f"YAML reads it as a {kind}" in message and "quote it" in message
    assert "False" not in message and "True" not in message


def test_a_quoted_yaml_keyword_is_a_valid_key():
    assert CfgNode.load("MODEL:\n  'NO': 1\n  \"on\": 2\n").MODEL == {"NO": 1, "on": 2}


def test_an_invalid_key_reports_its_line_and_full_path():
    with pytest.raises(ConfigError, match=r"line 4, column 5: invalid config key 'A.B.my-key'"):
        CfgNode.load("X: 1\nA:\n  B:\n    my-key: 2\n")


def test_non_identifier_keys_inside_lists_are_still_plain_dicts():
    assert CfgNode.load("L:\n  - {2: a, off: b}\n").L == [{2: "a", False: "b"}]


# ------------------------------------------------------------ issue 23: deep nesting
@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1_001, 1_500, 20_000])
def test_deep_flow_nesting_is_easycores_refusal_whatever_libyaml_does(depth, tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("A: 1\nB: " + "[" * depth + "]" * depth + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        CfgNode.open(path)
    message = str(err.value)
    assert message.startswith(f"{path}, line 2: nested more than {MAX_DEPTH} levels deep")
    assert "exceeded" not in message  # libyaml's own wording never shows


def test_libyamls_own_depth_refusal_becomes_easycores(tmp_path):
    # Whatever the installed libyaml: its refusal, if it makes one, is translated.
    from easycore.common.config import yaml_dialect

    error = yaml.MarkedYAMLError(
        problem="exceeded maximum nesting depth",
        problem_mark=yaml.Mark("x", 0, 6, 2, None, None),
    )
    assert yaml_dialect._describe(error, "deep.yaml") == (
        f"deep.yaml, line 7: nested more than {MAX_DEPTH} levels deep; refusing to load"
    )


# ------------------------------------------------------------ "also seen": file size cap
def test_a_regular_file_over_the_cap_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as f:
        f.truncate(MAX_STREAM_BYTES + 1)  # sparse: no disk used
    expected = r"huge\.yaml: a file of 67,108,865 bytes, more than 64 MiB"
    with pytest.raises(ConfigError, match=expected):
        CfgNode.open(path)
    result = run_cli("huge.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "more than 64 MiB" in result.stderr


def test_a_file_object_over_the_cap_is_refused(tmp_path):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as f:
        f.truncate(MAX_STREAM_BYTES + 1)
    with open(path, "rb") as f, pytest.raises(ConfigError, match="more than 64 MiB"):
        CfgNode.open(f)


def test_sets_of_numbers_are_not_taken_for_config_keys():
    cfg = CfgNode.load("S: !!set {1, 2}\nM:\n  T: !!set\n    ? 3\n")
    assert {1, 2} == cfg.S and {3} == cfg.M.T
