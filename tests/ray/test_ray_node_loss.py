"""A lost node costs time, not results: pools, background work and queues on a cluster
whose nodes come and go (one cluster for the module, see ``ElasticCluster``).

Items wait at a gate (``_ray_elastic``) until every worker holds one, so the node
removed surely has work in flight; the gate then opens. Three one-CPU workers put
exactly one actor on the 1-CPU ``spare`` node, the other two on ``big``.
"""

from __future__ import annotations

import threading
import time
from functools import partial

import pytest

ray = pytest.importorskip("ray")

from _ray_elastic import Gate, Tally, die_at, held, held_draw, wait_for  # noqa: E402
from _ray_runners import Gated  # noqa: E402

from easycore.common.parallel import BackgroundTask, JobQueue, NodesLostError, Pool  # noqa: E402
from easycore.common.parallel.backends.ray import RayCapacityError, RayWorkerDiedError  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

WAIT = 60.0


def _placed_on(pool: Pool, node_id: str) -> bool:
    return node_id in pool._backend.nodes


def test_a_node_lost_mid_map_costs_no_result_and_a_node_added_is_used(nodes, tmp_path):
    gate = Gate(tmp_path)
    with Pool(3, backend="ray", max_deaths=1) as pool:
        spare, big = nodes.spare.node_id, nodes.big.node_id
        assert sorted(pool._backend.nodes) == sorted([big, big, spare])
        result = pool.map_async(partial(held, gate=gate, after=6, seconds=0.05), range(60),
                                chunksize=1)
        gate.wait_started(3)  # every worker holds an item, the spare node's too
        nodes.lose_spare(graceful=False)  # killed outright: Ray's health checks tell
        added = nodes.add_spare()
        wait_for(lambda: _placed_on(pool, added), "the replacement to go to the node added")
        gate.open()
        out = result.get(WAIT)
    # Every result once, in order; none blamed (max_deaths=1 would have failed the map).
    assert [x for x, _, _ in out] == list(range(60))
    late = {node for x, node, _ in out if x >= 6}  # ran after the loss
    assert spare not in late and added in late  # the replacement took its share


def test_a_node_lost_mid_imap_and_imap_unordered(nodes, tmp_path):
    gate = Gate(tmp_path)
    fn = partial(held, gate=gate, after=4)
    with Pool(3, backend="ray") as pool:
        ordered = pool.imap(fn, range(30), chunksize=1)
        unordered = pool.imap_unordered(fn, range(100, 130), chunksize=1)
        head = [ordered.next(WAIT)[0] for _ in range(4)]  # mid-imap: some consumed
        gate.wait_started(3)
        lost = nodes.lose_spare()
        gate.open()
        # No node joins: the two workers left carry on; the replacement waits for room.
        rest = [x for x, _, _ in (ordered.next(WAIT) for _ in range(26))]
        anyhow = [x for x, _, _ in (unordered.next(WAIT) for _ in range(30))]
        with pytest.raises(StopIteration):
            ordered.next(WAIT)
        assert lost not in pool._backend.nodes
    assert head + rest == list(range(30))
    assert sorted(anyhow) == list(range(100, 130))  # each once


def test_a_node_lost_while_the_pool_starts_is_replaced_on_a_node_that_joins(nodes, tmp_path):
    gate = Gate(tmp_path)
    built: list = []
    starting = threading.Thread(target=lambda: built.append(
        Pool(3, backend="ray", initializer=gate.enter, initargs=("init",))))
    starting.start()
    try:
        gate.wait_started(3)  # every worker is in its initializer
        lost = nodes.lose_spare()
        added = nodes.add_spare()
    finally:
        gate.open()
        starting.join(WAIT)
    (pool,) = built
    with pool:
        assert sorted(pool._backend.nodes) == sorted([nodes.big.node_id] * 2 + [added])
        assert lost not in pool._backend.nodes
        assert pool.map(abs, [-1, -2, -3]) == [1, 2, 3]


def test_a_job_queue_loses_a_node(nodes, tmp_path):
    gate = Gate(tmp_path)
    with JobQueue(3, backend="ray", max_deaths=1) as queue:
        for i in range(9):
            queue.put(held, i, gate)
        gate.wait_started(3)
        nodes.lose_spare()
        gate.open()
        got = [queue.get(timeout=WAIT)[0] for _ in range(9)]
    assert got == list(range(9))  # FIFO, each job once


def test_a_background_task_loses_a_node(nodes, tmp_path):
    opened = Gate(tmp_path / "open")
    opened.folder.mkdir()
    opened.open()
    with BackgroundTask(held_draw, (opened,), workers=2, seed=5, ordered=True) as local:
        expected = [local.get(timeout=WAIT) for _ in range(12)]  # processes, for reference
    gate = Gate(tmp_path / "gate")
    gate.folder.mkdir()
    with BackgroundTask(held_draw, (gate,), workers=3, seed=5, ordered=True,
                        backend="ray", max_deaths=1) as task:
        gate.wait_started(3)
        nodes.lose_spare()
        gate.open()
        got = [task.get(timeout=WAIT) for _ in range(12)]
    # Call k is call k wherever it ran, and again after a loss: the same draws, in order.
    assert got == expected


def test_a_runner_fails_fast_and_names_the_node_lost(nodes, tmp_path):
    gate = Gate(tmp_path)
    spare = nodes.spare.node_id
    runner = Gated(devices=3, backend="ray", cfg={"folder": str(tmp_path), "after": 5})

    def lose_it() -> None:
        gate.wait_started(3)
        nodes.lose_spare()

    remover = threading.Thread(target=lose_it)
    remover.start()
    try:
        with pytest.raises(RayWorkerDiedError) as info:
            runner(range(40))
    finally:
        remover.join(WAIT)
        gate.open()
    err = info.value
    assert err.cause.kind == "node lost" and err.cause.node_id == spare
    assert spare in str(err) and "No item is at fault" in str(err) and "a Pool" in str(err)
    assert not runner.is_activate  # failed fast, as a runner does


def test_a_job_fails_past_max_node_losses_naming_the_nodes(nodes, tmp_path):
    gate = Gate(tmp_path)
    with Pool(3, backend="ray", max_node_losses=0) as pool:
        result = pool.map_async(partial(held, gate=gate, after=6), range(30), chunksize=1)
        gate.wait_started(3)
        lost = nodes.lose_spare()
        with pytest.raises(NodesLostError) as info:
            result.get(WAIT)
        gate.open()
        assert list(info.value.nodes) == [lost] and info.value.limit == 0
        assert lost in str(info.value) and "max_node_losses=0" in str(info.value)
        # Only that job failed: the pool goes on with the workers it has.
        assert [x for x, _, _ in pool.map(partial(held, gate=gate), range(5))] == list(range(5))


def test_an_actor_killed_from_outside_blames_no_item(nodes, tmp_path):
    gate = Gate(tmp_path)
    with Pool(3, backend="ray", max_deaths=1) as pool:
        result = pool.map_async(partial(held, gate=gate, after=6), range(30), chunksize=1)
        gate.wait_started(3)
        ray.kill(pool._backend.actors[0], no_restart=True)  # not the pool's doing
        gate.open()
        assert [x for x, _, _ in result.get(WAIT)] == list(range(30))


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_a_worker_ended_by_its_own_item_still_fails_that_item(nodes, how):
    # os._exit, or SIGKILL as the out-of-memory killer sends: the item is at fault.
    with Pool(3, backend="ray") as pool:
        results = pool.imap(partial(die_at, bad=4, how=how), range(10), chunksize=1)
        got: list = []
        for _ in range(10):
            try:
                got.append(results.next(WAIT))
            except RayWorkerDiedError as err:
                assert err.cause.kind == "worker died" and "No item is at fault" not in str(err)
                got.append(("died", err.items))
        assert ("died", [4]) in got
        # Others are delivered; one the actor finished just before dying may be
        # named with it (Ray had not sent its result yet), as on a local Ray.
        assert all(g in (k, ("died", [k])) for k, g in enumerate(got)), got
        assert pool.map(abs, [-1, -2, -3]) == [1, 2, 3]  # replaced


def test_a_ray_service_whose_node_is_lost_names_the_loss(nodes):
    from easycore.common.parallel.services import Service, ServiceDiedError

    spare = nodes.spare.node_id
    pinned = {"actor_options": {"num_cpus": 0, "resources": {"spare": 1}}}
    with Service.start(Tally, backend="ray", backend_options=pinned) as tally:
        assert tally.call("add", 2) == 2
        nodes.lose_spare()
        with pytest.raises(ServiceDiedError) as info:
            tally.call("add", 3, timeout=WAIT)
    assert info.value.cause.kind == "node lost" and info.value.cause.node_id == spare
    assert spare in str(info.value)


def test_no_room_is_an_error_after_capacity_timeout_not_a_hang(nodes, tmp_path):
    # At start: another pool holds 2 of the cluster's 3 CPUs. (The time counts from
    # the start to each actor's process running: long enough for the one with room.)
    with Pool(2, backend="ray"), pytest.raises(RayCapacityError) as info:
        Pool(2, backend="ray", capacity_timeout=10)
    assert info.value.starting and len(info.value.workers) == 1
    assert "within capacity_timeout=10 s of the start" in str(info.value)
    # Later: while a worker runs, the pool carries on and replacements wait ...
    gate = Gate(tmp_path)
    nodes.ensure_nodes()  # the two pools' CPUs are free again
    with Pool(3, backend="ray", capacity_timeout=10) as pool:
        result = pool.map_async(partial(held, gate=gate, after=6), range(20), chunksize=1)
        gate.wait_started(3)
        big = nodes.lose(nodes.big)
        gate.open()
        assert [x for x, _, _ in result.get(WAIT)] == list(range(20))
        # ... and once none runs, capacity_timeout later, everything fails: no hang.
        spare = nodes.lose_spare()
        start = time.monotonic()
        with pytest.raises(RayCapacityError) as info:
            pool.map(abs, range(10))
        assert time.monotonic() - start < WAIT
    err = info.value
    assert not err.starting and set(err.lost) == {big, spare} and big in str(err)
