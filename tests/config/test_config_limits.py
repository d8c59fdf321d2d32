"""Hostile or broken config files end in a ConfigError naming the file (issue 15, items 5, 17).

Deep nesting is refused before libyaml's C composer sees it (it used to crash
the interpreter at ~30,000 levels and raise a raw RecursionError from 1,000);
files that are not text, integers Python refuses to build, and bases that are
directories or devices give a ConfigError that names the file; a long
`__BASE__` chain is followed without recursion; the command line prints
`error: ...` and exits with 2, never a traceback.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap

import pytest

from easycore.common.config import (
    CfgNode,
    ConfigDecodeError,
    ConfigError,
    ConfigFileNotFoundError,
    HierarchicalCfgNode,
)
from easycore.common.config.yaml_io import MAX_DEPTH

TIMEOUT = 120


# Each makes a document nested `depth` levels deep, counting the top mapping.
def flow_lists(depth: int) -> str:
    return "A: " + "[" * (depth - 1) + "]" * (depth - 1) + "\n"


def block_lists(depth: int) -> str:
    lines = ["  " * i + "-" for i in range(depth - 2)] + ["  " * (depth - 2) + "- 1"]
    return "A:\n" + "\n".join(lines) + "\n"


def block_mappings(depth: int) -> str:
    return "".join(" " * i + f"K{i}:\n" for i in range(depth - 1)) + " " * (depth - 1) + "LEAF: 1\n"


def compact_lists(depth: int) -> str:
    return "A:\n" + "- " * (depth - 1) + "x\n"


def depth_of(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    return 0


# ------------------------------------------------------------ nesting depth (item 5)
def test_thirty_thousand_nested_lists_are_refused_without_crashing(tmp_path):
    # In a child process: before the fix this killed the interpreter (SIGSEGV).
    path = tmp_path / "deep.yaml"
    path.write_text(flow_lists(30_000) + compact_lists(30_000).replace("A:", "B:"), "utf-8")
    script = textwrap.dedent(
        """
        import sys
        from easycore.common.config import CfgNode, ConfigError
        try:
            CfgNode.open(sys.argv[1])
        except ConfigError as err:
            print(err)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    assert "deep.yaml" in result.stdout and "nested more than" in result.stdout


@pytest.mark.parametrize(
    ("make", "depth"),
    [
        (make, depth)
        for make in (flow_lists, block_lists, block_mappings, compact_lists)
        for depth in (MAX_DEPTH + 1, 1_000, 20_000)
        # indentation makes block nesting quadratic in size: 1,000 levels is enough
        if depth <= 1_000 or make in (flow_lists, compact_lists)
    ],
)
def test_excessive_nesting_is_a_config_error_naming_the_file(make, depth, tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text(make(depth), encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"deep\.yaml, line \d+: nested more than {MAX_DEPTH}"):
        CfgNode.open(path)


@pytest.mark.parametrize("make", [flow_lists, block_lists, block_mappings, compact_lists])
def test_nesting_up_to_the_limit_loads(make):
    cfg = CfgNode.load(make(MAX_DEPTH))
    assert depth_of(cfg) == MAX_DEPTH
    assert CfgNode.load(CfgNode.dump(cfg)) == cfg  # and saves


def test_many_brackets_in_a_shallow_file_still_load():
    # more brackets than the limit, but only in strings and short lists: the
    # cheap bound is exceeded and the exact count lets the file through
    text = "".join(f"K{i}: [1, 2, '[[{{']\n" for i in range(2 * MAX_DEPTH))
    cfg = CfgNode.load(text)
    assert len(cfg) == 2 * MAX_DEPTH and cfg.K0 == [1, 2, "[[{"]


def test_aliases_that_nest_too_deep_are_refused():
    # each line adds one level through an alias: shallow text, deep tree
    lines = ["L0: &L0 [x]"] + [f"L{i}: &L{i} [*L{i - 1}]" for i in range(1, MAX_DEPTH + 5)]
    with pytest.raises(ConfigError, match="aliases nest more than"):
        CfgNode.load("\n".join(lines) + "\n")


def test_a_deep_tree_built_in_python_cannot_be_saved(tmp_path):
    value: list = []
    for _ in range(MAX_DEPTH + 5):
        value = [value]
    cfg = CfgNode({"DEEP": value})
    with pytest.raises(ConfigError, match=r"'DEEP(\[0\])+'.*nested more than"):
        cfg.save(tmp_path / "deep.yaml")
    assert not any(tmp_path.iterdir())


# ------------------------------------------------------------ values Python refuses (item 17)
def test_a_4300_digit_integer_is_a_config_error_with_the_line(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("A: 1\nB:\n  C: " + "7" * 5_000 + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"big\.yaml, line 3, column 6: cannot read the value"):
        CfgNode.open(path)


def test_an_impossible_date_is_a_config_error_with_the_line():
    with pytest.raises(ConfigError, match=r"line 2, column 4: cannot read the value '2024-02-30'"):
        CfgNode.load("A: 1\nB: 2024-02-30\n")


def test_a_4300_digit_integer_set_in_python_cannot_be_saved():
    with pytest.raises(ConfigError, match="'BIG'"):
        CfgNode.dump(CfgNode({"BIG": 10**5000}))


# ------------------------------------------------------------ files that are not text (item 17)
def test_a_file_that_is_not_utf8_is_a_config_error_naming_the_file(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("A: 1\nNAME: Zh\xe0o\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.yaml: not valid utf-8 text \(line 2") as info:
        CfgNode.open(path)
    assert isinstance(info.value, UnicodeDecodeError)  # what easycore 0.4.2 raised
    assert isinstance(info.value, ConfigDecodeError)
    assert CfgNode.open(path, encoding="latin-1").NAME == "Zhào"


def test_a_text_stream_that_is_not_utf8_names_the_stream(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"NAME: Zh\xe0o\n")
    with open(path, encoding="utf-8") as f, pytest.raises(ConfigError, match=r"latin1\.yaml"):
        CfgNode.open(f)


def test_decode_error_survives_pickling(tmp_path):
    import pickle

    path = tmp_path / "bad.yaml"
    path.write_bytes(b"\xff")
    with pytest.raises(ConfigDecodeError) as info:
        CfgNode.open(path)
    again = pickle.loads(pickle.dumps(info.value))
    assert str(again) == str(info.value) and again.start == 0


def run_with_memory_cap(script: str, cwd) -> subprocess.CompletedProcess:
    """Run `script` in a child whose address space is capped at 1 GiB.

    For tests that read from endless devices: if the guard under test ever
    regressed, the child fails with MemoryError instead of eating the machine.
    """
    resource = pytest.importorskip("resource")
    cap = 1 << 30

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        preexec_fn=limit,
    )


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_opening_an_endless_device_is_refused(tmp_path):
    result = run_with_memory_cap(
        """
        from easycore.common.config import CfgNode, ConfigError
        try:
            CfgNode.open("/dev/zero")
        except ConfigError as err:
            print(err)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "/dev/zero: a character device that gave more than" in result.stdout


def test_a_missing_file_is_a_file_not_found_error_and_a_config_error(tmp_path):
    with pytest.raises(ConfigFileNotFoundError) as info:
        CfgNode.open(tmp_path / "nope.yaml")
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, ConfigError)
    assert info.value.errno == errno.ENOENT
    assert info.value.filename == str(tmp_path / "nope.yaml")
    assert str(info.value) == f"config file {str(tmp_path / 'nope.yaml')!r} not found"


# ------------------------------------------------------------ __BASE__ (item 17)
def test_a_base_that_is_a_directory_says_so(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "child.yaml").write_text("__BASE__: configs\nA: 1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"child\.yaml: __BASE__ 'configs' is a directory"):
        HierarchicalCfgNode.open(tmp_path / "child.yaml")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_base_that_is_a_device_says_so_without_reading_it(tmp_path):
    (tmp_path / "child.yaml").write_text("__BASE__: /dev/zero\nA: 1\n", encoding="utf-8")
    result = run_with_memory_cap(
        """
        from easycore.common.config import ConfigError, HierarchicalCfgNode
        try:
            HierarchicalCfgNode.open("child.yaml")
        except ConfigError as err:
            print(err)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "child.yaml: __BASE__ '/dev/zero' is a character device" in result.stdout


def test_a_missing_base_is_a_file_not_found_error(tmp_path):
    (tmp_path / "child.yaml").write_text("__BASE__: nope.yaml\nA: 1\n", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match=r"child\.yaml: __BASE__ file 'nope\.yaml'") as info:
        HierarchicalCfgNode.open(tmp_path / "child.yaml")
    assert isinstance(info.value, ConfigError)
    assert info.value.filename == "nope.yaml"


def test_a_chain_of_1200_bases_is_followed_without_recursion(tmp_path):
    count = 1_200
    (tmp_path / "c0.yaml").write_text("DEPTH: 0\nFIRST: 0\n", encoding="utf-8")
    for i in range(1, count):
        (tmp_path / f"c{i}.yaml").write_text(
            f"__BASE__: c{i - 1}.yaml\nDEPTH: {i}\nK{i}: {i}\n", encoding="utf-8"
        )
    cfg = HierarchicalCfgNode.open(tmp_path / f"c{count - 1}.yaml")
    assert count - 1 == cfg.DEPTH and cfg.FIRST == 0 and cfg.K1 == 1
    assert len(cfg) == count + 1


def test_a_cycle_in_a_long_chain_names_the_cycle(tmp_path):
    for i in range(5):
        (tmp_path / f"c{i}.yaml").write_text(f"__BASE__: c{(i + 1) % 5}.yaml\n", encoding="utf-8")
    (tmp_path / "top.yaml").write_text("__BASE__: c0.yaml\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"circular __BASE__ chain: .*c0\.yaml -> .*c4\.yaml"):
        HierarchicalCfgNode.open(tmp_path / "top.yaml")


# ------------------------------------------------------------ the command line (item 17)
def run_cli(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "easycore.common.config", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


CLI_CASES = {
    "not_utf8": (b"NAME: Zh\xe0o\n", "not valid utf-8 text"),
    "deep": (flow_lists(20_000).encode(), "nested more than"),
    "big_int": (b"A: " + b"9" * 5_000 + b"\n", "cannot read the value"),
    "duplicate": (b"A: 1\nA: 2\n", "duplicate key 'A'"),
    "base_dir": (b"__BASE__: .\n", "is a directory"),
    "base_missing": (b"__BASE__: nope.yaml\n", "not found"),
    "bad_tag": (b"A: !!python/object/apply:os.system [true]\n", "refused unsafe tag"),
}


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_cli_prints_error_and_exits_2_without_a_traceback(case, tmp_path):
    content, expected = CLI_CASES[case]
    (tmp_path / "bad.yaml").write_bytes(content)
    result = run_cli("bad.yaml", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and expected in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_cli_names_a_missing_file(tmp_path):
    result = run_cli("nope.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "nope.yaml" in result.stderr


def test_cli_output_cut_short_by_a_closed_pipe_is_quiet(tmp_path):
    (tmp_path / "big.yaml").write_text(
        "".join(f"K{i}: {i}\n" for i in range(8_000)), encoding="utf-8"
    )
    # `python -m easycore.common.config big.yaml | head -1`
    cli = subprocess.Popen(
        [sys.executable, "-m", "easycore.common.config", "big.yaml"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert cli.stdout is not None and cli.stderr is not None
    first = cli.stdout.readline()
    cli.stdout.close()
    stderr = cli.stderr.read()
    assert cli.wait(TIMEOUT) == 0
    assert first == b"K0: 0\n" and b"Traceback" not in stderr


@pytest.mark.parametrize("text_start", ["\ufeff", "A:\r", "A:\r\n", "A:\x85", "A:\u2028", "A:\n"])
def test_deep_nesting_is_found_after_any_line_break_and_a_byte_order_mark(text_start):
    with pytest.raises(ConfigError, match="nested more than"):
        CfgNode.load(text_start + "- " * (MAX_DEPTH + 5) + "x\n")


# ------------------------------------------------------------ issue 34, item 14
#: A value whose YAML text passes the 64 MiB `open` reads (the key and newline add a few).
OVER_THE_LIMIT = "x" * (64 * 2**20)


@pytest.fixture(scope="module")
def too_large() -> CfgNode:
    return CfgNode({"A": OVER_THE_LIMIT}, copy=False)


def test_save_refuses_a_config_open_would_refuse_and_writes_nothing(too_large, tmp_path):
    path = tmp_path / "big.yaml"
    with pytest.raises(ConfigError, match=r"big\.yaml.*more than the 64 MiB"):
        too_large.save(path)
    assert os.listdir(tmp_path) == []  # no file, no temporary file
    with pytest.raises(ConfigError, match="64 MiB"):
        CfgNode.dump(too_large)
    with open(path, "wb") as f, pytest.raises(ConfigError, match="64 MiB"):
        too_large.save(f)
    assert path.stat().st_size == 0


def test_what_save_writes_at_the_limit_opens(tmp_path):
    # "A: " and the newline: 4 bytes; the largest config that fits, written and read.
    cfg = CfgNode({"A": "y" * (64 * 2**20 - 4)}, copy=False)
    cfg.save(tmp_path / "edge.yaml")
    assert (tmp_path / "edge.yaml").stat().st_size == 64 * 2**20
    assert CfgNode.open(tmp_path / "edge.yaml") == cfg


def test_an_encoding_that_takes_more_bytes_is_measured_in_bytes(tmp_path):
    # 40 Mi characters are 80 MiB in UTF-16, which `open(..., "utf-16")` refuses.
    cfg = CfgNode({"A": "z" * (40 * 2**20)}, copy=False)
    with pytest.raises(ConfigError, match="64 MiB"):
        cfg.save(tmp_path / "wide.yaml", encoding="utf-16")
    with pytest.raises(ConfigError, match="64 MiB"):
        HierarchicalCfgNode.save(cfg, tmp_path / "wide.yaml", encoding="utf-16")
    assert not (tmp_path / "wide.yaml").exists()


# ------------------------------------------------------------ issue 34, item 32
def test_a_directory_is_named_as_such_by_every_reader(tmp_path):
    folder = tmp_path / "configs"
    folder.mkdir()
    for read in (CfgNode.open, HierarchicalCfgNode.open):
        with pytest.raises(IsADirectoryError, match="is a directory, not a YAML file") as info:
            read(folder)
        assert str(folder) in str(info.value)
