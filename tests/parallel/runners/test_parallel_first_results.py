"""First results sooner: work goes to the first worker ready, not after the slowest start.

One worker's initializer is held back on a lock the test holds (an ``flock``,
no polling); the pool still answers from the other. Under spawn and
forkserver the worker's start data travels through its task pipe, so every
worker boots at once.
"""

from __future__ import annotations

import fcntl
import multiprocessing
import threading

import pytest
from _inherit_targets import die_unless_first, gate, pid_of

from easycore.common.parallel import BackgroundTask, Pool, WorkerDiedError

pytestmark = pytest.mark.timeout(120)

WAIT = 60.0
METHODS = [m for m in ("fork", "forkserver", "spawn")
           if m in multiprocessing.get_all_start_methods()]


class HeldBack:
    """A lock file the test holds: workers that lose the race wait on it in their initializer."""

    def __init__(self, tmp_path):
        self.dir = str(tmp_path)
        self.path = str(tmp_path / "held")
        self.file = open(self.path, "wb")  # noqa: SIM115 (held locked until release())
        fcntl.flock(self.file.fileno(), fcntl.LOCK_EX)

    def release(self):
        if not self.file.closed:
            fcntl.flock(self.file.fileno(), fcntl.LOCK_UN)
            self.file.close()


def in_thread(fn):
    """Run ``fn`` in a thread; (result, error) after WAIT seconds at most (None: still running)."""
    box = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 (reported to the test)
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(WAIT)
    return t, box


@pytest.mark.forks_with_threads  # started from a thread
@pytest.mark.parametrize("method", METHODS)
def test_a_pool_answers_while_another_worker_still_starts(method, tmp_path, no_leaks):
    held = HeldBack(tmp_path)
    pools = []

    def first_result():
        pool = Pool(2, initializer=gate, initargs=(held.dir, held.path), start_method=method)
        pools.append(pool)
        return pool.apply(pid_of, (1,)), pool.worker_pids

    try:
        t, box = in_thread(first_result)
        assert "error" not in box, box.get("error")
        assert "result" in box, "no first result while one worker was still starting"
        pid, pids = box["result"]
        assert pid in pids
    finally:
        held.release()
        t.join(WAIT)
        for pool in pools:
            pool.terminate()
    assert not t.is_alive()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_the_late_worker_joins_once_ready(method, tmp_path, no_leaks):
    held = HeldBack(tmp_path)
    try:
        pool = Pool(2, initializer=gate, initargs=(held.dir, held.path), start_method=method)
    except BaseException:
        held.release()
        raise
    try:
        first = pool.apply(pid_of, (1,))
        held.release()
        # broadcast runs one item on each worker: the late one must join in
        assert sorted(pool.broadcast(pid_of, None)) == sorted(pool.worker_pids)
        assert first in pool.worker_pids
    finally:
        held.release()
        pool.terminate()


@pytest.mark.forks_with_threads  # started from a thread
def test_a_background_task_gives_a_first_result_while_another_worker_starts(tmp_path,
                                                                               no_leaks):
    held = HeldBack(tmp_path)
    tasks = []

    def first_result():
        task = BackgroundTask(pid_of, workers=2, initializer=gate,
                              initargs=(held.dir, held.path), start_method="fork")
        tasks.append(task)
        return task.get(timeout=WAIT)

    try:
        t, box = in_thread(first_result)
        assert "error" not in box, box.get("error")
        assert "result" in box, "no first result while one worker was still starting"
    finally:
        held.release()
        t.join(WAIT)
        for task in tasks:
            task.close()


def test_a_worker_dying_in_its_initializer_after_the_first_is_ready_breaks_the_pool(
        tmp_path, no_leaks):
    # Not restarted forever: the error comes from the start (if the death is
    # seen first) or from a call.
    with pytest.raises(WorkerDiedError):  # noqa: SIM117 (as one, the line would pass 100 columns)
        with Pool(2, initializer=die_unless_first, initargs=(str(tmp_path),),
                  start_method="fork") as pool:
            for _ in range(50):
                pool.apply(pid_of, (1,))
                pool.broadcast(pid_of, None)
