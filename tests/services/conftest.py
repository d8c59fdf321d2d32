"""Fixtures for the service tests: a private services directory, and leak checks.

Services start real processes and talk over real Unix sockets; nothing is
mocked. ``no_leaks`` fails a test that leaves a process, a thread, a socket
file, a registry entry or a shared-memory segment behind. Shared-memory
names carry the pid of the process whose transport made them (a client for
results, a service for arguments), so the check looks at this process's and
at the pids a test declares with ``leaks.track(pid)``: other test sessions on
the same machine stay out of it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

# Read by Ray at import (as in tests/ray): Ray's processes use 127.0.0.1.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # spawned workers import the helpers by name
    sys.path.insert(0, _HERE)

from _services_support import shm_of, stray_children  # noqa: E402

from easycore.common.parallel.services.naming import ENV_DIR  # noqa: E402


@pytest.fixture
def services_dir(monkeypatch):
    """A fresh private services directory for this test (short: socket paths are limited)."""
    path = tempfile.mkdtemp(prefix="ecs-")  # mode 0700
    monkeypatch.setenv(ENV_DIR, path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Leaks:
    def __init__(self) -> None:
        self.pids = {os.getpid()}

    def track(self, *pids) -> None:
        """Also check shared memory named after these processes (services, pool workers)."""
        self.pids.update(p for p in pids if p is not None)


@pytest.fixture
def no_leaks(services_dir):
    """Fail the test if it leaves processes, threads, sockets, names or shared memory."""
    leaks = Leaks()
    threads_before = set(threading.enumerate())
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    shm_before = set(shm_of(leaks.pids))
    yield leaks
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and stray_children(children_before):
        time.sleep(0.05)
    strays = stray_children(children_before)
    assert not strays, f"leaked processes: {[(p.pid, p.status()) for p in strays]}"
    new_threads = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
    assert not new_threads, f"leaked threads: {new_threads}"
    files = [os.path.relpath(os.path.join(d, f), services_dir)
             for d, _, names in os.walk(services_dir) for f in names]
    assert not files, f"leaked socket files or registry entries: {files}"
    # A service sweeps a dead client's segments when it sees the EOF: allow a moment.
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and set(shm_of(leaks.pids)) - shm_before:
        time.sleep(0.05)
    leaked = sorted(set(shm_of(leaks.pids)) - shm_before)
    assert not leaked, f"leaked shared memory: {leaked}"


@contextlib.contextmanager
def _ray_env():
    """Ray's workers import the helpers: this folder and ``tests`` on their path."""
    saved = os.environ.get("PYTHONPATH")
    paths = [_HERE, str(Path(_HERE).parent), saved]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray of 2 CPUs on loopback, started by the test module."""
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    with _ray_env():
        ray.init(address="local", num_cpus=2, include_dashboard=False,
                 _node_ip_address="127.0.0.1", object_store_memory=300 << 20,
                 log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
