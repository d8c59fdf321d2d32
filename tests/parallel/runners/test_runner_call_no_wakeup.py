"""A call wakes no coordinator that has nothing to do for it (issues 24 and 37:
kept-alive latency).

A runner's call pumps on the caller's thread: it writes no wake-up byte for a
coordinator it does not have. A pool's coordinator thread pumps, but a job
whose first chunk went out from the submitting thread needs nothing from it
until that chunk's result (or its worker's exit) wakes it; waking it anyway
cost every ``apply`` a thread switch. A job with a ``task_timeout`` still
wakes it: the coordinator's wait must end at the new deadline. The
coordinator's longest wait (``tick``) is a minute in the pool tests, so a
missing wake-up would outlast their bounds.
"""

from __future__ import annotations

import functools
import time

import pytest
from _parallel_helpers import _Collect

from easycore.common.parallel import OrderedRunner, Pool, ProcessBackend, TaskTimeoutError

pytestmark = pytest.mark.timeout(120)

SLACK = 5.0  # "within the timeout", with room for a slow, shared machine


class Twice(_Collect, OrderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return 2 * data


def _count_wakeups(backend, monkeypatch):
    calls = []
    real = backend.wakeup

    def counting():
        calls.append(1)
        real()

    monkeypatch.setattr(backend, "wakeup", counting)
    return calls


def square(x):
    return x * x


def test_a_runner_call_writes_no_wakeup(monkeypatch, no_leaks):
    with Twice(2) as runner:
        calls = _count_wakeups(runner._engine.backend, monkeypatch)
        for _ in range(5):
            assert runner([1, 2, 3]) == [2, 4, 6]
            assert runner([7]) == [14]
        assert calls == []


@pytest.fixture
def pool(monkeypatch, no_leaks):
    monkeypatch.setattr(ProcessBackend, "tick", 60.0)
    with Pool(1) as pool:
        assert pool.apply(square, (3,)) == 9  # ready, kept alive, its coordinator idle
        yield pool


def test_a_pool_call_whose_chunk_went_out_does_not_wake_the_coordinator(pool, monkeypatch):
    calls = _count_wakeups(pool._engine.backend, monkeypatch)
    for x in range(20):
        assert pool.apply(square, (x,)) == x * x
    assert pool.map(square, range(5)) == [x * x for x in range(5)]
    assert calls == []


@pytest.mark.parametrize("call", ["apply", "apply_async"])
def test_a_pool_call_with_a_task_timeout_wakes_it_and_ends_at_its_deadline(pool, monkeypatch, call):
    calls = _count_wakeups(pool._engine.backend, monkeypatch)
    start = time.monotonic()
    with pytest.raises(TaskTimeoutError):
        if call == "apply":
            pool.apply(functools.partial(time.sleep, 60), task_timeout=1.0)
        else:
            pool.apply_async(functools.partial(time.sleep, 60), task_timeout=1.0).get(60)
    assert time.monotonic() - start < 1.0 + SLACK
    assert calls  # the new deadline woke the coordinator
    assert pool.apply(square, (4,)) == 16  # the stuck worker was replaced


def test_a_pool_job_that_could_not_send_at_once_still_runs(pool):
    # More chunks than the one worker's credits: the coordinator sends the
    # rest as results come back.
    assert pool.map(square, range(200), chunksize=1) == [x * x for x in range(200)]
    results = [pool.apply_async(square, (x,)) for x in range(50)]
    assert [r.get(30) for r in results] == [x * x for x in range(50)]
