"""Helpers of the Pool tests that run in the test process only (not in workers)."""

from __future__ import annotations

import contextlib
import threading
import time

import psutil
from _parallel_support import shm_segments, stray_children


@contextlib.contextmanager
def leak_checked():
    """``no_leaks`` for a pool shared by a module: checked once, when the module is done."""
    threads_before = set(threading.enumerate())
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    shm_before = set(shm_segments())
    yield
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and stray_children(children_before):
        time.sleep(0.05)
    assert stray_children(children_before) == []
    new_threads = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
    assert new_threads == []
    assert sorted(set(shm_segments()) - shm_before) == []
