"""A runner without set-up or end hooks under ``spawn``: its constructor returns once
one worker is ready, the others take work as they come, and ``close`` ends a worker
still starting at once instead of waiting for it only to let it exit."""

from __future__ import annotations

import threading

import pytest
from _slow_start import Doubles, DoublesWithEnd, HeldContext
from processes import kill_quietly, wait_gone

from easycore.common.parallel import Pool

pytestmark = pytest.mark.timeout(120)

#: the test's safety net: the held worker is let go after this many seconds whatever
#: happens, so that the old behaviour (waiting for every worker) fails, not hangs
RELEASE_AFTER = 15.0


@pytest.fixture
def gate(tmp_path, monkeypatch):
    monkeypatch.setenv("EASYCORE_TEST_GATE", str(tmp_path))  # spawned workers inherit it
    release = tmp_path / "release"
    timer = threading.Timer(RELEASE_AFTER, release.touch)
    timer.start()
    yield release
    timer.cancel()
    # A cancelled timer's thread still has to wake and end: joined here, so that it
    # is not running when the next test forks (a fork with a thread running fails it)
    timer.join(timeout=10)
    release.touch()


def _worker_pids(runner) -> list:
    return [h.pid for h in runner._engine.backend._handles]


def test_the_constructor_and_close_do_not_wait_for_a_worker_still_starting(gate, no_leaks):
    runner = Doubles(2, start_method="spawn")
    pids = _worker_pids(runner)
    try:
        assert not gate.exists()  # returned while the second worker is held
        assert sorted(runner(range(6))) == [0, 2, 4, 6, 8, 10]  # the ready worker took it all
        runner.close()
        assert not gate.exists()  # close did not wait for the held worker to start
        assert wait_gone(pids) == []
    finally:
        runner.close()
        kill_quietly(pids)


def test_a_worker_still_starting_is_waited_for_when_it_has_an_end_hook(gate, no_leaks):
    runner = DoublesWithEnd(2, start_method="spawn")
    try:
        assert not gate.exists()
        assert sorted(runner(range(4))) == [0, 2, 4, 6]
        gate.touch()  # the held worker may start now; close waits for its producer_end
        runner.close()
        assert len(list(gate.parent.glob("ended-*"))) == 2
    finally:
        runner.close()


def test_a_pool_joins_without_waiting_for_a_worker_still_starting(gate, no_leaks):
    # No initializer, the default device policy: nothing of the user's runs at a
    # worker's start or end (the same ``stop`` as the runner's).
    pool = Pool(2, start_method="spawn", worker_contexts=[None, HeldContext(str(gate))])
    pids = [h.pid for h in pool._backend._handles]
    try:
        assert pool.map(abs, [-1, -2, -3]) == [1, 2, 3]
        pool.close()
        pool.join()
        assert not gate.exists()  # join did not wait for the held worker to start
        assert wait_gone(pids) == []
    finally:
        pool.terminate()
        kill_quietly(pids)


def _coordinators() -> set:
    return {t for t in threading.enumerate() if t.name == "easycore-pool-coordinator"}


def test_a_fork_pool_waits_for_no_worker_nor_thread_when_nothing_of_the_users_starts(
        tmp_path, no_leaks):
    # Under fork a worker starts in milliseconds and nothing of the user's can fail
    # in it: the constructor returns at once (both workers are held here), and the
    # coordinator thread starts with the first job, not while they boot. (No timer
    # thread as the safety net: a fork from a process with threads fails the test;
    # the held workers let themselves go after RELEASE_AFTER seconds.)
    release = tmp_path / "release"
    held = HeldContext(str(release), limit=RELEASE_AFTER)
    before = _coordinators()
    pool = Pool(2, start_method="fork", worker_contexts=[held, held])
    try:
        assert list(tmp_path.glob("release.passed-*")) == []  # returned, no worker ready
        assert _coordinators() == before
        result = pool.apply_async(abs, (-3,))
        assert len(_coordinators() - before) == 1
        release.touch()
        assert result.get(timeout=60) == 3
    finally:
        release.touch()
        pool.terminate()
