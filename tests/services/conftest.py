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
from pathlib import Path

import pytest

# Read by Ray at import (as in tests/ray): Ray's processes use 127.0.0.1.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # spawned workers import the helpers by name
    sys.path.insert(0, _HERE)

from leaks import Leaks, check_leaks  # noqa: E402, F401  (Leaks: re-exported)

from easycore.common.parallel.connection.address import ENV_DIR  # noqa: E402


@pytest.fixture
def services_dir(monkeypatch):
    """A fresh private services directory for this test (short: socket paths are limited)."""
    path = tempfile.mkdtemp(prefix="ecs-")  # mode 0700
    monkeypatch.setenv(ENV_DIR, path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def no_leaks(services_dir):
    """Fail the test if it leaves processes, threads, sockets, names or shared memory.

    Yields a :class:`leaks.Leaks`: ``no_leaks.track(pid)`` adds processes whose
    shared memory is checked too."""
    with check_leaks(empty_dir=services_dir, process_grace=5.0, shm_grace=5.0) as leaks:
        yield leaks


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
