"""A real Ray for the tests, started as rarely as possible, on loopback only.

Ray is started by module-scoped fixtures (one local instance, one two-node
cluster), never at import, so only one Ray is up in this process at a time.
Every Ray process gets this folder on ``PYTHONPATH`` (the runners of
``_ray_runners`` must import in the actors) and
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, which makes Ray's processes use
127.0.0.1 instead of the machine's outward address.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

import psutil
import pytest

HERE = str(Path(__file__).resolve().parent)
LOOPBACK = "127.0.0.1"
#: ray.init arguments of every Ray these tests start
LOCAL_INIT = {
    "include_dashboard": False,
    "_node_ip_address": LOOPBACK,
    "object_store_memory": 300 << 20,
    "log_to_driver": False,
}

# Read by Ray at import, in this process too: set before anything imports it.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
if HERE not in sys.path:
    sys.path.insert(0, HERE)


@contextlib.contextmanager
def ray_env():
    """The environment Ray's processes inherit while Ray starts."""
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, saved) if p)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray of 2 CPUs and 1 (declared, not real) GPU, started by the test."""
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    with ray_env():
        ray.init(address="local", num_cpus=2, num_gpus=1, **LOCAL_INIT)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def two_nodes():
    """A cluster on loopback: a head and a worker node of one CPU each."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    assert not ray.is_initialized()
    node = {"num_cpus": 1, "node_ip_address": LOOPBACK, "include_dashboard": False}
    with ray_env():
        cluster = Cluster(initialize_head=True, head_node_args=node)
        try:
            cluster.add_node(**node)
            ray.init(address=cluster.address, _node_ip_address=LOOPBACK, log_to_driver=False)
            cluster.wait_for_nodes(timeout=60)
        except BaseException:
            cluster.shutdown()
            raise
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def wait_gone(pids, timeout: float = 20.0) -> list:
    """Wait until none of ``pids`` is a live process; return those still alive."""
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if p is not None]
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _alive(pid)]
        if alive:
            time.sleep(0.1)
    return alive


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_actors_gone(ray, actors, pids) -> None:
    """Nothing left running: every actor refuses calls and its process has exited."""
    for actor in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.where.remote(), timeout=20)
    assert wait_gone(pids) == []
