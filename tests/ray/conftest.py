"""A real Ray for the tests, started as rarely as possible, on loopback only.

Ray is started by module-scoped fixtures (one local instance, one two-node
cluster, one cluster whose nodes come and go), never at import, so only one Ray
is up in this process at a time.
Every Ray process gets this folder on ``PYTHONPATH`` (:func:`_ray_support.ray_env`)
and ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, which makes Ray's processes use
127.0.0.1 instead of the machine's outward address.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Read by Ray at import, in this process too: set before anything imports it.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from _ray_support import LOCAL_INIT, LOOPBACK, ElasticCluster, ray_env  # noqa: E402


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


@pytest.fixture(scope="module")
def elastic():
    """A cluster on loopback whose nodes the tests remove and add (see ``ElasticCluster``)."""
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    cluster = ElasticCluster()
    try:
        yield cluster
    finally:
        cluster.shutdown()


@pytest.fixture
def nodes(elastic):
    """The elastic cluster with its two worker nodes up and their 3 CPUs free."""
    elastic.ensure_nodes()
    return elastic
