"""tests/fork_warnings.py: a test that forked a process with threads fails, unless it is
marked ``forks_with_threads``: on CPython 3.12+ through CPython's warning (which ``-W
error::DeprecationWarning`` cannot turn into a failure: CPython clears the exception the
filter makes of it), before 3.12 through a fork hook that looks at Python's threads.

Each case runs pytest in a fresh interpreter over a small test file placed in the
suite's folder, so it gets the suite's conftest as every test does."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
TIMEOUT = 120

FORK = """
import os


def fork_and_reap():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
"""

CASES = FORK + """
import threading

import pytest


def fork_while(thread_runs):
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    if thread_runs:
        thread.start()
    try:
        fork_and_reap()
    finally:
        stop.set()
        if thread_runs:
            thread.join()


def test_fork_with_a_thread():
    fork_while(True)


@pytest.mark.forks_with_threads
def test_fork_with_a_thread_on_purpose():
    fork_while(True)


def test_fork_alone():
    fork_while(False)


@pytest.fixture
def forked_in_setup():
    fork_while(True)


def test_fork_with_a_thread_in_a_fixture(forked_in_setup):
    pass
"""


@pytest.fixture
def cases():
    path = TESTS / "testinfra" / f"test_forks_{uuid.uuid4().hex}.py"
    path.write_text(CASES)
    try:
        yield path
    finally:
        path.unlink()


def run(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p",
         "no:randomly", str(path.relative_to(TESTS.parent))],
        cwd=TESTS.parent, capture_output=True, text=True, timeout=TIMEOUT,
        env={k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"},
    )


def test_a_fork_from_a_process_with_threads_fails_its_test_unless_marked(cases):
    out = run(cases)
    outcomes = {line.split("::")[-1].split(" ")[0]: line.split(" ")[0]
                for line in out.stdout.splitlines() if "::" in line and line.startswith(
                    ("PASSED", "FAILED", "ERROR"))}
    assert outcomes == {
        "test_fork_with_a_thread": "FAILED",
        "test_fork_with_a_thread_on_purpose": "PASSED",
        "test_fork_alone": "PASSED",
        "test_fork_with_a_thread_in_a_fixture": "ERROR",
    }, out.stdout + out.stderr
    assert "fork(s) from a process with threads" in out.stdout


SHARER_CASE = FORK + """
from multiprocessing import resource_sharer


def test_fork_while_the_resource_sharer_runs():
    r, w = os.pipe()
    try:
        resource_sharer.DupFd(r)  # starts its thread, kept (as torch's sharing does)
        fork_and_reap()
    finally:
        resource_sharer.stop()
        os.close(r)
        os.close(w)
"""


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12+ counts the kernel's threads")
def test_before_3_12_the_resource_sharers_thread_is_left_out(cases):
    # The hook sees Python's threads; multiprocessing's resource sharer keeps
    # its thread by design once torch's own sharing sent a descriptor.
    cases.write_text(SHARER_CASE)
    out = run(cases)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed" in out.stdout
