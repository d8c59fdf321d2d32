"""A runner without init hooks does not wait for its workers to start (issue 24, item 4).

Its constructor returns once the workers are forked; they read the first
call's items when they have started, each its own share (not all on the
first one ready), and a worker that fails to start fails that call. A runner
with ``producer_init`` (or ``setup_worker``) still waits, to raise its error
(``test_parallel_errors.py``), and so does one whose workers are spawned (they
import the runner class, which can fail: ``test_parallel_reliability.py``).

Each worker's start is held up at a gate (a transport whose ``decode_cfg``,
the last step of a worker's start, waits for an Event the test sets), so what
"before the workers started" means is decided by the test, not by timing.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading

import pytest
from _parallel_helpers import _Collect

from easycore.common.parallel import (
    RunnerClosedError,
    SharedMemoryTransport,
    UnorderedRunner,
    WorkerError,
)

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs the fork start method"),
]

_fork = multiprocessing.get_context("fork") if sys.platform.startswith("linux") else None
#: inherited by the forked workers: set by a test to let them finish starting
GATE = _fork.Event() if _fork is not None else None
#: two items meet here, so both must run at once: on two workers
MEET = _fork.Barrier(2) if _fork is not None else None


class GatedTransport(SharedMemoryTransport):
    def decode_cfg(self, payload):
        if not GATE.wait(60):
            raise TimeoutError("the test never opened the gate")
        return super().decode_cfg(payload)


class BrokenStartTransport(SharedMemoryTransport):
    def decode_cfg(self, payload):
        raise ValueError("this worker cannot start")


class Pids(_Collect, UnorderedRunner):
    """No init hooks: the constructor has nothing to wait for."""

    default_start_method = "fork"
    transport_class = GatedTransport

    @staticmethod
    def producer_work(device, cfg, data):
        if data == "meet":
            MEET.wait(60)  # both items at once: a worker each
        return os.getpid()


class PidsWithInit(Pids):
    @staticmethod
    def producer_init(device, cfg):
        cfg.ready = True


class BrokenStart(Pids):
    transport_class = BrokenStartTransport


@pytest.fixture(autouse=True)
def _fresh_gate():
    GATE.clear()
    MEET.reset()
    yield
    GATE.set()  # never leave a worker waiting


def _construct_in_thread(cls, *args, **kwargs):
    made = {}
    done = threading.Event()

    def make():
        try:
            made["runner"] = cls(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            made["error"] = exc
        done.set()

    threading.Thread(target=make, daemon=True).start()
    return made, done


@pytest.mark.forks_with_threads  # started from a thread
def test_the_constructor_returns_before_the_workers_started(no_leaks):
    made, done = _construct_in_thread(Pids, 2)
    # The workers cannot finish starting until the gate opens.
    assert done.wait(30), "the constructor waited for the workers' start"
    runner = made["runner"]
    try:
        assert len(runner.worker_pids) == 2 and all(runner.worker_pids)
        GATE.set()
        pids = runner(range(6))
        assert len(pids) == 6 and set(pids) <= set(runner.worker_pids)
    finally:
        runner.close()


def test_the_first_items_go_to_every_worker_not_the_first_one_ready(no_leaks):
    GATE.set()
    runner = Pids(2)
    try:
        # Both items must run at the same time (they meet at a barrier): had
        # they both gone to one worker, the barrier would break.
        pids = runner(["meet", "meet"])
        assert sorted(pids) == sorted(runner.worker_pids)
    finally:
        runner.close()


@pytest.mark.forks_with_threads  # started from a thread
def test_a_runner_with_producer_init_still_waits_for_every_worker(no_leaks):
    made, done = _construct_in_thread(PidsWithInit, 2)
    try:
        assert not done.wait(1.0), "the constructor did not wait for producer_init"
        GATE.set()
        assert done.wait(60)
        assert "error" not in made
    finally:
        GATE.set()
        done.wait(60)
        if "runner" in made:
            made["runner"].close()


def test_a_worker_that_cannot_start_fails_the_first_call(no_leaks):
    runner = BrokenStart(2)  # nothing to wait for: the start's failure comes later
    with pytest.raises(WorkerError, match="cannot start") as info:
        runner(range(4))
    assert "receiving cfg" in str(info.value)
    assert not runner.is_activate
    with pytest.raises(RunnerClosedError):
        runner([1])


def test_close_right_after_the_constructor_ends_starting_workers(no_leaks):
    for _ in range(3):
        runner = Pids(2)
        GATE.set()
        runner.close()  # the workers are still starting: they end all the same
        assert not runner.is_activate
        GATE.clear()
