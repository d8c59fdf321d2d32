"""Workers that die (``os._exit``, SIGKILL from inside or from outside): the pool survives.

The error names the items the dead worker held, the items queued behind it
run elsewhere, a replacement (initializer included) takes its place, the
other workers are untouched, and a function that kills every worker it
touches fails its job after ``max_deaths`` instead of killing workers forever.
"""

from __future__ import annotations

import functools
import os
import signal
import threading

import pytest
from _pool_funcs import (
    always_exit,
    announce_then_block,
    exit_on,
    remember,
    remembered,
    square,
    wait_for_file,
    worker_pid,
)

from easycore.common.parallel import Pool, WorkerDiedError

pytestmark = pytest.mark.timeout(120)

WAIT = 30


def _collect(it):
    """Every result of an imap iterator; a failed item gives ``("died", items)``."""
    out = []
    while True:
        try:
            out.append(it.next(timeout=WAIT))
        except StopIteration:
            return out
        except WorkerDiedError as exc:
            out.append(("died", exc.items))


@pytest.mark.parametrize("how, exitcode", [("exit", 7), ("sigkill", -signal.SIGKILL)])
def test_a_task_that_kills_its_worker_fails_naming_the_item(how, exitcode, no_leaks):
    with Pool(2) as pool:
        before = pool.worker_pids
        with pytest.raises(WorkerDiedError) as info:
            pool.map(functools.partial(exit_on, bad=3, how=how), range(8), 1)
        err = info.value
        assert err.items == [3] and err.exitcode == exitcode and err.device == "cpu"
        assert err.pid == before[err.worker_index]
        assert "item 3" in str(err) and f"worker {err.worker_index}" in str(err)
        if how == "sigkill":
            assert "SIGKILL" in str(err)
        # The pool keeps serving: a new worker in the dead one's place only.
        assert pool.map(square, range(10)) == [x * x for x in range(10)]
        after = pool.worker_pids
        assert after[err.worker_index] not in (None, before[err.worker_index])
        assert after[1 - err.worker_index] == before[1 - err.worker_index]


def test_imap_raises_the_dead_item_in_its_place_and_runs_the_rest(no_leaks):
    with Pool(2) as pool:
        got = _collect(pool.imap(functools.partial(exit_on, bad=3), range(12), 1))
    assert got == [0, 1, 2, ("died", [3]), *range(4, 12)]


def test_with_automatic_chunks_every_item_is_delivered_or_named(no_leaks):
    with Pool(2) as pool:
        got = _collect(pool.imap_unordered(functools.partial(exit_on, bad=37), range(200)))
    failures = [g[1] for g in got if isinstance(g, tuple)]
    done = [g for g in got if not isinstance(g, tuple)]
    # Even without a task_timeout the worker says which item of its chunk
    # runs: only that one fails, its chunk mates run elsewhere.
    assert failures == [[37]]
    assert sorted([*done, 37]) == list(range(200))  # none missing, none twice


def test_with_a_task_timeout_only_the_dead_item_fails_and_its_chunk_mates_rerun(no_leaks):
    # With a timeout the worker says which item runs: the others of its chunk
    # (run or not yet) go again elsewhere.
    with Pool(2) as pool:
        got = _collect(pool.imap_unordered(functools.partial(exit_on, bad=37), range(200),
                                           task_timeout=60))
    assert ("died", [37]) in got
    assert sorted(g for g in got if not isinstance(g, tuple)) == [
        x for x in range(200) if x != 37
    ]


def test_a_worker_killed_from_outside_fails_its_item_and_the_queued_items_complete(
        tmp_path, no_leaks):
    with Pool(2) as pool:
        before = pool.worker_pids
        block = functools.partial(announce_then_block, folder=str(tmp_path), block=0)
        it = pool.imap(block, range(30), 1)
        victim = int(wait_for_file(tmp_path / "0"))
        assert victim in before
        os.kill(victim, signal.SIGKILL)
        got = _collect(it)
        assert got == [("died", [0]), *range(1, 30)]
        assert pool.map(square, [3]) == [9]
        after = pool.worker_pids
        assert victim not in after and len(set(after)) == 2
        assert set(before) - {victim} <= set(after)


def test_the_error_of_an_outside_kill_says_sigkill(tmp_path, no_leaks):
    with Pool(1) as pool:
        result = pool.apply_async(announce_then_block, (0, str(tmp_path)))
        victim = int(wait_for_file(tmp_path / "0"))
        os.kill(victim, signal.SIGKILL)
        with pytest.raises(WorkerDiedError, match="SIGKILL") as info:
            result.get(timeout=WAIT)
        assert info.value.pid == victim and info.value.items == [0]
        assert pool.apply(worker_pid) != victim


def test_a_replacement_worker_runs_the_initializer_again(no_leaks):
    with Pool(2, initializer=remember, initargs=("init",)) as pool:
        with pytest.raises(WorkerDiedError) as info:
            pool.apply(always_exit, (0,))
        state = pool.broadcast(remembered)
        assert [tag for tag, _ in state] == ["init", "init"]
        replaced = info.value.worker_index
        assert state[replaced][1] == pool.worker_pids[replaced] != info.value.pid


def test_a_function_that_kills_every_worker_fails_its_job_after_max_deaths(no_leaks):
    with Pool(2, max_deaths=3) as pool:
        before = set(pool.worker_pids)
        got = _collect(pool.imap(always_exit, range(50), 1))
        # A few items fail one by one; at the third death the whole job ends.
        assert 1 <= len(got) <= 3 and all(g[0] == "died" for g in got)
        assert pool.map(square, range(4)) == [0, 1, 4, 9]
        after = set(pool.worker_pids)
        assert len(after) == 2 and not before & after


def test_max_deaths_counts_per_job(no_leaks):
    with Pool(2, max_deaths=2) as pool:
        for _ in range(3):  # more deaths in all than max_deaths: each job is judged alone
            with pytest.raises(WorkerDiedError):
                pool.apply(always_exit, (0,))
        assert pool.apply(square, (5,)) == 25


def test_a_death_in_one_job_leaves_a_concurrent_job_intact(no_leaks):
    with Pool(2) as pool:
        results = {}

        def mapping():
            results["map"] = pool.map(square, range(300), 1)

        thread = threading.Thread(target=mapping)
        thread.start()
        with pytest.raises(WorkerDiedError):
            pool.apply(always_exit, (0,))
        thread.join(WAIT)
        assert not thread.is_alive()
        assert results["map"] == [x * x for x in range(300)]


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_replacements_start_under_the_pools_start_method(method, no_leaks):
    with Pool(2, start_method=method) as pool:
        got = _collect(pool.imap(functools.partial(exit_on, bad=1), range(6), 1))
        assert got == [0, ("died", [1]), 2, 3, 4, 5]
        assert len(set(pool.broadcast(worker_pid))) == 2
