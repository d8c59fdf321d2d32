"""Memory per worker: peaks in insights, and ``max_worker_memory``.

A worker whose resident memory passed the limit after an item is replaced
before its next item; no item fails or is lost; insights count the
replacements. Each call of ``grow`` keeps 40 MB for good and reports the
process that ran it and what that process then held, so the test can check
that no process ran an item after it had passed the limit.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from _stack_funcs import GROWTH, GrowingRunner, grow

from easycore.common.parallel import BackgroundTask, JobQueue, Pool
from easycore.common.parallel._os import memory
from easycore.common.parallel.insights import Insights, Recorder
from easycore.common.parallel.options import WorkerOptions, check_memory_limit

pytestmark = pytest.mark.timeout(180)
needs_proc = pytest.mark.skipif(not memory.AVAILABLE, reason="needs /proc (Linux)")

WAIT = 60
LIMIT = 150_000_000  # a fresh worker holds far less; four items far more


def _check_replaced_in_time(results, limit=LIMIT):
    """Every item ran; a process past ``limit`` after an item ran no other item after it."""
    by_pid = defaultdict(list)
    for x, pid, rss in results:
        by_pid[pid].append((x, rss))
    for pid, items in by_pid.items():
        over = [k for k, (_, rss) in enumerate(items) if rss > limit]
        assert not over or over == [len(items) - 1], (pid, items)
    return by_pid


@pytest.mark.parametrize("value, expected", [
    (1024, 1024), ("2 GB", 2 * 10**9), ("512MiB", 512 * 2**20), ("1.5 gb", 1_500_000_000),
    ("100 MB", 10**8), (None, None),
])
def test_a_limit_is_bytes_or_a_size_with_a_unit(value, expected):
    assert check_memory_limit(value) == expected
    assert WorkerOptions(max_worker_memory=value).max_worker_memory == expected


@pytest.mark.parametrize("value", ["2 XB", "lots", "", 0, -5, True, 1.5, "-1 GB"])
def test_a_bad_limit_is_refused_naming_the_option(value):
    with pytest.raises(ValueError, match="max_worker_memory"):
        WorkerOptions(max_worker_memory=value)


@needs_proc
@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_a_pool_worker_over_the_limit_is_replaced_before_its_next_item(method, no_leaks):
    with Pool(2, start_method=method, max_worker_memory=LIMIT, insights=True) as pool:
        results = pool.map(grow, range(12), 1)
        assert [r[0] for r in results] == list(range(12))  # none failed, none lost
        by_pid = _check_replaced_in_time(results)
        assert len(by_pid) > 2  # replacements ran items
        insights = pool.insights()
        replaced = sum(w.memory_replacements for w in insights.workers)
        assert replaced >= len(by_pid) - 2
        for w in insights.workers:
            assert w.peak_rss is not None and w.peak_rss > LIMIT
            assert w.peak_uss is not None and 0 < w.peak_uss <= w.peak_rss
        data = json.loads(insights.to_json())
        assert data["workers"][0]["peak_rss"] == insights.workers[0].peak_rss
        assert Insights.from_dict(data).workers[1].memory_replacements == \
            insights.workers[1].memory_replacements
        assert "peak memory, MB: 0 RSS" in str(insights) and "replaced" in str(insights)
        assert pool.map(abs, [-1]) == [1]


@needs_proc
def test_background_task_job_queue_and_runners_take_the_limit_too(no_leaks):
    with JobQueue(2, max_worker_memory="150 MB") as jobs:
        for k in range(10):
            jobs.put(grow, k)
        results = [jobs.get(timeout=WAIT) for _ in range(10)]
    assert sorted(r[0] for r in results) == list(range(10))
    assert len(_check_replaced_in_time(results)) > 2
    with BackgroundTask(grow, (0,), max_worker_memory=LIMIT) as task:
        results = [task.get(timeout=WAIT) for _ in range(8)]
    assert len(_check_replaced_in_time(results)) > 1
    with GrowingRunner(["cpu", "cpu"], max_worker_memory=LIMIT, start_method="spawn") as runner:
        results = runner(range(12))
    assert sorted(r[0] for r in results) == list(range(12))
    assert len(_check_replaced_in_time(results)) > 2


def test_a_back_end_that_cannot_measure_refuses_the_limit(no_leaks):
    with pytest.raises(ValueError, match=r"max_worker_memory.*backend='thread'"):
        Pool(1, backend="thread", max_worker_memory="1 GB")


@needs_proc
def test_insights_without_a_limit_carry_each_workers_peak(no_leaks):
    with Pool(2, insights=True) as pool:
        pool.map(grow, range(2), 1)
        insights = pool.insights()
    peaks = [w.peak_rss for w in insights.workers if w.items]
    assert peaks and all(p >= GROWTH for p in peaks)
    assert all(w.memory_replacements == 0 for w in insights.workers)


def test_the_progress_bar_shows_the_largest_worker():
    recorder = Recorder(["cpu", "cpu"])
    assert "RSS" not in recorder.live()
    recorder.memory(0, 150_000_000, 90_000_000)
    recorder.memory(1, 2_000_000_000, None)
    recorder.memory(1, 1_000_000_000, None)  # a peak is kept
    assert recorder.live().endswith(", RSS 2000 MB")
    assert recorder.snapshot().workers[1].peak_rss == 2_000_000_000
