"""Typical user code and the registry tutorial type-check with mypy (issue 16)."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
TIMEOUT = 300


def mypy(files, tmp_path) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "mypy.ini"),
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            *map(str, files),
        ],
        cwd=ROOT,  # mypy.ini's mypy_path is relative to the repository root
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_user_code_type_checks(tmp_path):
    result = mypy([HERE / "typing_usage.py"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_tutorial_type_checks(tmp_path):
    # The tutorial registers config nodes: it needs easycore-config, which
    # easycore-registry alone (scripts/test-dist registry) does not install.
    pytest.importorskip("easycore.common.config")
    result = mypy([ROOT / "examples" / "30_registry_tutorial.py"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_typed_user_code_also_runs():
    pytest.importorskip("typing_extensions")
    runpy.run_path(str(HERE / "typing_usage.py"), run_name="__main__")
