"""Lean targets under fork: what exists before the workers are forked is inherited, not pickled.

A data set behind a bound method records every unpickling (``__reduce__``):
under ``fork`` no worker unpickles it (it reads the pages it inherited);
under ``spawn`` and ``forkserver`` each worker unpickles it exactly once.
Behaviour, not memory thresholds: the memory it saves is measured by
``benchmarks/bench_memory.py``.
"""

from __future__ import annotations

import multiprocessing
import pickle

import pytest
from _inherit_targets import Dataset, seen_unpickled, seen_unpickled_star

from easycore.common.parallel import BackgroundTask, JobQueue, Pool
from easycore.common.parallel._os import inherit

pytestmark = pytest.mark.timeout(120)

WAIT = 60.0
SPAWNED = [m for m in ("spawn", "forkserver") if m in multiprocessing.get_all_start_methods()]
BIG = 50 << 20  # a real ~50 MB object: a copy per worker would show in the memory
SMALL = 1 << 16


def results(task: BackgroundTask, n: int) -> list:
    return [task.get(timeout=WAIT) for _ in range(n)]


def test_background_task_under_fork_inherits_its_target_object(no_leaks):
    data = Dataset(BIG)
    with BackgroundTask(data.getbatch, workers=2, start_method="fork") as task:
        got = results(task, 6)
        pids = set(task.worker_pids)
    assert {pid for pid, _, _ in got} <= pids
    assert all(n == 0 for _, n, _ in got), got  # no worker unpickled the data set
    assert all(s == 16 for _, _, s in got)  # and each read it


@pytest.mark.parametrize("method", SPAWNED)
def test_background_task_under_spawn_pickles_its_target_once_per_worker(method, no_leaks):
    data = Dataset(SMALL)
    with BackgroundTask(data.getbatch, workers=2, start_method=method) as task:
        got = results(task, 6)
    assert all(n == 1 for _, n, _ in got), got  # once per worker, not per call


def test_background_task_reset_and_replacement_workers_still_inherit(no_leaks):
    data = Dataset(SMALL)
    with BackgroundTask(data.getbatch, workers=1, start_method="fork") as task:
        first = task.get(timeout=WAIT)
        task.reset()
        task._replace_pool()  # what reset does after the workers broke: fresh forks
        task._stream = task._start_stream()
        second = task.get(timeout=WAIT)
    assert first[1] == 0 and second[1] == 0
    assert first[0] != second[0]  # a new worker, forked later, still found it


@pytest.mark.parametrize("method", ["fork", *SPAWNED])
def test_pool_initializer_object_is_inherited_only_under_fork(method, no_leaks):
    data = Dataset(SMALL)
    with Pool(2, initializer=data.remember, start_method=method) as pool:
        seen = pool.broadcast(seen_unpickled)
    assert [ran for _, ran, _ in seen] == [1, 1]
    expected = 0 if method == "fork" else 1
    assert [n for _, _, n in seen] == [expected, expected], seen


@pytest.mark.parametrize("method", ["fork", *SPAWNED])
def test_job_queue_initializer_object_is_inherited_only_under_fork(method, no_leaks):
    data = Dataset(SMALL)
    with JobQueue(workers=1, initializer=data.remember, start_method=method) as q:
        q.put(seen_unpickled_star)
        _, ran, n = q.get(timeout=WAIT)
    assert ran == 1
    assert n == (0 if method == "fork" else 1)


def test_the_table_is_emptied_when_the_task_closes(no_leaks):
    before = set(inherit._TABLE)
    task = BackgroundTask(Dataset(SMALL).getbatch, workers=1, start_method="fork")
    try:
        task.get(timeout=WAIT)
        assert set(inherit._TABLE) - before  # the target and the program
    finally:
        task.close()
    assert set(inherit._TABLE) == before


def test_a_stand_in_unpickled_where_nothing_was_inherited_says_so():
    ref = inherit.keep(object())
    blob = pickle.dumps(ref)
    inherit.release(ref)
    with pytest.raises(RuntimeError, match="inherited"):
        pickle.loads(blob)
