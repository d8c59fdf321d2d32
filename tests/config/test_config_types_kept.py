"""Values keep their type through overrides, files and round trips (issue 15, item 16).

A string stays a string: `merge_from_list(["NAME=None"])` on a string key sets
the string "None", and a value the YAML file quotes is the string it spells.
Only unquoted scalars go through the Python-literal rule, and what `save`
writes reopens with the same values and types.
"""

from __future__ import annotations

import pytest
import yaml

from easycore.common.config import CfgNode, ConfigError


def same(a, b) -> bool:
    if type(a) is not type(b) and not (isinstance(a, dict) and isinstance(b, dict)):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


# ------------------------------------------------------------ overrides
@pytest.mark.parametrize("raw", ["None", "True", "False", "1.10", "[]", "{}", "b'x'", "3j"])
def test_a_string_key_keeps_the_string_it_is_given(raw):
    cfg = CfgNode({"NAME": "run1"})
    cfg.merge_from_list([f"NAME={raw}"])
    assert raw == cfg.NAME and type(cfg.NAME) is str


def test_a_string_key_given_none_by_pairs_keeps_the_string():
    cfg = CfgNode({"MODEL": {"NAME": "resnet"}})
    cfg.merge_from_list(["MODEL.NAME", "None"])
    assert cfg.MODEL.NAME == "None"


def test_other_keys_may_still_become_none():
    cfg = CfgNode({"WEIGHTS": "/w.pth", "LR": 0.1, "SIZE": (1, 2)})
    cfg.merge_from_list(["LR=None", "SIZE=None"])
    assert cfg.LR is None and cfg.SIZE is None
    assert cfg.WEIGHTS == "/w.pth"


def test_strings_of_a_python_dict_stay_strings():
    # easycore 0.4.2 turned these into literals; a dict given in Python is kept as given
    cfg = CfgNode({"SIZE": "(224, 224)", "N": "10", "NOTHING": "None", "NODE": {"V": "1.10"}})
    assert cfg.SIZE == "(224, 224)" and cfg.N == "10" and cfg.NOTHING == "None"
    assert cfg.NODE.V == "1.10"


# ------------------------------------------------------------ round trips
TRICKY = {
    "tuple_colon_space": ("a: b", 1),
    "tuple_hash": ("x #y", "#z"),
    "tuple_trailing_colon": ("key:",),
    "tuple_of_tuples": ((1, 2), ("a", None), [3, (4,)]),
    "tuple_with_dict": ({"a": 1, "b: c": "d"},),
    "tuple_unicode": ("Zhào", "日本"),
    "tuple_quotes": ("it's", 'say "hi"', "back\\slash", "new\nline", "\ttab"),
    "tuple_long": tuple(f"item  {i}  with  spaces" for i in range(60)),
    "set": {1, 2, 3},
    "set_of_strings": {"a: b", "#c"},
    "set_of_tuples": {(1, 2), (3, 4)},
    "bytes_colon": b"a: b #c",
    "complex_negative": complex(-1.5, -2),
    "string_version": "1.10",
    "string_none": "None",
    "string_tuple": "(1, 2)",
    "string_set": "{1, 2}",
    "string_bytes": "b'x'",
    "string_multiline_tuple": "(1,\n 2)",
    "list_of_strings": ["None", "(1, 2)", "plain", "1e5", "yes"],
}


@pytest.mark.parametrize("name", list(TRICKY))
def test_tricky_values_survive_save_and_open(name, tmp_path):
    value = TRICKY[name]
    cfg = CfgNode({"NODE": {"VALUE": value}})
    path = tmp_path / "tricky.yaml"
    cfg.save(path)
    text = path.read_text(encoding="utf-8")
    assert "!!" not in text  # no tags
    yaml.safe_load(text)  # any safe YAML reader can read it
    assert same(CfgNode.open(path).NODE.VALUE, value), text


@pytest.mark.parametrize("name", list(TRICKY))
def test_tricky_values_survive_an_ascii_only_dump(name):
    value = TRICKY[name]
    text = CfgNode.dump(CfgNode({"VALUE": value}), allow_unicode=False)
    assert text.isascii() and "!!" not in text
    assert same(CfgNode.load(text).VALUE, value), text


def test_a_set_is_written_as_an_unquoted_parenthesised_literal():
    assert CfgNode.dump(CfgNode({"S": {1, 2}})) == "S: ({1, 2})\n"


def test_values_without_a_literal_form_are_refused_naming_the_key():
    # a tuple holding inf or nan saves since issue 22 (item 20); Ellipsis has no form
    for value in [(object(),), frozenset({1}), ((1, 2), {3: object()}), (1, ...)]:
        with pytest.raises(ConfigError, match="'A'"):
            CfgNode.dump(CfgNode({"A": value}))


@pytest.mark.parametrize(
    "option", [{"default_flow_style": True}, {"default_flow_style": None}, {"canonical": True}]
)
def test_dump_options_that_would_quote_literals_are_refused(option):
    with pytest.raises(TypeError, match="not supported"):
        CfgNode.dump(CfgNode({"A": (1, 2)}), **option)


def test_default_style_still_round_trips():
    cfg = CfgNode({"A": (1, 2), "B": "(1, 2)", "C": 3, "D": "word"})
    text = CfgNode.dump(cfg, default_style='"')
    assert same(CfgNode.load(text), cfg), text
