"""Fixtures for the parallel runner tests.

Runners start real worker processes; nothing is mocked. ``no_leaks`` asserts
that a test left no worker process, no thread and no shared-memory segment
behind (multiprocessing's own long-lived helpers, the resource tracker and
the forkserver, and easycore's launcher thread, are allowed: they are started
once per interpreter).
"""

from __future__ import annotations

import threading
import time

import psutil
import pytest
from _parallel_support import shm_segments, stray_children


@pytest.fixture
def no_leaks():
    """Fail the test if it leaves processes, threads or /dev/shm segments behind."""
    threads_before = set(threading.enumerate())
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    shm_before = set(shm_segments())
    yield
    # Everything is joined before close() or a failed call returns: no waiting
    # should be needed, so a short grace only absorbs psutil's view lagging.
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and stray_children(children_before):
        time.sleep(0.05)
    strays = stray_children(children_before)
    assert not strays, f"leaked processes: {[(p.pid, p.status()) for p in strays]}"
    new_threads = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()
                   and t.name != "easycore-launcher"]
    assert not new_threads, f"leaked threads: {new_threads}"
    leaked_shm = sorted(set(shm_segments()) - shm_before)
    assert not leaked_shm, f"leaked shared memory: {leaked_shm}"

