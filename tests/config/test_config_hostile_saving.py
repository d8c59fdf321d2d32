"""Saving and `__BASE__` chains, tried as a hostile user would (issue 22).

Items 4 (a save that would make its own base), 7 and 29 (a `__BASE__` that is no
usable path), 11 (non-BMP text in tuples and sets), 17 (values equal to the
base's but of another type or sign), 20 (tuples with inf and nan), 24 (NumPy
scalars, IntEnum, str subclasses), 25 (lone surrogates), 27 (errors name the
target; a folder that refuses a temporary file) and 28 (a cycle through a
symlinked folder).
"""

from __future__ import annotations

import enum
import math
import multiprocessing
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from easycore.common.config import (
    CfgNode,
    ConfigError,
    ConfigFileNotFoundError,
    HierarchicalCfgNode,
)

TIMEOUT = 120


def round_trip(cfg: CfgNode, tmp_path: Path) -> CfgNode:
    cfg.save(tmp_path / "saved.yaml")
    return CfgNode.open(tmp_path / "saved.yaml")


def same(a, b) -> bool:
    """Equal with the same types and signs all the way down, nan equal to nan."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (a != a and b != b) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


# ------------------------------------------------------------ item 4: the base is not a target
def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_saving_over_the_base_is_refused_and_leaves_it_untouched(tmp_path):
    base = write(tmp_path / "b.yaml", "A: 1\nB: 2\n")
    cfg = HierarchicalCfgNode.open(base)
    cfg.A = 5
    with pytest.raises(ConfigError, match=r"cannot save to .*b\.yaml.*: it is the base"):
        HierarchicalCfgNode.save(cfg, base, base_cfg_path=base)
    assert base.read_text(encoding="utf-8") == "A: 1\nB: 2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.yaml"]


def test_saving_over_a_file_of_the_bases_chain_is_refused_by_any_spelling(tmp_path):
    write(tmp_path / "root.yaml", "A: 1\n")
    write(tmp_path / "mid.yaml", "__BASE__: root.yaml\nB: 2\n")
    (tmp_path / "link").symlink_to(tmp_path)
    cfg = HierarchicalCfgNode.open(tmp_path / "mid.yaml")
    for target in (tmp_path / "root.yaml", tmp_path / "link" / "root.yaml", "root.yaml"):
        cwd = os.getcwd()
        os.chdir(tmp_path)
        try:
            with pytest.raises(ConfigError, match=r"__BASE__ chain"):
                HierarchicalCfgNode.save(cfg, target, base_cfg_path=tmp_path / "mid.yaml")
        finally:
            os.chdir(cwd)
    assert (tmp_path / "root.yaml").read_text(encoding="utf-8") == "A: 1\n"


def test_saving_beside_the_base_still_works(tmp_path):
    base = write(tmp_path / "b.yaml", "A: 1\nB: 2\n")
    cfg = HierarchicalCfgNode.open(base)
    cfg.A = 5
    HierarchicalCfgNode.save(cfg, tmp_path / "c.yaml", base_cfg_path=base)
    assert HierarchicalCfgNode.open(tmp_path / "c.yaml") == {"A": 5, "B": 2}


# ------------------------------------------------------------ items 7, 29: unusable __BASE__
@pytest.mark.parametrize(
    "base, reason",
    [
        ('"a\\0b"', "null character"),
        ("x" * 5_000, "too long"),
        ("d/" * 3_000 + "x.yaml", "too long"),
    ],
)
def test_an_unusable_base_path_is_a_config_error_naming_the_referring_file(base, reason, tmp_path):
    top = write(tmp_path / "top.yaml", f"__BASE__: {base}\nA: 1\n")
    with pytest.raises(ConfigError, match=reason) as err:
        HierarchicalCfgNode.open(top)
    assert str(err.value).startswith(f"{top}: ")
    assert len(str(err.value)) < 1_000  # a 5,000-character path is cut in the message


def test_cli_prints_error_for_a_null_byte_in_base(tmp_path):
    write(tmp_path / "top.yaml", '__BASE__: "a\\0b"\n')
    result = subprocess.run(
        [sys.executable, "-m", "easycore.common.config", "top.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and "top.yaml" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_base_behind_a_loop_of_links_names_the_referring_file(tmp_path):
    (tmp_path / "loop").symlink_to("loop")
    top = write(tmp_path / "top.yaml", "__BASE__: loop/x.yaml\n")
    with pytest.raises(ConfigError, match=r"top\.yaml: cannot use __BASE__ 'loop/x\.yaml'"):
        HierarchicalCfgNode.open(top)


# Permission tests need a user the file modes apply to: root passes every
# check, so as root they run in a forked child that becomes `nobody`.
@pytest.fixture
def shared_dir():
    folder = Path(tempfile.mkdtemp(prefix="easycore-config-test-"))
    folder.chmod(0o755)  # reachable by another user (tmp_path's parents are not)
    yield folder
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    shutil.rmtree(folder)


def _run_as_other_user(queue, function, args):
    try:
        if os.geteuid() == 0:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
        function(*args)
        queue.put(("ok", ""))
    except BaseException as exc:  # noqa: BLE001 (any error is reported to the parent)
        queue.put((type(exc).__name__, str(exc)))


def as_other_user(function, *args) -> tuple[str, str]:
    """Run `function(*args)` as a user without root's powers; (error type or "ok", message)."""
    # Everything the child needs is imported here, before the fork.
    from easycore.common.config import yaml_dialect  # noqa: F401

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_run_as_other_user, args=(queue, function, args))
    child.start()
    try:
        return queue.get(timeout=TIMEOUT)
    finally:
        child.join(TIMEOUT)


def _open_chain(path):
    HierarchicalCfgNode.open(path)


def test_an_unreadable_base_is_a_config_error_naming_the_referring_file(shared_dir):
    base = write(shared_dir / "secret.yaml", "A: 1\n")
    base.chmod(0)
    top = write(shared_dir / "top.yaml", "__BASE__: secret.yaml\nB: 2\n")
    top.chmod(0o644)
    kind, message = as_other_user(_open_chain, str(top))
    assert kind == "ConfigError", message
    assert message.startswith(f"{top}: cannot read its __BASE__ file")
    assert "secret.yaml" in message and "Permission denied" in message


def _save(path, text):
    CfgNode({"A": text}).save(path)


def test_a_file_in_a_folder_that_refuses_new_files_is_written_in_place(shared_dir):
    folder = shared_dir / "ro"
    folder.mkdir()
    target = write(folder / "x.yaml", "A: old\n")
    target.chmod(0o666)  # writable by anyone, as `open(path, "w")` finds it
    folder.chmod(0o555)
    kind, message = as_other_user(_save, str(target), "new")
    assert (kind, message) == ("ok", "")
    assert CfgNode.open(target) == {"A": "new"}
    assert sorted(p.name for p in folder.iterdir()) == ["x.yaml"]


def test_a_save_error_names_the_target_not_the_temporary_file(shared_dir):
    folder = shared_dir / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    target = folder / "new.yaml"
    kind, message = as_other_user(_save, str(target), "x")
    assert kind == "PermissionError"
    assert "new.yaml" in message and ".tmp" not in message
    assert not target.exists()


def test_a_read_only_file_in_a_read_only_folder_is_refused_naming_it(shared_dir):
    folder = shared_dir / "ro"
    folder.mkdir()
    target = write(folder / "x.yaml", "A: old\n")
    target.chmod(0o444)
    folder.chmod(0o555)
    kind, message = as_other_user(_save, str(target), "x")
    assert kind == "PermissionError" and "x.yaml" in message and ".tmp" not in message
    assert target.read_text(encoding="utf-8") == "A: old\n"


# ------------------------------------------------------------ item 28: cycles by real path
def test_a_cycle_through_a_symlinked_folder_is_found(tmp_path):
    (tmp_path / "d").symlink_to(".")
    write(tmp_path / "x.yaml", "__BASE__: d/x.yaml\nA: 1\n")
    with pytest.raises(ConfigError, match=r"circular __BASE__ chain: .*x\.yaml -> .*d/x\.yaml"):
        HierarchicalCfgNode.open(tmp_path / "x.yaml")


def test_a_cycle_through_a_symlinked_file_is_found(tmp_path):
    write(tmp_path / "a.yaml", "__BASE__: b.yaml\n")
    (tmp_path / "b.yaml").symlink_to("c.yaml")
    write(tmp_path / "c.yaml", "__BASE__: a.yaml\n")
    with pytest.raises(ConfigError, match="circular __BASE__ chain"):
        HierarchicalCfgNode.open(tmp_path / "a.yaml")


def test_the_same_base_by_two_names_in_a_diamond_free_chain_loads(tmp_path):
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub" / "root.yaml", "A: 1\n")
    write(tmp_path / "top.yaml", "__BASE__: sub/../sub/root.yaml\nB: 2\n")
    assert HierarchicalCfgNode.open(tmp_path / "top.yaml") == {"A": 1, "B": 2}


# ------------------------------------------------------------ item 17: type and sign
@pytest.mark.parametrize(
    "base, value",
    [
        ([1.0], [1]),
        ([1], [1.0]),
        (0.0, -0.0),
        (-0.0, 0.0),
        ((1.0, 2), (1, 2)),
        ([[1, 2.0]], [[1, 2]]),
        ([True], [1]),
        ({1.0}, {1}),
    ],
)
def test_a_value_equal_to_the_bases_but_of_another_type_or_sign_is_saved(base, value, tmp_path):
    (tmp_path / "base.yaml").write_text("", encoding="utf-8")
    CfgNode({"V": base, "KEEP": 1}).save(tmp_path / "base.yaml")
    HierarchicalCfgNode.save(
        CfgNode({"V": value, "KEEP": 1}), tmp_path / "child.yaml", tmp_path / "base.yaml"
    )
    reopened = HierarchicalCfgNode.open(tmp_path / "child.yaml")
    assert same(reopened.V, value), (reopened.V, value)
    assert "KEEP" not in (tmp_path / "child.yaml").read_text(encoding="utf-8")


def test_equal_values_of_the_same_type_and_sign_are_still_left_out(tmp_path):
    CfgNode({"V": [1.0, (2, 3)], "N": float("nan")}).save(tmp_path / "base.yaml")
    HierarchicalCfgNode.save(
        CfgNode({"V": [1.0, (2, 3)], "N": float("nan")}),
        tmp_path / "child.yaml",
        tmp_path / "base.yaml",
    )
    assert (tmp_path / "child.yaml").read_text(encoding="utf-8") == "__BASE__: base.yaml\n"


# ------------------------------------------------------------ items 11, 20: literals round-trip
@pytest.mark.parametrize(
    "value",
    [
        ("😀",),
        {"a😀b"},
        ("x", ("𝔘", b"\xf0")),  # noqa: RUF001 (a character outside the BMP, on purpose)
        (1.0, math.inf, -math.inf, math.nan),
        {math.inf},
        (math.nan,),
        ((math.inf,), [math.nan]),
        ("inf", "nan"),
    ],
    ids=repr,
)
def test_a_tuple_or_set_round_trips_exactly(value, tmp_path):
    reopened = round_trip(CfgNode({"V": value}), tmp_path).V
    if isinstance(value, set):
        assert type(reopened) is set and {repr(v) for v in reopened} == {repr(v) for v in value}
    else:
        assert same(reopened, value), (reopened, value)


def test_a_non_bmp_tuple_round_trips_with_ascii_only_output_too():
    text = CfgNode.dump(CfgNode({"V": ("😀",)}), allow_unicode=False)
    assert CfgNode.load(text).V == ("😀",)


def test_inf_and_nan_words_stay_text():
    cfg = CfgNode.load("A: inf\nB: nan\nC: (nan)\nD: (inf,)\n")
    assert (cfg.A, cfg.B, cfg.C) == ("inf", "nan", "(nan)") and (math.inf,) == cfg.D


# ------------------------------------------------------------ item 24: NumPy, IntEnum, str
def test_numpy_scalars_are_saved_as_the_python_numbers_they_hold(tmp_path):
    np = pytest.importorskip("numpy")
    cfg = CfgNode(
        {
            "F": np.float64(0.5),
            "F32": np.float32(0.25),
            "I": np.int64(3),
            "B": np.bool_(True),
            "S": np.str_("x"),
            "L": [np.int32(1), np.float16(2.0)],
            "T": (np.int64(1), np.float64(2.5)),
        }
    )
    reopened = round_trip(cfg, tmp_path)
    assert same(
        dict(reopened),
        {"F": 0.5, "F32": 0.25, "I": 3, "B": True, "S": "x", "L": [1, 2.0], "T": (1, 2.5)},
    )


class Color(enum.IntEnum):
    RED = 1


class Name(str):
    pass


@pytest.mark.parametrize("value", [Color.RED, Name("x"), [Color.RED], (Name("y"),)])
def test_a_subclass_of_a_yaml_type_is_a_config_error_naming_the_key(value, tmp_path):
    with pytest.raises(ConfigError, match=r"cannot save 'MODEL\.V"):
        CfgNode({"MODEL": {"V": value}}).save(tmp_path / "x.yaml")
    assert not (tmp_path / "x.yaml").exists()


# ------------------------------------------------------------ item 25: lone surrogates
@pytest.mark.parametrize("value", ["caf\udce9.txt", ["ok", "\ud800"]])
def test_a_lone_surrogate_is_a_config_error_naming_the_key(value, tmp_path):
    cfg = CfgNode({"DATA": {"FILE": value}})
    with pytest.raises(ConfigError, match=r"cannot save 'DATA\.FILE.*lone surrogate"):
        cfg.save(tmp_path / "x.yaml")
    with pytest.raises(ConfigError, match="lone surrogate"):
        CfgNode.dump(cfg)
    assert not (tmp_path / "x.yaml").exists()


def test_a_lone_surrogate_in_a_tuple_round_trips_as_an_escape(tmp_path):
    assert round_trip(CfgNode({"T": ("caf\udce9",)}), tmp_path).T == ("caf\udce9",)


def test_saved_files_keep_their_mode(tmp_path):
    # the in-place fallback and the error translation leave the normal path as it was
    path = tmp_path / "x.yaml"
    CfgNode({"A": 1}).save(path)
    path.chmod(0o640)
    CfgNode({"A": 2}).save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640 and CfgNode.open(path).A == 2


def test_a_missing_base_is_still_config_file_not_found(tmp_path):
    top = write(tmp_path / "top.yaml", "__BASE__: nope.yaml\n")
    with pytest.raises(ConfigFileNotFoundError):
        HierarchicalCfgNode.open(top)
