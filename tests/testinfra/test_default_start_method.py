"""EASYCORE_TEST_START_METHOD (tests/default_start_method.py) changes the platform's
default start method as Python 3.14 changed it to forkserver: nothing counts as set,
the default context starts processes with it, it is listed first, and the Python
processes a test starts get it too. Each case runs in a fresh interpreter, so the
suite's own default is left alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
TIMEOUT = 60

# Run with the variable set, as tests/conftest.py applies it; prints JSON.
PROBE = """
import json, multiprocessing, subprocess, sys
from default_start_method import apply_from_environment

def child_method(queue):
    queue.put(multiprocessing.get_start_method())

if __name__ == "__main__":
    applied = apply_from_environment()
    report = {
        "applied": applied,
        "set": multiprocessing.get_start_method(allow_none=True),
        "all": multiprocessing.get_all_start_methods(),
        "context": multiprocessing.get_context().get_start_method(),
    }
    queue = multiprocessing.SimpleQueue()
    process = multiprocessing.Process(target=child_method, args=(queue,))
    process.start()
    report["popen"] = type(process._popen).__module__
    report["in_child"] = queue.get()
    process.join(30)
    # A script the test starts, as a tutorial is started (PYTHONPATH carries the
    # default). Nothing counts as set there either: it may still choose, without force.
    report["subprocess"] = subprocess.run(
        [sys.executable, "-c", "import multiprocessing as mp; "
         "print(mp.get_all_start_methods()[0], mp.get_start_method(allow_none=True)); "
         "mp.set_start_method('fork'); print(mp.get_start_method())"],
        capture_output=True, text=True, timeout=30).stdout.split()
    print(json.dumps(report))
"""


def run_probe(tmp_path: Path, method: str | None) -> subprocess.CompletedProcess:
    script = tmp_path / "probe.py"
    script.write_text(PROBE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "EASYCORE_TEST_START_METHOD"}
    env["PYTHONPATH"] = str(TESTS)
    if method is not None:
        env["EASYCORE_TEST_START_METHOD"] = method
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_the_variable_changes_the_default_as_python_3_14_does(tmp_path, method):
    done = run_probe(tmp_path, method)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["applied"] == method
    assert report["set"] is None  # a default, not a choice
    assert report["all"][0] == method
    assert sorted(report["all"]) == sorted(["fork", "spawn", "forkserver"])
    assert report["context"] == method
    assert report["popen"] == f"multiprocessing.popen_{method.replace('spawn', 'spawn_posix')}"
    assert report["in_child"] == method
    assert report["subprocess"] == [method, "None", "fork"]


def test_without_the_variable_nothing_changes(tmp_path):
    done = run_probe(tmp_path, None)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["applied"] is None
    assert report["set"] is None
    if sys.version_info < (3, 14):
        assert report["all"][0] == "fork"
        assert report["subprocess"] == ["fork", "None", "fork"]


def test_an_unknown_method_is_refused_naming_the_variable(tmp_path):
    done = run_probe(tmp_path, "forx")
    assert done.returncode != 0
    assert "EASYCORE_TEST_START_METHOD='forx'" in done.stderr
    assert "start methods are" in done.stderr


def collected(*args: str) -> list:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=TESTS.parent, capture_output=True, text=True, timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_run_under_another_default_leaves_out_tests_that_choose_their_own():
    folders = ["tests/parallel/pool/test_pool_guarantees.py", "tests/parallel/cpython"]
    everything = collected(*folders)
    kept = collected("--default-start-method-only", *folders)
    chosen = [t for t in everything if t not in kept]
    assert kept and chosen
    # parametrized by start method, or by a pool kind of one; CPython's classes of one
    assert any("[process-spawn]" in t for t in chosen)
    assert any("::TestProcessForkserverPool::" in t for t in chosen)
    assert not any(m in t for t in kept
                   for m in ("[process-fork]", "[process-spawn]", "::TestProcessSpawn"))
    # what the default reaches stays: the thread kind, tests that take no start method
    assert any("[thread]" in t for t in kept)
    assert any("::TestThreadPool::" in t for t in kept)
    assert any("[" not in t for t in kept)
