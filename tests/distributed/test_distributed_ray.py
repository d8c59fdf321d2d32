"""``spawn(launcher="ray")`` and ``DistributedRunner(backend="ray")`` on a local Ray.

One Ray for the module, on loopback, with 3 declared CPUs (one per rank);
rank 0 hosts the store on the address Ray knows its node by (127.0.0.1 here).
"""

from __future__ import annotations

import os

import pytest
import torch
from _dist_helpers import TutorialPredictor, batch_generator, collectives, raise_on_rank_1
from _dist_support import is_loopback, read_pids
from processes import wait_gone

from easycore.torch.distributed import WorkerError, spawn

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples")


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray whose workers import the helpers (this folder and examples/)."""
    assert not ray.is_initialized()
    saved = {"PYTHONPATH": os.environ.get("PYTHONPATH")}
    paths = (HERE, EXAMPLES, saved["PYTHONPATH"])
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    try:
        ray.init(address="local", num_cpus=3, include_dashboard=False,
                 _node_ip_address="127.0.0.1", object_store_memory=300 << 20,
                 log_to_driver=False)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    try:
        yield ray
    finally:
        ray.shutdown()


def test_spawn_on_ray_actors(local_ray, tmp_path):
    results = spawn(collectives, 3, 2.0, launcher="ray")
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert [r["total"] for r in results] == [6.0, 6.0, 6.0]
    assert [r["shared"] for r in results] == [2.0, 2.0, 2.0]
    assert torch.equal(results[2]["gathered"], torch.tensor([[0.0, 0.0], [1.0, 2.0], [2.0, 4.0]]))
    assert results[0]["received"] == ([(1, 10.0), (2, 20.0)], (2, -1.0))
    # rank 0 hosted the store (not the caller), on loopback, as every rank's gloo did
    addresses = {a for r in results for a in r["listening"]}
    assert addresses and all(map(is_loopback, addresses)), addresses
    assert wait_gone([r["pid"] for r in results]) == []


def test_a_raising_rank_on_ray(local_ray, tmp_path):
    with pytest.raises(WorkerError) as info:
        spawn(raise_on_rank_1, 3, str(tmp_path), launcher="ray", timeout=120)
    assert info.value.rank == 1 and "rank 1 gives up" in str(info.value)
    pids = read_pids(tmp_path)
    assert len(pids) == 3 and wait_gone(pids) == []


def test_distributed_runner_on_ray(local_ray, tmp_path):
    with TutorialPredictor(devices=2, cfg={"out_dir": str(tmp_path)}, backend="ray") as runner:
        result = runner(batch_generator(list(range(40)), 10))
    assert result.shape == (40, 3)
    assert sorted(p.read_text() for p in tmp_path.glob("rank-*.txt")) == [
        "0 2 cpu 4", "1 2 cpu 4"
    ]
