"""A worker *taken away* (its node lost, killed from outside) blames no item (issue 38).

Ray tells such a death from one its item caused (``DeathCause``); the engine's rule
for it is the back-end's business nowhere else. Here a process back-end reports its
workers' deaths as Ray would report a lost node's, so that the rule is tested on
every machine, without Ray: the items run again (at least once), no ``max_deaths``
counts, a job past ``max_node_losses`` fails naming the nodes, and the pool goes on.
(The same, for real, on a local Ray cluster: ``tests/ray/test_ray_node_loss.py``.)
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import ClassVar

import pytest
from _engine_funcs import exit_at, exit_once_on

from easycore.common.parallel import NodesLostError, Pool, WorkerDiedError
from easycore.common.parallel.backends.base import WorkerExited
from easycore.common.parallel.backends.process import ProcessBackend
from easycore.common.parallel.errors import DeathCause

pytestmark = pytest.mark.timeout(180)

WAIT = 60


def _pool_whose_deaths_are(kind: str) -> type:
    """A Pool whose process back-end says each unexpected death was ``kind``
    (``"node lost"``: every worker of a slot on the node ``node-<slot>``)."""

    class TakenAway(ProcessBackend):
        def poll(self, timeout):
            return [(slot, m._replace(cause=DeathCause(kind, "as a test says", f"node-{slot}",
                                                       "127.0.0.1"))
                     if isinstance(m, WorkerExited) and not m.expected else m)
                    for slot, m in super().poll(timeout)]

    class TakenAwayPool(Pool):
        backends: ClassVar[dict] = {**Pool.backends, "process": TakenAway}

    return TakenAwayPool


def _runs(folder: Path) -> dict:
    counts: dict = {}
    for path in folder.glob("ran-*"):
        for line in path.read_text().split():
            counts[int(line)] = counts.get(int(line), 0) + 1
    return counts


@pytest.mark.parametrize("kind", ["node lost", "killed"])
@pytest.mark.parametrize("call", ["map", "imap", "imap_unordered"])
def test_a_worker_taken_away_fails_no_item_and_costs_no_death(kind, call, tmp_path, no_leaks):
    fn = functools.partial(exit_once_on, bad=7, folder=str(tmp_path))
    with _pool_whose_deaths_are(kind)(2, max_deaths=1) as pool:
        if call == "map":
            out = pool.map(fn, range(20), chunksize=3)
        else:
            it = getattr(pool, call)(fn, range(20), chunksize=3)
            out = [it.next(WAIT) for _ in range(20)]
        # max_deaths=1: one death blamed on an item would have failed it.
        assert pool.map(abs, [-1, -2]) == [1, 2]  # replaced, and the pool goes on
    expected = [x * x for x in range(20)]
    assert (sorted(out) if call == "imap_unordered" else out) == expected
    assert (tmp_path / "died-7").exists()
    assert _runs(tmp_path)[7] == 2  # at least once: the item taken away ran again


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_the_rule_holds_for_every_start_method(method, tmp_path, no_leaks):
    fn = functools.partial(exit_once_on, bad=4, folder=str(tmp_path))
    with _pool_whose_deaths_are("node lost")(2, max_deaths=1, start_method=method) as pool:
        assert pool.map(fn, range(8), chunksize=2) == [x * x for x in range(8)]
    assert _runs(tmp_path)[4] == 2


def test_a_job_taken_away_more_than_max_node_losses_fails_naming_them(no_leaks):
    # Killed from outside, each worker counts apart: the third loss is one too many.
    with _pool_whose_deaths_are("killed")(2, max_node_losses=2) as pool:
        with pytest.raises(NodesLostError) as info:
            pool.map(functools.partial(exit_at, bad=3), range(10), chunksize=1)
        assert pool.map(abs, [-1, -2]) == [1, 2]  # only that job failed
    err = info.value
    assert len(err.nodes) == 3 and err.limit == 2
    assert "max_node_losses=2" in str(err) and "killed" in str(err) and "node-" in str(err)


def test_one_node_counts_once_however_often_it_is_lost(tmp_path, no_leaks):
    # Slot 0's workers all live on node-0: its two losses count as one node.
    fn = functools.partial(exit_once_on, bad=(2, 5), folder=str(tmp_path))
    with _pool_whose_deaths_are("node lost")(1, max_node_losses=1) as pool:
        assert pool.map(fn, range(10), chunksize=1) == [x * x for x in range(10)]
    assert (tmp_path / "died-2").exists() and (tmp_path / "died-5").exists()


def test_an_item_that_kills_its_worker_is_still_blamed(no_leaks):
    # Its own process died (no cause, or "worker died"): that item fails alone.
    with _pool_whose_deaths_are("worker died")(2) as pool:
        it = pool.imap(functools.partial(exit_at, bad=3), range(6), chunksize=1)
        got = []
        for _ in range(6):
            try:
                got.append(it.next(WAIT))
            except WorkerDiedError as err:
                got.append(("died", err.items))
    assert got == [0, 1, 2, ("died", [3]), 4, 5]


def test_max_node_losses_is_checked():
    with pytest.raises(ValueError, match="max_node_losses"):
        Pool(1, max_node_losses=-1)
