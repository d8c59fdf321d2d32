"""Workers started off the main thread, and the launcher thread that starts them.

A worker's parent-death signal follows the *thread* that forked it, so a
worker started from another thread (a pool made in a thread, a replacement
started by a pool's coordinator) is started by a launcher thread that lives
as long as the worker. It must not live longer: a thread left behind makes
every later fork in the process a fork from a multi-threaded process (CPython
3.12+ warns, and a lock held by that thread stays held in the child). The
``no_leaks`` fixture fails a test that leaves the launcher running.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest
from _engine_funcs import pid, square
from processes import in_thread

from easycore.common.parallel import Pool

pytestmark = pytest.mark.timeout(180)

WAIT = 60
LAUNCHER = "easycore-launcher"


def launchers() -> list:
    return [t for t in threading.enumerate() if t.name == LAUNCHER]


def in_a_thread(fn):
    """``fn()`` in a thread that has ended when this returns; what it returned."""
    finished, value = in_thread(fn, WAIT)
    assert finished
    if isinstance(value, BaseException):
        raise value
    return value


@pytest.mark.parametrize("method", [
    "spawn",
    # a fork from the launcher: the main thread runs too (docs/platforms.md says so)
    pytest.param("fork", marks=pytest.mark.forks_with_threads),
])
def test_the_launcher_ends_with_the_back_end_whose_workers_it_started(method, no_leaks):
    def use() -> list:
        with Pool(2, start_method=method) as pool:
            assert launchers()  # started off the main thread: by the launcher
            return pool.map(square, range(10))

    assert in_a_thread(use) == [x * x for x in range(10)]
    assert launchers() == []  # gone at close, not at some later tick


def test_a_pool_made_in_a_thread_that_ended_keeps_its_workers(no_leaks):
    pool = in_a_thread(lambda: Pool(2, start_method="spawn"))
    try:
        # The thread that asked for the workers is gone; the one that forked
        # them is not, so their parent-death signal has not fired.
        assert pool.map(square, range(10)) == [x * x for x in range(10)]
        assert len(launchers()) == 1
    finally:
        pool.close()
        pool.join()
    assert launchers() == []


def test_the_launcher_stays_while_another_back_ends_workers_live(no_leaks):
    first = in_a_thread(lambda: Pool(1, start_method="spawn"))
    second = in_a_thread(lambda: Pool(1, start_method="spawn"))
    try:
        first.close()
        first.join()
        assert len(launchers()) == 1  # the second pool's worker is its child
        assert second.apply(square, (4,)) == 16
    finally:
        second.close()
        second.join()
    assert launchers() == []


def test_forkserver_workers_need_no_launcher(no_leaks):
    # The fork server forks them: the thread that asks is not their parent.
    def use() -> tuple:
        with Pool(2, start_method="forkserver") as pool:
            return pool.map(square, range(4)), launchers()

    results, running = in_a_thread(use)
    assert results == [0, 1, 4, 9] and running == []


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_replacement_started_by_the_coordinator_leaves_no_launcher(method, no_leaks):
    with Pool(1, start_method=method, max_deaths=5) as pool:
        victim = pool.worker_pids[0]
        os.kill(victim, signal.SIGKILL)
        assert pool.map(square, range(6), 1) == [x * x for x in range(6)]
        pool.broadcast(pid)
        assert pool.worker_pids[0] != victim
    assert launchers() == []
