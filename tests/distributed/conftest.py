"""Fixtures of the distributed tests: leak checks, and the helpers on the path.

Every test starts real ranks (gloo on 127.0.0.1); nothing is mocked.
``no_leaks`` asserts that a test left no process, thread, file descriptor
or shared-memory segment behind.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from multiprocessing import resource_tracker
from pathlib import Path

import psutil
import pytest

# Read by Ray at import: Ray's processes then use 127.0.0.1, as in tests/ray.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "examples"
# `_dist_helpers` and the tutorial's `network`; spawned ranks inherit sys.path.
for path in (str(HERE), str(EXAMPLES)):
    if path not in sys.path:
        sys.path.append(path)

from _dist_support import open_fds, shm_segments  # noqa: E402
from processes import stray_children  # noqa: E402


@pytest.fixture(scope="session")
def _process_state():
    """What lives as long as this process, made once, is no leak: torch's pipe for its
    stores' event loop (from the first store on), and easycore's launcher thread (which
    starts workers for calls made from other threads)."""
    from easycore.common.parallel import lifeline
    from easycore.torch.distributed.rendezvous import open_store

    store, _ = open_store()
    del store
    starter = threading.Thread(target=lifeline.start_process, args=(lambda: None,))
    starter.start()
    starter.join(timeout=30)


@pytest.fixture
def no_leaks(_process_state):
    """Fail the test if it leaves processes, threads, descriptors or shared memory behind."""
    resource_tracker.ensure_running()  # started once per interpreter; no leak
    threads_before = set(threading.enumerate())
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    shm_before = set(shm_segments())
    fds_before = open_fds()
    yield
    # The calls join everything before returning: the grace only absorbs psutil's lag.
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and stray_children(children_before):
        time.sleep(0.05)
    strays = stray_children(children_before)
    assert not strays, f"leaked processes: {[(p.pid, p.status()) for p in strays]}"
    new_threads = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
    assert not new_threads, f"leaked threads: {new_threads}"
    leaked_shm = sorted(set(shm_segments()) - shm_before)
    assert not leaked_shm, f"leaked shared memory: {leaked_shm}"
    gc.collect()  # a failed call's traceback may hold a process's sentinel until collected
    leaked = open_fds() - fds_before
    assert not leaked, f"leaked file descriptors: {[_describe(fd) for fd in sorted(leaked)]}"


def _describe(fd: str) -> tuple:
    try:
        return fd, os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return fd, "?"
