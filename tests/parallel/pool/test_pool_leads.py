"""A blocking call pumps for its own job while it is the pool's only one (``engine.turns``).

What must hold with the coordinator parked: the results and errors of the
blocking calls; another thread's job runs while a blocking call is held (the
leader stops leading), its callback on the coordinator thread, never on the
thread of the blocking call; a worker that dies while the pool is idle is
replaced without another call; a failure between the job's submission and
the lead (a Ctrl-C there) gives the pump back; timeouts still fire.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time

import pytest
from _pool_funcs import TaskError, announce_then_hold, fail_on, nap, square, wait_for_file

from easycore.common.parallel import Pool, RunnerClosedError, TaskTimeoutError
from easycore.common.parallel.engine import door
from easycore.common.parallel.engine.turns import LINGER

pytestmark = pytest.mark.timeout(120)

WAIT = 30.0


@pytest.mark.parametrize("backend", ["process", "thread"])
def test_calls_one_after_another_lead_and_the_coordinator_parks(backend, no_leaks):
    with Pool(2, backend=backend) as pool:
        assert [pool.apply(square, (i,)) for i in range(20)] == [i * i for i in range(20)]
        assert pool.map(square, range(50)) == [i * i for i in range(50)]
        assert pool.starmap(pow, [(2, 3), (3, 2)]) == [8, 9]
        assert pool.broadcast(square, 3) == [9, 9]
        with pytest.raises(TaskError, match="3"):
            pool.apply(fail_on, (3,))
        turns = pool._engine.turns
        assert pool._engine.state.led is None  # every lead gave the pump back
        # The calls came one after another: the coordinator parked for them.
        assert turns.coordinator in ("parked", "pumping")
        pool.apply(square, (1,))
        assert turns.parked


def test_another_threads_job_runs_while_a_blocking_call_is_held(tmp_path, no_leaks):
    hold = functools.partial(announce_then_hold, folder=str(tmp_path))
    seen = {}
    done = threading.Event()

    def other():
        wait_for_file(tmp_path / "0", WAIT)  # the blocking call's job runs
        result = pool.apply_async(
            square, (5,), callback=lambda value: seen.update(
                value=value, thread=threading.current_thread().name))
        seen["got"] = result.get(timeout=WAIT)
        seen["held"] = not (tmp_path / "release").exists()
        (tmp_path / "release").touch()
        done.set()

    with Pool(2) as pool:
        # Both workers ready first: a worker still starting (forkserver, spawn) leaves
        # the other thread's job to queue behind the held one on the only ready worker.
        assert pool.broadcast(square, 2) == [4, 4]  # (and the next call leads)
        thread = threading.Thread(target=other)
        thread.start()
        try:
            assert pool.apply(hold, (0,)) == 0
        finally:
            (tmp_path / "release").touch()
            thread.join(WAIT)
        assert done.is_set()
        assert seen["got"] == 25 and seen["value"] == 25
        assert seen["held"]  # answered while the blocking call still waited
        assert seen["thread"] == "easycore-pool-coordinator"  # never the caller's thread
        assert pool.apply(square, (6,)) == 36


def test_a_worker_that_dies_while_the_pool_is_idle_is_replaced_without_a_call(no_leaks):
    with Pool(2) as pool:
        for i in range(10):
            pool.apply(square, (i,))
        assert pool._engine.turns.parked
        victim = pool.worker_pids[0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            pids = pool.worker_pids
            if victim not in pids and all(pid is not None for pid in pids):
                break
            time.sleep(LINGER)
        assert victim not in pool.worker_pids
        assert pool.apply(square, (7,)) == 49


def test_an_error_between_the_submission_and_the_lead_gives_the_pump_back(no_leaks):
    with Pool(2) as pool:
        pool.apply(square, (1,))

        def start():  # the job is made (and led), then a Ctrl-C lands
            pool.apply_async(square, (3,))
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            door.blocking_call(pool._engine, pool._coordinator, pool._submitted, start)
        assert pool._engine.state.led is None
        assert pool.apply_async(square, (4,)).get(timeout=WAIT) == 16
        assert pool.apply(square, (5,)) == 25


def test_a_led_call_still_times_out(no_leaks):
    with Pool(1) as pool:
        pool.apply(square, (1,))
        with pytest.raises(TaskTimeoutError):
            pool.apply(nap, (WAIT,), task_timeout=0.3)
        assert pool.apply(square, (8,)) == 64


def test_a_close_from_another_thread_ends_a_led_call(tmp_path, no_leaks):
    hold = functools.partial(announce_then_hold, folder=str(tmp_path))
    pool = Pool(2)
    try:
        pool.apply(square, (1,))

        def stop():
            wait_for_file(tmp_path / "0", WAIT)
            pool.terminate()

        thread = threading.Thread(target=stop)
        thread.start()
        with pytest.raises(RunnerClosedError):
            pool.apply(hold, (0,))
        thread.join(WAIT)
    finally:
        (tmp_path / "release").touch()
        pool.terminate()

