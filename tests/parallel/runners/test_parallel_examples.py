"""The parallel tutorials that ``scripts/demo`` runs, run as a user would (a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

pytestmark = pytest.mark.timeout(240)


def run_example(name: str, tmp_path: Path) -> str:
    env = dict(os.environ, EASYCORE_CACHE=str(tmp_path / "cache"), PYTHONUNBUFFERED="1")
    services = tmp_path / "services"  # named services stay private to the example
    services.mkdir(mode=0o700)
    env["EASYCORE_SERVICES_DIR"] = str(services)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(EXAMPLES), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, str(EXAMPLES / name)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=220)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_runner_tutorial(tmp_path):
    out = run_example("20_parallel_tutorial.py", tmp_path)
    assert "sum of cubes of 0..99 = 24502500" in out
    assert "caught WorkerError" in out and "usable again" in out
    assert "bottleneck: consumer" in out  # insights name the slow consumer


def test_pool_tutorial(tmp_path):
    out = run_example("22_pool_tutorial.py", tmp_path)
    assert "map:            [0, 1, 4, 9, 16, 25, 36, 49, 64, 81]" in out
    assert "a lambda: [100, 101, 102, 103, 104]" in out
    assert "ran longer than task_timeout=1 s" in out
    assert "imap went on past the dead worker: [0, 1, 2, 3, 4, 'died', 6, 7]" in out
    assert "submit -> 49" in out
    assert "queue: [3, 3] arrays put, got firsts [0, 0, 1, 1, 2, 2]" in out


def test_background_tutorial(tmp_path):
    out = run_example("23_background_tutorial.py", tmp_path)
    assert "batch (64, 32, 32) float32" in out
    assert "in put order: [1, 4, 9]" in out
    assert "a failed job raises:" in out and "job 7 cannot be done" in out


def test_services_tutorial(tmp_path):
    out = run_example("27_services_tutorial.py", tmp_path)
    assert "20 racing increments -> value 20, version 20" in out
    assert "each push got a version of its own: True" in out
    assert "a closure ran there: 101" in out
    assert "kept remotely, then fetched: [1, 2, 3, 4]" in out
    assert "members of 'shards': ['shard-0', 'shard-1']" in out
    assert "paired value: 0.01" in out


def test_distributed_tutorial(tmp_path):
    pytest.importorskip("torch")
    out = run_example("26_torch_distributed.py", tmp_path)
    assert "averaged on 3 ranks: [2.0, 2.0, 2.0]" in out
    assert "rank 0 heard from: [1, 2]" in out
    assert "fails fast: rank 1 of 3" in out
