"""The runners on a two-node Ray cluster (two raylets on loopback, one CPU each).

One CPU per node and one CPU per actor: ``devices=2`` must put a producer on
each node, and the results must still arrive complete and, for an
``OrderedRunner``, in order.
"""

from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

from _ray_runners import Fragile, Runner, WhereOrdered  # noqa: E402
from _ray_support import assert_actors_gone  # noqa: E402

from easycore.common.parallel import WorkerDiedError  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(150), pytest.mark.usefixtures("two_nodes")]


def _node_ids():
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


def test_cluster_has_two_nodes():
    assert len(_node_ids()) == 2
    assert ray.cluster_resources()["CPU"] == 2


def test_example_1_on_the_cluster_address(two_nodes):
    # Ray is already connected here, so `address` is only documentation; the
    # runner uses the connection as it is and leaves it up.
    with Runner(devices=2, backend="ray", address=two_nodes.address) as runner:
        assert runner(range(100)) == 328350
    assert ray.is_initialized()


def test_producers_spread_over_both_nodes_and_order_is_kept():
    with WhereOrdered(devices=2, backend="ray") as runner:
        actors, pids = runner._engine.backend.actors, runner.worker_pids
        out = runner(range(400))
    assert [r[0] for r in out] == list(range(400))
    nodes = {r[2] for r in out}
    assert nodes == _node_ids()  # producer_init ran once on each node
    assert_actors_gone(ray, actors, pids)


def test_death_on_a_node_names_that_node():
    runner = Fragile(devices=2, cfg={"fail": "exit", "at": 30}, backend="ray")
    actors, pids = runner._engine.backend.actors, runner.worker_pids
    start = time.monotonic()
    with pytest.raises(WorkerDiedError) as info:
        runner(range(500))
    assert time.monotonic() - start < 60
    err = info.value
    assert err.node_id in _node_ids() and err.node_id in str(err)
    assert err.device == "cpu" and err.pid in pids
    assert_actors_gone(ray, actors, pids)
    # The cluster itself is fine: a new runner uses both nodes again.
    with Runner(devices=2, backend="ray") as again:
        assert again(range(10)) == 285
