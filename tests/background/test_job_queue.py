"""JobQueue: elektronn2's SharedQ as a FIFO of jobs on reused workers."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import queue
import threading
import time

import numpy as np
import pytest
from _background_targets import die, draws, fail, identity, pid, wait_for

from easycore.common.parallel import JobQueue, RunnerClosedError, WorkerDiedError, WorkerError

pytestmark = pytest.mark.timeout(120)

WAIT = 30.0
METHODS = [m for m in ("fork", "forkserver", "spawn")
           if m in multiprocessing.get_all_start_methods()]


def test_the_shared_q_pattern_keeps_jobs_ahead(no_leaks):
    # SharedQ's docs example: start jobs, then get one and start one per step.
    with JobQueue(workers=2) as q:
        q.put(np.full, (100, 100), 0.0)
        q.put(np.full, (100, 100), 1.0)
        for i in range(5):
            q.put(np.full, (100, 100), float(i + 2))
            item = q.get(timeout=WAIT)  # processes work in the background meanwhile
            assert item.shape == (100, 100) and np.all(item == i)
        assert len(q) == 2


def test_get_is_fifo_however_long_each_job_takes(no_leaks, tmp_path):
    go = tmp_path / "go"
    with JobQueue(workers=3) as q:
        slow = q.put(wait_for, str(go), value="a")  # finishes last ...
        fast = [q.put(identity, v) for v in "bcde"]
        concurrent.futures.wait(fast, WAIT)
        assert all(f.done() for f in fast) and not slow.done()
        go.touch()
        assert [q.get(timeout=WAIT) for _ in range(5)] == list("abcde")  # ... comes first
        assert len(q) == 0


def test_uneven_durations_many_jobs(no_leaks):
    with JobQueue(workers=2) as q:
        durations = [0.15, 0.0, 0.05, 0.0, 0.1, 0.0, 0.0, 0.02]
        for k, seconds in enumerate(durations):
            q.put(time.sleep, seconds)
            q.put(identity, k)
        results = [q.get(timeout=WAIT) for _ in range(2 * len(durations))]
    assert results[1::2] == list(range(len(durations)))
    assert results[0::2] == [None] * len(durations)


def test_workers_are_reused_not_a_process_per_job(no_leaks):
    with JobQueue(workers=2) as q:
        pids = {q.put(pid).result(WAIT) for _ in range(20)}
        assert pids <= set(q.worker_pids) and len(pids) <= 2


def test_futures_and_arrays_both_ways(no_leaks):
    a = np.arange(1_000_000, dtype=np.float64)  # 8 MB: through shared memory
    with JobQueue() as q:
        future = q.put(np.multiply, a, 2.0)
        assert isinstance(future, concurrent.futures.Future)
        assert np.array_equal(q.get(timeout=WAIT), a * 2)
        assert future.done() and np.array_equal(future.result(), a * 2)


def test_a_raising_job_raises_worker_error_and_the_queue_goes_on(no_leaks):
    with JobQueue() as q:
        bad = q.put(fail, "bad job")
        q.put(identity, 1)
        with pytest.raises(WorkerError, match="bad job") as info:
            q.get(timeout=WAIT)
        assert isinstance(info.value.__cause__, ValueError)
        assert "_background_targets.py" in info.value.remote_traceback
        assert bad.exception() is info.value
        assert q.get(timeout=WAIT) == 1


def test_a_job_that_kills_its_worker_fails_alone(no_leaks):
    with JobQueue(workers=1) as q:
        old = q.worker_pids[0]
        q.put(die, 9)
        q.put(pid)
        with pytest.raises(WorkerDiedError, match="exit code 9") as info:
            q.get(timeout=WAIT)
        assert info.value.pid == old
        assert q.get(timeout=WAIT) not in (old, None)


def test_get_timeout(no_leaks, tmp_path):
    go = tmp_path / "go"
    with JobQueue() as q:
        with pytest.raises(TimeoutError):  # nothing was put
            q.get(timeout=0.1)
        q.put(wait_for, str(go), value=5)
        with pytest.raises(TimeoutError):  # the oldest job runs on
            q.get(timeout=0.2)
        assert len(q) == 1
        go.touch()
        assert q.get(timeout=WAIT) == 5


def test_a_job_timeout_is_not_a_get_timeout(no_leaks):
    with JobQueue(task_timeout=0.3) as q:
        q.put(time.sleep, 30)
        with pytest.raises(TimeoutError) as info:
            q.get(timeout=WAIT)
        assert "task_timeout" in str(info.value)  # the job's TaskTimeoutError
        assert len(q) == 0


def test_maxsize_blocks_put_until_a_get(no_leaks):
    with JobQueue(workers=1, maxsize=2) as q:
        q.put(identity, 1)
        q.put(identity, 2)
        with pytest.raises(queue.Full):
            q.put_nowait(identity, 3)
        done = threading.Event()

        def producer() -> None:
            q.put(identity, 3)
            done.set()

        thread = threading.Thread(target=producer)
        thread.start()
        assert not done.wait(0.3)  # blocked while full (a negative wait)
        assert q.get(timeout=WAIT) == 1
        assert done.wait(WAIT)
        thread.join(WAIT)
        assert [q.get(timeout=WAIT) for _ in range(2)] == [2, 3]


def test_a_seed_makes_each_job_reproducible_whichever_worker_runs_it(no_leaks):
    def run(workers: int, seed: int) -> list:
        with JobQueue(workers, seed=seed) as q:
            for _ in range(6):
                q.put(draws)
            return [q.get(timeout=WAIT) for _ in range(6)]

    first = run(2, 11)
    assert run(1, 11) == first
    assert len(set(first)) == 6 and not set(run(2, 12)) & set(first)


@pytest.mark.parametrize("method", METHODS)
def test_lambdas_under_every_start_method(no_leaks, method):
    scale = 3
    with JobQueue(2, start_method=method) as q:
        q.put(lambda x: x * scale, 2)
        q.put(lambda: os.getpid())
        assert q.get(timeout=WAIT) == 6
        assert q.get(timeout=WAIT) in q.worker_pids


def test_close_fails_what_was_not_got(no_leaks, tmp_path):
    q = JobQueue()
    waiting = q.put(wait_for, str(tmp_path / "never"))
    q.close()
    q.close()
    assert q.closed and len(q) == 0
    with pytest.raises(RunnerClosedError):
        waiting.result(WAIT)
    with pytest.raises(RunnerClosedError):
        q.put(identity, 1)
    with pytest.raises(RunnerClosedError):
        q.get(timeout=1)


def test_thread_backend(no_leaks):
    lock = threading.Lock()  # not picklable: threads need no pickling
    with JobQueue(backend="thread") as q:
        q.put(lambda: lock.locked())
        assert q.get(timeout=WAIT) is False


def test_bad_arguments(no_leaks):
    with pytest.raises(ValueError, match="maxsize"):
        JobQueue(maxsize=-1)
    with JobQueue(1) as q, pytest.raises(TypeError, match="callable"):
        q.put(42)
