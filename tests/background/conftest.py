"""Fixtures of the background tests: leak checks, and a local Ray on loopback.

Everything is real: worker processes, shared memory, a Ray the test starts.
``no_leaks`` asserts that a test left no worker process, thread, shared-memory
segment of this process (``ecp-``/``ect-`` names) or file descriptor behind
(multiprocessing's long-lived helpers, the resource tracker and the
forkserver, and easycore's launcher thread, each made once per process, are
allowed).
"""

from __future__ import annotations

import gc
import os
import threading
import time
from multiprocessing import resource_tracker
from pathlib import Path

import psutil
import pytest
from processes import stray_children

HERE = Path(__file__).resolve().parent
# Read by Ray when it is imported (the Ray tests import it at collection), as
# tests/ray/conftest.py does: Ray's processes use 127.0.0.1, not the outward address.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def shm_segments() -> list:
    """Shared-memory segments of easycore transports made by this process."""
    if not os.path.isdir("/dev/shm"):
        return []
    prefixes = tuple(f"{tag}-{os.getpid():x}-" for tag in ("ecp", "ect"))
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith(prefixes))


def open_fds() -> set:
    """This process's open descriptors, less the forkserver's (started once per interpreter)."""
    try:
        fds = set(os.listdir("/proc/self/fd"))
    except OSError:
        return set()
    try:
        from multiprocessing import forkserver

        alive = forkserver._forkserver._forkserver_alive_fd
    except (ImportError, AttributeError):
        alive = None
    return fds - {str(alive)}


@pytest.fixture
def no_leaks():
    """Fail the test if it leaves processes, threads, shared memory or descriptors behind."""
    resource_tracker.ensure_running()  # started once per interpreter: no leak
    threads_before = set(threading.enumerate())
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    shm_before = set(shm_segments())
    fds_before = open_fds()
    yield
    # close() joins everything before it returns: the grace only absorbs psutil lagging.
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and stray_children(children_before):
        time.sleep(0.05)
    strays = stray_children(children_before)
    assert not strays, f"leaked processes: {[(p.pid, p.status()) for p in strays]}"
    # easycore's launcher thread is made once per process (it starts replacement
    # workers from a thread that never exits, for their parent-death signal).
    new_threads = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()
                   and t.name != "easycore-launcher"]
    assert not new_threads, f"leaked threads: {new_threads}"
    leaked_shm = sorted(set(shm_segments()) - shm_before)
    assert not leaked_shm, f"leaked shared memory: {leaked_shm}"
    gc.collect()  # a worker's sentinel closes when its Process object is collected
    leaked_fds = open_fds() - fds_before
    assert not leaked_fds, f"leaked file descriptors: {sorted(leaked_fds)}"


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray of 2 CPUs on 127.0.0.1, for one test module; shut down after it."""
    saved = os.environ.get("PYTHONPATH")
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    # Actors import the targets by module name: this folder on their path.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), saved) if p)
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False,
                 _node_ip_address="127.0.0.1", object_store_memory=300 << 20,
                 log_to_driver=False)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    try:
        yield ray
    finally:
        ray.shutdown()
