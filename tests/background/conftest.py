"""Fixtures of the background tests: leak checks, and a local Ray on loopback.

Everything is real: worker processes, shared memory, a Ray the test starts.
``no_leaks`` asserts that a test left no worker process, thread, shared-memory
segment of this process (``ecp-``/``ect-`` names) or file descriptor behind
(multiprocessing's long-lived helpers, the resource tracker and the
forkserver, and easycore's launcher thread, each made once per process, are
allowed).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from leaks import check_leaks

HERE = Path(__file__).resolve().parent
# Read by Ray when it is imported (the Ray tests import it at collection), as
# tests/ray/conftest.py does: Ray's processes use 127.0.0.1, not the outward address.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@pytest.fixture
def no_leaks():
    """Fail the test if it leaves processes, threads, shared memory or descriptors behind."""
    with check_leaks(fds=True):
        yield


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
