"""scripts/test runs every step whatever the ones before did, closes with a summary of
each step's result, and fails if any failed (issue 34, item 29); `--python` finds the
interpreter it is given or says what it tried (issue 32, item 4).

The summary is checked on a copy of the scripts in a scratch repository whose `.venv`
holds stand-in tools (each one records that it ran and exits as the test says), with a
stamp that makes scripts/_env.sh take the environment as ready, so nothing is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="the scripts are bash")

# A stand-in for a tool of .venv/bin: records its arguments, exits as $FAIL_<NAME> says.
STAND_IN = """#!/usr/bin/env bash
name="$(basename "$0")"
[[ "$name" == python && "${1:-}" == -m ]] && name="$2"
echo "$name $*" >> "$RAN"
var="FAIL_${name//-/_}"
exit "${!var:-0}"
"""


def scratch_repository(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    for name in ("test", "_env.sh", "lowest_constraints.py"):
        shutil.copy2(ROOT / "scripts" / name, root / "scripts" / name)
    (root / "requirements" / "lock").mkdir(parents=True)
    (root / "requirements" / "test.txt").write_text("pytest\n")
    (root / "requirements" / "lock" / "test.txt").write_text("pytest==9.0\n")
    (root / "packages" / "easycore-config").mkdir(parents=True)
    (root / "packages" / "easycore-config" / "pyproject.toml").write_text("[project]\n")
    bin_ = root / ".venv" / "bin"
    bin_.mkdir(parents=True)
    for tool in ("python", "ruff", "lint-imports"):
        (bin_ / tool).write_text(STAND_IN)
        (bin_ / tool).chmod(0o755)
    stamp = subprocess.run(
        ["bash", "-c", "source scripts/_env.sh && env_stamp locked"],
        cwd=root, capture_output=True, text=True, timeout=TIMEOUT, check=True,
    ).stdout.strip()
    (root / ".venv" / ".easycore-stamp").write_text(stamp + "\n")
    return root


def run_test_script(
    root: Path, *args: str, **fail: int
) -> tuple[subprocess.CompletedProcess, list]:
    ran = root / "ran.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAIL_", "EASYCORE_"))}
    env.update({"RAN": str(ran), "EASYCORE_TEST_PYTHONS": "",
                **{f"FAIL_{k}": str(v) for k, v in fail.items()}})
    done = subprocess.run(["bash", str(root / "scripts" / "test"), *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    steps = [line.split()[0] for line in ran.read_text().splitlines()] if ran.exists() else []
    return done, steps


def summary(done: subprocess.CompletedProcess) -> list:
    lines = done.stdout.split("==> summary\n", 1)[1].splitlines()
    return [line.split()[0] for line in lines if line.startswith("    ")]


def test_a_failing_step_does_not_stop_the_ones_after_it(tmp_path):
    root = scratch_repository(tmp_path)
    done, steps = run_test_script(root, ruff=1, pytest=3)
    assert done.returncode == 1, done.stdout + done.stderr
    # every step ran: ruff, the contracts, mypy twice, pytest, then the forkserver run
    assert steps == ["ruff", "lint-imports", "mypy", "mypy", "pytest", "pytest"]
    assert summary(done) == ["FAILED", "ok", "ok", "ok", "FAILED", "FAILED"]
    assert "FAILED   ruff (exit 1," in done.stdout
    assert "FAILED   pytest (locked dependencies) (exit 3," in done.stdout
    assert "some steps failed" in done.stdout


def test_every_step_passing_passes(tmp_path):
    root = scratch_repository(tmp_path)
    done, steps = run_test_script(root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(steps) == 6
    assert summary(done) == ["ok"] * 6
    assert "every step passed" in done.stdout


def test_pytest_arguments_leave_out_mypy_and_the_extra_runs(tmp_path):
    root = scratch_repository(tmp_path)
    done, steps = run_test_script(root, "tests/config", "-x", mypy=1)
    assert done.returncode == 0, done.stdout + done.stderr
    assert steps == ["ruff", "lint-imports", "pytest"]


def test_a_python_that_is_not_here_is_skipped_or_fails_where_required(tmp_path):
    root = scratch_repository(tmp_path)
    ran = root / "ran.txt"
    base = {k: v for k, v in os.environ.items() if not k.startswith("EASYCORE_")}
    env = {**base, "RAN": str(ran), "EASYCORE_TEST_PYTHONS": "3.99"}
    done = subprocess.run(["bash", str(root / "scripts" / "test")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skipped  pytest on Python 3.99" in done.stdout
    assert "no Python 3.99 on this machine" in done.stdout
    env["EASYCORE_TEST_PYTHONS_REQUIRED"] = "1"
    done = subprocess.run(["bash", str(root / "scripts" / "test")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 1
    assert "FAILED   pytest on Python 3.99" in done.stdout
    assert "no Python 3.99" in done.stderr


def find_python(want: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", 'source scripts/_env.sh && find_python "$1"', "-", want],
                          cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)


def test_find_python_takes_a_path_or_finds_a_version():
    done = find_python(sys.executable)
    assert (done.returncode, done.stdout.strip()) == (0, sys.executable)
    mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
    found = find_python(mine)
    assert found.returncode == 0, found.stderr
    probe = [found.stdout.strip(), "-c", "import sys; print(sys.version_info[:2])"]
    version = subprocess.run(probe, capture_output=True, text=True, timeout=TIMEOUT).stdout.strip()
    assert version == str(tuple(sys.version_info[:2]))


@pytest.mark.parametrize(("want", "says"), [
    ("3.99", "no Python 3.99: neither python3.99 on PATH nor"),
    ("three", "--python takes a version such as 3.13 or a path"),
    ("/no/such/python", "--python /no/such/python does not run as a Python interpreter"),
])
def test_find_python_names_what_it_could_not_find(want, says):
    done = find_python(want)
    assert done.returncode == 1
    assert says in done.stderr
