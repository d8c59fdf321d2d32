"""A runner's call pumps on the caller's thread: it writes no wake-up byte for a
coordinator it does not have (issue 24: kept-alive latency), while a pool,
whose coordinator thread pumps, still wakes it for every job."""

from __future__ import annotations

import pytest
from _parallel_helpers import _Collect

from easycore.common.parallel import OrderedRunner, Pool

pytestmark = pytest.mark.timeout(120)


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


def test_a_runner_call_writes_no_wakeup(monkeypatch, no_leaks):
    with Twice(2) as runner:
        calls = _count_wakeups(runner._engine.backend, monkeypatch)
        for _ in range(5):
            assert runner([1, 2, 3]) == [2, 4, 6]
            assert runner([7]) == [14]
        assert calls == []


def test_a_pool_still_wakes_its_coordinator(monkeypatch, no_leaks):
    with Pool(2) as pool:
        calls = _count_wakeups(pool._engine.backend, monkeypatch)
        assert pool.apply(abs, (-3,)) == 3
        assert calls  # the coordinator thread learnt of the job
