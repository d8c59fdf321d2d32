"""A Ctrl-C that the kernel hands to another thread still ends a blocking call.

The pool's, the executor's, the background task's, the job queue's and the
runner's: a main thread waiting on a lock that the coordinator releases (a
result's event, a future's condition) used to wait until the work ended when
the coordinator got the SIGINT (the CI hang of the terminal Ctrl-C test, under
a kernel that handed it there). See ``tests/ctrl_c.py``.
"""

from __future__ import annotations

import functools
import threading

import pytest
from _pool_funcs import announce_then_hold, square
from ctrl_c import WAIT, interrupted_elsewhere, needs_python_sigint_handler

from easycore.common.config import CfgNode
from easycore.common.parallel import BackgroundTask, Executor, JobQueue, Pool, UnorderedRunner
from easycore.common.parallel._os import interrupts

pytestmark = [pytest.mark.timeout(120), needs_python_sigint_handler]

SLACK = 5.0  # "promptly": the held task would have held 60 s


CALLS = ["apply", "map", "get", "wait", "submit", "close-join"]


@pytest.mark.parametrize("backend", ["process", "thread"])
@pytest.mark.parametrize("call", CALLS)
def test_a_pool_call_ends_when_another_thread_gets_the_ctrl_c(call, backend, tmp_path, no_leaks):
    hold = functools.partial(announce_then_hold, folder=str(tmp_path))
    with Pool(2, backend=backend) as pool:
        if call == "apply":
            waited = interrupted_elsewhere(lambda: pool.apply(hold, (0,)), tmp_path)
        elif call == "map":
            waited = interrupted_elsewhere(lambda: pool.map(hold, range(3), 1), tmp_path)
        elif call == "get":
            waited = interrupted_elsewhere(lambda: pool.apply_async(hold, (0,)).get(), tmp_path)
        elif call == "wait":
            waited = interrupted_elsewhere(lambda: pool.apply_async(hold, (0,)).wait(), tmp_path)
        elif call == "submit":
            waited = interrupted_elsewhere(lambda: pool.submit(hold, 0).result(), tmp_path)
        else:
            pool.apply_async(hold, (0,))
            pool.close()
            waited = interrupted_elsewhere(lambda: pool.join(), tmp_path)
        assert waited < SLACK
        if call != "close-join":  # the pool serves on
            assert pool.apply(square, (6,)) == 36


def test_an_executor_future_ends_when_another_thread_gets_the_ctrl_c(tmp_path, no_leaks):
    with Executor(1) as executor:
        future = executor.submit(announce_then_hold, 0, str(tmp_path))
        assert interrupted_elsewhere(future.result, tmp_path) < SLACK
        assert future.result(timeout=WAIT) == 0


@pytest.mark.parametrize("first", ["wait", "nowait"])
def test_an_executor_shutdown_ends_when_another_thread_gets_the_ctrl_c(first, tmp_path, no_leaks):
    # After shutdown(wait=False), shutdown(wait=True) waits for the thread that drains
    # the pool: that wait too.
    with Executor(1) as executor:
        future = executor.submit(announce_then_hold, 0, str(tmp_path))
        if first == "nowait":
            executor.shutdown(wait=False)
        assert interrupted_elsewhere(executor.shutdown, tmp_path) < SLACK
        (tmp_path / "release").touch()
        assert future.result(timeout=WAIT) == 0
        executor.shutdown(wait=True)


def test_a_join_that_a_ctrl_c_ended_leaves_its_thread_alive_and_joinable(tmp_path):
    # CPython 3.10-3.12's Thread.join, interrupted while it waits, marked the thread
    # as ended although it ran on: every later join returned at once (a pool's
    # coordinator outlived the Executor.shutdown that joined its draining thread).
    release = threading.Event()

    def hold() -> None:
        (tmp_path / "0").touch()
        release.wait(WAIT)

    thread = threading.Thread(target=hold, name="held")
    thread.start()
    try:
        assert interrupted_elsewhere(lambda: interrupts.join(thread), tmp_path) < SLACK
        assert thread.is_alive()
        assert not interrupts.join(thread, 0.05)
    finally:
        release.set()
    assert interrupts.join(thread, WAIT)


def test_a_background_task_ends_when_another_thread_gets_the_ctrl_c(tmp_path, no_leaks):
    task = BackgroundTask(announce_then_hold, (0, str(tmp_path)), workers=1)
    try:
        assert interrupted_elsewhere(task.get, tmp_path) < SLACK
    finally:
        task.close()


def test_a_job_queue_get_ends_when_another_thread_gets_the_ctrl_c(tmp_path, no_leaks):
    with JobQueue(workers=1) as jobs:
        jobs.put(announce_then_hold, 0, str(tmp_path))
        assert interrupted_elsewhere(jobs.get, tmp_path) < SLACK
        assert jobs.get(timeout=WAIT) == 0  # the job stayed the oldest


class _Holding(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return announce_then_hold(data, cfg.folder)


def test_a_runner_call_ends_when_another_thread_gets_the_ctrl_c(tmp_path, no_leaks):
    cfg = CfgNode({"folder": str(tmp_path)})
    with _Holding(devices=1, cfg=cfg) as runner:
        assert interrupted_elsewhere(lambda: runner([0]), tmp_path) < SLACK
