"""Where a stuck worker is stuck: ``TaskTimeoutError.stack`` and every client's ``stacks()``.

Before a worker is killed for ``task_timeout`` its stack is read (a signal
handler installed at its start dumps it, see ``_os.stacks``): the error names
the innermost frame of user code and lists every frame. ``stacks()`` reads
every live worker's stack without stopping it. Under fork, forkserver and
spawn, in Python code and in C code that holds the GIL; the thread back-end
reads its threads' frames. Waits are bounded; the timeouts are the mechanism
under test, never a synchronisation.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import signal
import sys
import tempfile
import threading
import time

import pytest
from _stack_funcs import StuckAtEnd, StuckRunner, spin_in_c, stuck_on, wait_here
from ctrl_c import needs_python_sigint_handler
from leaks import check_leaks

from easycore.common.parallel import (
    BackgroundTask,
    JobQueue,
    Pool,
    RunnerClosedError,
    TaskTimeoutError,
)
from easycore.common.parallel._os import stacks
from easycore.common.parallel.insights import Insights

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(not stacks.AVAILABLE, reason="needs POSIX signals")]

WAIT = 60
HERE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "_stack_funcs.py")
METHODS = ["fork", "forkserver", "spawn"]


@pytest.fixture
def no_leaks():
    """No process, thread, segment or descriptor left (the dump files included)."""
    with check_leaks(shm=("ecp-{pid:x}-",), fds=True):
        yield
    assert not glob.glob(os.path.join(tempfile.gettempdir(), f"easycore-stack-{os.getpid()}-*"))


def _assert_names(err: TaskTimeoutError, function: str, file: str = HERE) -> None:
    frame = err.stack.user_frame()
    assert frame is not None and frame.function == function and frame.file == file
    assert err.stack.threads[0][0] == "main thread"
    first_line = str(err).splitlines()[0]
    assert f"it was in {function} ({file}:{frame.line})" in first_line
    assert f"{function} ({file}:{frame.line})" in str(err).split("stopped:", 1)[1]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("how", [wait_here, spin_in_c], ids=["waiting", "in-c-code"])
def test_a_timed_out_task_says_where_it_was(method, how, no_leaks):
    with Pool(2, start_method=method, task_timeout=1.0) as pool:
        with pytest.raises(TaskTimeoutError) as info:
            pool.map(functools.partial(stuck_on, bad=1, how=how), range(3), 1)
        _assert_names(info.value, how.__name__)
        assert pool.map(abs, [-1, -2]) == [1, 2]  # replaced, the pool goes on


def test_the_stack_survives_pickling_and_a_thread_backend_timeout_has_it_too(no_leaks):
    import pickle

    ready, release = threading.Event(), threading.Event()
    try:
        with Pool(1, backend="thread", task_timeout=0.5) as pool, \
                pytest.raises(TaskTimeoutError) as info:
            pool.apply(_wait_on, (ready, release))
    finally:
        release.set()  # the abandoned thread returns and exits
        _join_worker_threads()
    _assert_names(info.value, "_wait_on", __file__)
    again = pickle.loads(pickle.dumps(info.value))
    assert again.stack == info.value.stack and str(again) == str(info.value)


def _join_worker_threads():
    """Until the thread back-end's worker threads (an abandoned one too) are gone."""
    deadline = time.monotonic() + WAIT
    while True:
        left = [t for t in threading.enumerate() if t.name.startswith("easycore-worker-")]
        if not left:
            return
        assert time.monotonic() < deadline, left
        for thread in left:
            if thread.is_alive():  # (one still being started is not yet)
                thread.join(0.1)


@pytest.mark.parametrize("method", METHODS)
def test_a_runner_timeout_says_where_it_was(method, no_leaks):
    with StuckRunner(["cpu", "cpu"], start_method=method, task_timeout=1.0) as runner:
        with pytest.raises(TaskTimeoutError) as info:
            runner(range(3))
        _assert_names(info.value, "wait_here")


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_background_task_and_job_queue_timeouts_say_where_they_were(method, no_leaks):
    with BackgroundTask(wait_here, (0,), start_method=method, task_timeout=1.0) as task:
        with pytest.raises(TaskTimeoutError) as info:
            task.get(timeout=WAIT)
        _assert_names(info.value, "wait_here")
    with JobQueue(1, start_method=method, task_timeout=1.0) as jobs:
        jobs.put(spin_in_c, 0)
        with pytest.raises(TaskTimeoutError) as info:
            jobs.get(timeout=WAIT)
        _assert_names(info.value, "spin_in_c")


def _until_stuck(client, mark_dir, n_busy=1):
    """``client.stacks()`` once ``n_busy`` workers are inside ``wait_here``."""
    deadline = time.monotonic() + WAIT
    while len(glob.glob(os.path.join(mark_dir, "m.*"))) < n_busy:
        assert time.monotonic() < deadline, "the workers never started the task"
        time.sleep(0.01)
    return client.stacks()


@pytest.mark.parametrize("method", METHODS)
def test_pool_stacks_show_every_live_worker_and_where_the_busy_one_is(method, tmp_path,
                                                                       no_leaks):
    with Pool(2, start_method=method, task_timeout=WAIT) as pool:
        assert len(set(pool.broadcast(os.getpid))) == 2  # both started
        pool.apply_async(wait_here, (0, str(tmp_path / "m")))
        got = _until_stuck(pool, tmp_path)
        assert sorted(got) == [0, 1]
        busy = [text for text in got.values() if "wait_here" in text]
        assert len(busy) == 1 and f"wait_here ({HERE}:" in busy[0]
        assert busy[0].startswith("main thread (innermost first):")
        idle = next(text for text in got.values() if "wait_here" not in text)
        assert "main thread" in idle  # an idle worker answers too
        assert "f_locals" not in busy[0]  # names and lines only
        assert pool.map(abs, [-3]) == [3]  # nothing was stopped


def test_stacks_of_a_runner_during_its_call_and_of_the_thread_backend(tmp_path, no_leaks):
    with StuckRunner(["cpu"], task_timeout=WAIT) as runner:
        errors = []

        def call():
            try:
                runner(range(3), task_timeout=5.0)
            except TaskTimeoutError as exc:
                errors.append(exc)

        caller = threading.Thread(target=call)
        caller.start()
        deadline = time.monotonic() + WAIT
        while not any("wait_here" in t for t in runner.stacks().values()):
            assert time.monotonic() < deadline
        caller.join(WAIT)
        assert len(errors) == 1
    assert runner.stacks() == {}  # closed: no workers
    with Pool(2, backend="thread") as pool:
        ready = threading.Event()
        release = threading.Event()
        pool.apply_async(_wait_on, (ready, release))
        assert ready.wait(WAIT)
        got = pool.stacks()
        release.set()
    _join_worker_threads()
    assert sorted(got) == [0, 1] and sum("_wait_on" in t for t in got.values()) == 1


def _wait_on(ready, release):
    ready.set()
    release.wait(WAIT)


def test_background_task_and_job_queue_stacks(tmp_path, no_leaks):
    mark = str(tmp_path / "m")
    with JobQueue(2, task_timeout=5.0) as jobs:
        jobs.put(os.getpid)
        jobs.put(os.getpid)
        assert jobs.get(timeout=WAIT) and jobs.get(timeout=WAIT)
        jobs.put(wait_here, 0, mark)
        got = _until_stuck(jobs, tmp_path)
        assert sorted(got) == [0, 1] and sum("wait_here" in t for t in got.values()) == 1
        with pytest.raises(TaskTimeoutError):
            jobs.get(timeout=WAIT)
    with BackgroundTask(wait_here, (0, mark), task_timeout=5.0) as task:
        got = _until_stuck(task, tmp_path, 2)
        assert list(got) == [0] and "wait_here" in got[0]


# ------------------------------------------- workers that a stop has to kill
def _wait_for_marks(mark_dir, n):
    deadline = time.monotonic() + WAIT
    while len(glob.glob(os.path.join(mark_dir, "m.*"))) < n:
        assert time.monotonic() < deadline, "the workers never started the task"
        time.sleep(0.01)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_terminate_says_where_the_busy_workers_were(method, tmp_path, no_leaks):
    pool = Pool(2, start_method=method, queue_scale=1)  # one item each
    try:
        assert len(set(pool.broadcast(os.getpid))) == 2  # both started
        result = pool.map_async(functools.partial(wait_here, mark=str(tmp_path / "m")), [0, 1], 1)
        _wait_for_marks(tmp_path, 2)
    finally:
        pool.terminate()
    with pytest.raises(RunnerClosedError) as info:
        result.get(WAIT)
    text = str(info.value)
    assert "worker 0 was in wait_here (" in text and "worker 1 was in wait_here (" in text


def test_a_close_that_times_out_says_where_the_end_hook_was(no_leaks):
    runner = StuckAtEnd(["cpu"])
    with pytest.raises(TimeoutError, match=r"worker 0 was in wait_here \("):
        runner.close(timeout=1.0)
    runner.close()  # closed already


@needs_python_sigint_handler
@pytest.mark.parametrize("client", ["runner", "pool"])
def test_ctrl_c_says_where_the_busy_workers_were(client, tmp_path, no_leaks):
    def ctrl_c():
        _wait_for_marks(tmp_path, 1)
        os.kill(os.getpid(), signal.SIGINT)

    # Started once the workers are: a fork from a process with threads is not the point here.
    sender = threading.Thread(target=ctrl_c)
    task = functools.partial(wait_here, mark=str(tmp_path / "m"))
    try:
        with pytest.raises(KeyboardInterrupt) as info:
            if client == "pool":
                with Pool(1) as pool:
                    sender.start()
                    pool.map(task, [0], 1)
            else:
                with StuckRunner(["cpu"], {"mark": str(tmp_path / "m")}) as runner:
                    sender.start()
                    runner([1], task_timeout=WAIT)
    finally:
        if sender.ident is not None:
            sender.join(WAIT)
    found = info.value.worker_stacks
    assert found[0].user_frame().function == "wait_here"
    if sys.version_info >= (3, 11):
        assert "worker 0 was in wait_here (" in "".join(info.value.__notes__)


def test_insights_call_an_item_far_longer_than_the_others_stalled(tmp_path, no_leaks):
    with Pool(2, insights=True) as pool:
        assert pool.map(abs, range(-50, 0), 1)  # typical items: microseconds
        assert pool.insights().stalled is None
        pool.apply_async(wait_here, (0, str(tmp_path / "m")))
        _wait_for_marks(tmp_path, 1)
        deadline = time.monotonic() + WAIT
        while (insights := pool.insights()).stalled is None:  # from 1 s on
            assert time.monotonic() < deadline
            time.sleep(0.1)
        stalled = insights.stalled
        assert stalled["worker"] in (0, 1) and stalled["seconds"] >= 1.0
        assert stalled["pid"] == pool.worker_pids[stalled["worker"]]
        assert stalled["where"].startswith(f"wait_here ({HERE}:")
        verdict = insights.verdict()
        assert verdict.stage == "stalled" and "wait_here" in verdict.advice
        assert "stacks()" in str(insights)
        assert Insights.from_dict(json.loads(insights.to_json())).stalled == stalled
