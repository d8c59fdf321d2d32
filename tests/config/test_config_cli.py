"""``python -m easycore.common.config FILE [--set KEY=VALUE ...]``, run as a real process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from easycore.common.config import CfgNode

TIMEOUT = 60


def run_cli(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "easycore.common.config", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


@pytest.fixture
def configs(tmp_path):
    (tmp_path / "base.yaml").write_text(
        "MODEL:\n  NAME: resnet\n  DEPTH: 50\n  INPUT_SIZE: (224, 224)\n"
        "SOLVER:\n  LR: 0.1\n  STEPS: [10, 20]\nNAME: base\n",
        encoding="utf-8",
    )
    (tmp_path / "child.yaml").write_text(
        "__BASE__: base.yaml\nMODEL:\n  DEPTH: 101\nNAME: child\n", encoding="utf-8"
    )
    return tmp_path


def test_prints_the_resolved_config_as_yaml(configs):
    result = run_cli("child.yaml", cwd=configs)

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "__BASE__" not in result.stdout
    assert "!!" not in result.stdout
    printed = CfgNode.load(result.stdout)
    assert printed.dict() == {
        "MODEL": {"NAME": "resnet", "DEPTH": 101, "INPUT_SIZE": (224, 224)},
        "SOLVER": {"LR": 0.1, "STEPS": [10, 20]},
        "NAME": "child",
    }
    assert yaml.safe_load(result.stdout)["MODEL"]["INPUT_SIZE"] == "(224, 224)"


def test_set_overrides(configs):
    result = run_cli(
        "child.yaml", "--set", "SOLVER.LR=0.5", "MODEL.INPUT_SIZE=[320, 320]", "NAME=123",
        cwd=configs,
    )
    assert result.returncode == 0, result.stderr
    printed = CfgNode.load(result.stdout)
    assert printed.SOLVER.LR == 0.5
    assert printed.MODEL.INPUT_SIZE == (320, 320)
    assert printed.NAME == "123"  # a string key keeps the raw string


def test_set_may_be_given_several_times(configs):
    result = run_cli("child.yaml", "--set", "SOLVER.LR=1", "--set", "NAME=x", cwd=configs)
    assert result.returncode == 0, result.stderr
    printed = CfgNode.load(result.stdout)
    assert printed.SOLVER.LR == 1.0 and printed.NAME == "x"


def test_bad_key_exits_2_with_the_error_on_stderr(configs):
    result = run_cli("child.yaml", "--set", "SOLVER.LRR=0.5", cwd=configs)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "SOLVER.LRR" in result.stderr
    assert "did you mean 'SOLVER.LR'" in result.stderr
    assert "Traceback" not in result.stderr


def test_allow_new(configs):
    result = run_cli("child.yaml", "--set", "SOLVER.MOMENTUM=0.9", "--allow-new", cwd=configs)
    assert result.returncode == 0, result.stderr
    assert CfgNode.load(result.stdout).SOLVER.MOMENTUM == 0.9


def test_bad_type_exits_2(configs):
    result = run_cli("child.yaml", "--set", "MODEL.DEPTH=deep", cwd=configs)
    assert result.returncode == 2
    assert "MODEL.DEPTH" in result.stderr and "expected int" in result.stderr


def test_set_without_equals_exits_2(configs):
    result = run_cli("child.yaml", "--set", "SOLVER.LR", cwd=configs)
    assert result.returncode == 2
    assert "KEY=VALUE" in result.stderr


def test_missing_file_exits_2(configs):
    result = run_cli("nope.yaml", cwd=configs)
    assert result.returncode == 2
    assert "nope.yaml" in result.stderr
    assert "Traceback" not in result.stderr


def test_unsafe_file_exits_2_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    (tmp_path / "evil.yaml").write_text(
        f"A: !!python/object/apply:os.system ['touch {marker}']\n", encoding="utf-8"
    )
    result = run_cli("evil.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert "evil.yaml, line 1" in result.stderr
    assert not marker.exists()


def test_missing_base_exits_2(tmp_path):
    (tmp_path / "child.yaml").write_text("__BASE__: gone.yaml\n", encoding="utf-8")
    result = run_cli("child.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert "gone.yaml" in result.stderr


def test_no_arguments_is_a_usage_error(tmp_path):
    result = run_cli(cwd=tmp_path)
    assert result.returncode == 2
    assert "usage" in result.stderr.lower()


# ------------------------------------------------------------ issue 34, item 32
def test_a_directory_exits_2_with_a_plain_message(tmp_path):
    (tmp_path / "configs").mkdir()
    result = run_cli("configs", cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "Errno" not in result.stderr
    assert "configs" in result.stderr and "is a directory" in result.stderr


@pytest.mark.parametrize("name", ["nope.yaml", "memory://bucket/x.yaml"])
def test_other_unreadable_paths_exit_2_naming_them(tmp_path, name):
    result = run_cli(name, cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "Errno" not in result.stderr
    assert name in result.stderr


# ------------------------------------------------------------ issue 34, item 15
@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_text_stdout_cannot_encode_is_written_as_yaml_escapes(tmp_path, encoding):
    # An ASCII locale (or a legacy code page) cannot encode "é" or "→": the output
    # uses YAML's escapes, which read back as the same config.
    cfg = CfgNode({"NAME": "café → ☕", "SIZE": ("é", 2), "é": 1})
    cfg.save(tmp_path / "u.yaml")
    env = {**os.environ, "PYTHONIOENCODING": f"{encoding}:strict"}
    command = [sys.executable, "-m", "easycore.common.config", "u.yaml"]
    done = subprocess.run(
        command, cwd=tmp_path, capture_output=True, timeout=TIMEOUT, env=env
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"Traceback" not in done.stderr
    assert CfgNode.load(done.stdout.decode(encoding)) == cfg


def test_a_stdout_that_encodes_everything_gets_the_text_as_it_is(tmp_path):
    (tmp_path / "u.yaml").write_text("NAME: café\n", encoding="utf-8")
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    command = [sys.executable, "-m", "easycore.common.config", "u.yaml"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, timeout=TIMEOUT, env=env)
    assert done.stdout.decode("utf-8") == "NAME: café\n"
