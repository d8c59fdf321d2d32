"""Safe YAML: config files never run code, and what is saved opens unchanged.

The original loaded configs with ``yaml.Loader`` (so a config file could run
any command) and saved tuples with ``!!python/tuple`` tags. Here unsafe tags
are refused with an error naming the file and line, alias bombs are refused
before they expand, and tuples, sets and literal-looking strings survive a
save/open round trip without any tag.
"""

from __future__ import annotations

import datetime
import re

import pytest
import yaml

from easycore.common.config import CfgNode, ConfigError, HierarchicalCfgNode


def same_types(a, b) -> bool:
    if type(a) is not type(b) and not (isinstance(a, dict) and isinstance(b, dict)):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_types(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_types(x, y) for x, y in zip(a, b))
    return a == b


# ------------------------------------------------------------ the documented literal rule
def test_unquoted_python_literals_become_values():
    cfg = CfgNode.load(
        "SIZE: (224, 224)\n"
        "SET_CALL: set()\n"
        "BYTES: b'raw'\n"
        "COMPLEX: 3j\n"
        "FLAG: True\n"
        "NONE: None\n"
        "SCI: 1e-3\n"
        "WORD: res3\n"
        "NOT_LITERAL: (224, 224\n"
    )
    assert cfg.SIZE == (224, 224) and type(cfg.SIZE) is tuple
    assert set() == cfg.SET_CALL and cfg.BYTES == b"raw" and cfg.COMPLEX == 3j
    assert cfg.FLAG is True
    assert cfg.NONE is None  # Python's None, unquoted, as YAML's null is
    assert cfg.SCI == 0.001  # PyYAML reads "1e-3" as a string; the literal rule makes it a float
    assert cfg.WORD == "res3"
    assert cfg.NOT_LITERAL == "(224, 224"


def test_quoted_values_are_the_strings_they_spell():
    # issue 15, item 16: a value the YAML file quotes is a string the user meant
    cfg = CfgNode.load(
        "VERSION: '1.10'\n"
        "QUOTED: '(1, 2)'\n"
        'DOUBLE: "(1, 2)"\n'
        "LIST: '[1, 2]'\n"
        "DICT: \"{'a': 1}\"\n"
        "FLAG: 'True'\n"
        "NONE: 'None'\n"
        "NUM: '123'\n"
        "BLOCK: |\n  (1, 2)\n"
    )
    assert cfg.VERSION == "1.10"
    assert cfg.QUOTED == cfg.DOUBLE == "(1, 2)"
    assert cfg.LIST == "[1, 2]" and cfg.DICT == "{'a': 1}"
    assert cfg.FLAG == "True" and cfg.NONE == "None" and cfg.NUM == "123"
    assert cfg.BLOCK == "(1, 2)\n"


def test_literal_strings_inside_lists_are_decoded_when_unquoted():
    cfg = CfgNode.load("FLOW: [1.5, '(3, 4)', plain]\nBLOCK:\n- (5, 6)\n- '(7, 8)'\n")
    assert cfg.FLOW == [1.5, "(3, 4)", "plain"]
    assert cfg.BLOCK == [(5, 6), "(7, 8)"]  # in a flow list, "," would split a tuple


def test_keys_are_never_decoded_as_literals():
    cfg = CfgNode.load("None: 1\nTrue_: 2\n")
    assert cfg["None"] == 1 and cfg.True_ == 2


def test_literal_decoding_never_evaluates_code(tmp_path):
    marker = tmp_path / "ran"
    cfg = CfgNode.load(f"A: __import__('pathlib').Path({str(marker)!r}).touch()\nB: 1 + 1\n")
    assert isinstance(cfg.A, str)
    assert not marker.exists()
    assert cfg.B == "1 + 1"  # only literals, no arithmetic


# ------------------------------------------------------------ unsafe tags
def _unsafe_documents(marker):
    m = str(marker)
    return {
        "object/apply:os.system": f"A: 1\nB: !!python/object/apply:os.system ['touch {m}']\n",
        "object/apply:builtins.open": (
            f"A: 1\nB: !!python/object/apply:builtins.open ['{m}', 'w']\n"
        ),
        "object/new:subprocess.Popen": (
            f"A: 1\nB: !!python/object/new:subprocess.Popen [['touch', '{m}']]\n"
        ),
        "name:os.system": "A: 1\nB: !!python/name:os.system ''\n",
        "module:os": "A: 1\nB: !!python/module:os ''\n",
        "object:argparse.Namespace": "A: 1\nB: !!python/object:argparse.Namespace {x: 1}\n",
        "tuple": "A: 1\nB: !!python/tuple [1, 2]\n",
    }


UNSAFE_KINDS = list(_unsafe_documents("x"))


@pytest.mark.parametrize("kind", UNSAFE_KINDS)
def test_unsafe_tag_in_a_file_is_refused_naming_file_and_line(kind, tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.yaml"
    path.write_text(_unsafe_documents(marker)[kind], encoding="utf-8")

    with pytest.raises(ConfigError) as info:
        CfgNode.open(path)

    message = str(info.value)
    assert str(path) in message
    assert "line 2" in message
    assert "python/" in message
    assert not marker.exists()  # nothing ran


@pytest.mark.parametrize("kind", UNSAFE_KINDS)
def test_unsafe_tag_in_a_string_is_refused(kind, tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(ConfigError, match=r"<string>, line 2"):
        CfgNode.load(_unsafe_documents(marker)[kind])
    assert not marker.exists()


def test_unsafe_tag_from_a_file_object_names_the_file(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.yaml"
    path.write_text(_unsafe_documents(marker)["object/apply:os.system"], encoding="utf-8")
    with open(path, encoding="utf-8") as f, pytest.raises(ConfigError, match=r"evil\.yaml, line 2"):
        CfgNode.open(f)
    assert not marker.exists()


def test_unsafe_tag_in_a_base_file_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    (tmp_path / "child.yaml").write_text("__BASE__: base.yaml\nA: 2\n", encoding="utf-8")
    base = tmp_path / "base.yaml"
    base.write_text(_unsafe_documents(marker)["object/apply:os.system"], encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        HierarchicalCfgNode.open(tmp_path / "child.yaml")
    assert f"{base}, line 2" in str(info.value)
    assert not marker.exists()


def test_unknown_local_tag_is_refused():
    with pytest.raises(ConfigError, match="line 1"):
        CfgNode.load("A: !custom 1\n")


def test_standard_yaml_tags_still_work():
    cfg = CfgNode.load("A: !!str 123\nB: !!float 1\nC: !!int '7'\n")
    # an explicit !!str is the string written, as a quoted scalar is (issue 22, item 18)
    assert cfg.A == "123"
    assert cfg.B == 1.0 and type(cfg.B) is float
    assert cfg.C == 7


# ------------------------------------------------------------ round trips without tags
ROUND_TRIP_VALUES = {
    "tuple": (224, 224),
    "empty_tuple": (),
    "one_tuple": (1,),
    "nested_tuple": ((1, 2), ("a", None), [3]),
    "set": {1, 2, 3},
    "empty_set": set(),
    "complex": 1 + 2j,
    "imaginary": 3j,
    "bytes": b"\x00raw",
    "str_int": "123",
    "str_float": "0.5",
    "str_negative": "-3",
    "str_sci": "1e5",
    "str_tuple": "(1, 2)",
    "str_list": "[1, 2]",
    "str_dict": "{'a': 1}",
    "str_true": "True",
    "str_none": "None",
    "str_quoted": "'quoted'",
    "str_double_quoted": '"x"',
    "str_yaml_bool": "yes",
    "str_yaml_null": "null",
    "str_tilde": "~",
    "str_empty": "",
    "str_set_call": "set()",
    "str_word": "res3",
    "str_space": " (1, 2)",
    "str_multiline": "line one\nline two",
    "str_bang": "!!python/tuple",
    "int": 7,
    "big_int": 2**70,
    "float": 0.1,
    "float_int_valued": 2.0,
    "inf": float("inf"),
    "date": datetime.date(2024, 2, 29),
    "datetime": datetime.datetime(2024, 2, 29, 23, 59, 58, 123456),
    "bool": False,
    "none": None,
    "list_of_mixed": [1, "2", (3,), "(4,)", 5.0, None, True],
    "list_of_dicts": [{"A": (1, 2)}, {"B": "3"}],
}


@pytest.mark.parametrize("name", list(ROUND_TRIP_VALUES))
def test_value_survives_save_and_open_without_tags(name, tmp_path):
    value = ROUND_TRIP_VALUES[name]
    cfg = CfgNode({"NODE": {"VALUE": value}})
    path = tmp_path / "roundtrip.yaml"

    cfg.save(path)
    text = path.read_text(encoding="utf-8")
    again = CfgNode.open(path)

    assert "!!" not in text.replace("'!!python/tuple'", "")  # no tag, only the string itself
    assert "!python" not in text.replace("!!python/tuple", "")
    yaml.safe_load(text)  # any safe YAML reader can read it
    assert same_types(again.NODE.VALUE, value), (again.NODE.VALUE, value, text)


def test_all_round_trip_values_at_once(tmp_path):
    cfg = CfgNode({"VALUES": dict(ROUND_TRIP_VALUES)})
    text = CfgNode.dump(cfg)
    assert "!!python" not in text.replace("'!!python/tuple'", "")
    assert same_types(CfgNode.load(text).dict(), cfg.dict())


def test_every_safe_yaml_type_that_opens_also_saves(tmp_path):
    path = tmp_path / "types.yaml"
    path.write_text(
        "DATE: 2024-01-01\n"
        "STAMP: 2024-01-01 10:00:00\n"
        "AWARE: 2024-01-01 10:00:00+01:00\n"
        "BINARY: !!binary aGVsbG8=\n"
        "SET: !!set {a, b}\n"
        "NOTHING: ~\n",
        encoding="utf-8",
    )
    cfg = CfgNode.open(path)
    assert datetime.date(2024, 1, 1) == cfg.DATE
    assert datetime.datetime(2024, 1, 1, 10, 0) == cfg.STAMP
    assert cfg.AWARE.utcoffset() == datetime.timedelta(hours=1)
    assert cfg.BINARY == b"hello" and {"a", "b"} == cfg.SET

    cfg.save(tmp_path / "saved.yaml")
    text = (tmp_path / "saved.yaml").read_text(encoding="utf-8")
    assert "!!" not in text
    assert same_types(CfgNode.open(tmp_path / "saved.yaml").dict(), cfg.dict())


def test_saved_tuple_is_written_as_the_documented_literal(tmp_path):
    path = tmp_path / "out.yaml"
    CfgNode({"MODEL": {"INPUT_SIZE": (224, 224)}}).save(path)
    assert yaml.safe_load(path.read_text()) == {"MODEL": {"INPUT_SIZE": "(224, 224)"}}


def test_literal_looking_string_is_written_quoted(tmp_path):
    path = tmp_path / "out.yaml"
    CfgNode({"NAME": "123", "SIZE": "(1, 2)", "NOTHING": "None"}).save(path)
    text = path.read_text()
    assert "NAME: '123'" in text and "SIZE: '(1, 2)'" in text and "NOTHING: 'None'" in text
    assert yaml.safe_load(text) == {"NAME": "123", "SIZE": "(1, 2)", "NOTHING": "None"}
    assert CfgNode.open(path) == {"NAME": "123", "SIZE": "(1, 2)", "NOTHING": "None"}


def test_unsaveable_values_are_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"'MODEL\.HEAD'.*object"):
        CfgNode.dump(CfgNode({"MODEL": {"HEAD": object()}}))
    with pytest.raises(ConfigError, match=r"'LIST\[1\]'"):
        CfgNode.dump(CfgNode({"LIST": [1, object()]}))
    with pytest.raises(ConfigError, match="frozenset"):
        CfgNode.dump(CfgNode({"FS": frozenset({1})}))


# ------------------------------------------------------------ aliases
BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


@pytest.mark.timeout(30)
def test_alias_bomb_is_refused(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BILLION_LAUGHS, encoding="utf-8")
    with pytest.raises(ConfigError, match="alias") as info:
        CfgNode.open(path)
    assert str(path) in str(info.value)


@pytest.mark.timeout(30)
def test_alias_bomb_of_mappings_is_refused():
    levels = ["l0: &l0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9}"]
    for n in range(1, 9):
        refs = ", ".join(f"k{j}: *l{n - 1}" for j in range(9))
        levels.append(f"l{n}: &l{n} {{{refs}}}")
    with pytest.raises(ConfigError, match="alias"):
        CfgNode.load("\n".join(levels) + "\n")


@pytest.mark.parametrize(
    "text",
    ["A: &a [1, *a]\n", "A: &x {B: *x}\n", "A: &x\n  B:\n    C: *x\n"],
    ids=["sequence", "flow-mapping", "block-mapping"],
)
def test_recursive_alias_is_refused(text):
    with pytest.raises(ConfigError, match="recursive alias"):
        CfgNode.load(text)


def test_ordinary_aliases_and_merge_keys_still_work():
    cfg = CfgNode.load(
        "DEFAULTS: &defaults\n  LR: 0.1\n  BATCH: 32\n"
        "RUN:\n  <<: *defaults\n  BATCH: 64\n"
        "SIZES: &s [1, 2]\nOTHER: *s\n"
    )
    assert cfg.RUN == {"LR": 0.1, "BATCH": 64}
    assert isinstance(cfg.RUN, CfgNode)
    assert cfg.OTHER == [1, 2]


# ------------------------------------------------------------ malformed documents
def test_syntax_error_names_file_and_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("A: 1\nB: [1,\nC: 2\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        CfgNode.open(path)
    assert str(path) in str(info.value)
    assert re.search(r"line \d+, column \d+", str(info.value))


def test_top_level_must_be_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="mapping") as info:
        CfgNode.open(path)
    assert str(path) in str(info.value)
    with pytest.raises(ConfigError, match="mapping"):
        CfgNode.load("just a string")


def test_several_documents_are_refused():
    with pytest.raises(ConfigError, match="line 2"):
        CfgNode.load("A: 1\n---\nB: 2\n")


def test_config_error_is_a_value_error():
    with pytest.raises(ValueError):
        CfgNode.load("A: !!python/name:os.system ''\n")
