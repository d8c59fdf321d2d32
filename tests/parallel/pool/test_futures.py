"""``Executor``: ``concurrent.futures``' interface on easycore's engine (issue 36 item 1).

What CPython's own ProcessPoolExecutor tests (``cpython/test_cpython_futures.py``)
cannot check here: where they read the stdlib's privates, the same behaviour
through the public API; where easycore's promise is better than the stdlib's
(a dead worker, an initializer that raises, ``SystemExit`` in a task, an item
that does not unpickle, ``max_tasks_per_child`` under fork), what easycore does
instead. Every start method; asyncio's ``run_in_executor`` and ``wrap_future``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from concurrent.futures.process import BrokenProcessPool

import pytest
from _parallel_support import METHODS
from processes import wait_gone

from easycore.common.parallel import (
    Executor,
    ParallelError,
    Pool,
    RemoteTraceback,
    ResultEncodingError,
    TaskTimeoutError,
    WorkerDiedError,
    WorkerError,
)

pytestmark = pytest.mark.timeout(180)

WAIT = 60


def square(x):
    return x * x


def fail_init():
    raise ValueError("error in initializer")


def raise_runtime():
    raise RuntimeError(123)


def pid_of(_=None):
    return os.getpid()


class Unpicklable:
    """Fails when a worker unpickles it (CPython's ErrorAtUnpickle)."""

    def __reduce__(self):
        return (_raise_unpickling, ())


def _raise_unpickling():
    raise pickle.UnpicklingError("cannot unpickle this")


@pytest.mark.parametrize("method", METHODS)
def test_submit_map_and_shutdown_under_every_start_method(method, no_leaks):
    with Executor(max_workers=2, start_method=method) as executor:
        assert isinstance(executor, concurrent.futures.Executor)
        assert executor.submit(square, 7).result(WAIT) == 49
        assert executor.submit(lambda x, y=1: x + y, 1, y=2).result(WAIT) == 3
        assert list(executor.map(pow, range(10), range(10), chunksize=3)) == [
            pow(i, i) for i in range(10)]
        assert list(executor.map(abs, range(-5, 5))) == [5, 4, 3, 2, 1, 0, 1, 2, 3, 4]
        assert executor.max_workers == 2 and len(executor.worker_pids) == 2
    with pytest.raises(RuntimeError, match="cannot schedule new futures after shutdown"):
        executor.submit(square, 1)


@pytest.mark.parametrize("method", METHODS)
def test_a_dead_worker_fails_its_task_as_both_errors_and_the_executor_goes_on(method, no_leaks):
    # The stdlib breaks the whole executor (every pending future, every later
    # submit): easycore fails the one task and replaces the worker.
    with Executor(max_workers=2, mp_context=__import__("multiprocessing").get_context(method)
                  ) as executor:
        future = executor.submit(os._exit, 3)
        error = future.exception(WAIT)
        assert isinstance(error, WorkerDiedError) and isinstance(error, BrokenProcessPool)
        assert error.exitcode == 3 and "exit code 3" in str(error)
        assert executor.submit(square, 4).result(WAIT) == 16
        # in a map too, at the item's place
        results = executor.map(os._exit, [5], chunksize=1)
        with pytest.raises(BrokenProcessPool) as info:
            next(results)
        assert isinstance(info.value, WorkerDiedError)
        assert list(executor.map(square, range(3))) == [0, 1, 4]


def test_an_initializer_that_raises_is_said_by_the_constructor(no_leaks):
    with pytest.raises(WorkerError, match="error in initializer") as info:
        Executor(max_workers=2, initializer=fail_init)
    assert isinstance(info.value, BrokenProcessPool)


def test_system_exit_in_a_task_is_the_worker_error_that_reports_it(no_leaks):
    with Executor(max_workers=1) as executor:
        future = executor.submit(sys.exit, 1)
        error = future.exception(WAIT)
        assert isinstance(error, WorkerError) and "SystemExit" in str(error)
        assert executor.submit(square, 3).result(WAIT) == 9


def test_an_argument_that_does_not_unpickle_fails_its_task_alone(no_leaks):
    with Executor(max_workers=1) as executor:
        error = executor.submit(id, Unpicklable()).exception(WAIT)
        assert isinstance(error, WorkerError) and "UnpicklingError" in str(error)
        assert executor.submit(square, 5).result(WAIT) == 25


class ExitsWhenUnpickled:
    """Raises SystemExit when the caller unpickles it (CPython's ExitAtUnpickle)."""

    def __reduce__(self):
        return (sys.exit, (1,))


class FailsToPickle:
    def __reduce__(self):
        raise pickle.PicklingError("Error in pickle")


def make(cls):
    return cls()


@pytest.mark.parametrize("cls", [Unpicklable, ExitsWhenUnpickled])
def test_a_result_that_does_not_unpickle_in_the_caller_fails_its_task_alone(cls, no_leaks):
    # (SystemExit raised there stopped the pool's coordinator: the future never came)
    with Executor(max_workers=1) as executor:
        error = executor.submit(make, cls).exception(WAIT)
        assert isinstance(error, ParallelError) and "could not be decoded" in str(error)
        assert executor.submit(square, 6).result(WAIT) == 36


def test_a_result_that_does_not_pickle_is_a_pickling_error(no_leaks):
    with Executor(max_workers=1) as executor:
        with pytest.raises(pickle.PicklingError) as info:
            executor.submit(make, FailsToPickle).result(WAIT)
        assert isinstance(info.value, ResultEncodingError) and info.value.item == 0


@pytest.mark.parametrize("method", METHODS)
def test_max_tasks_per_child_works_under_every_start_method(method, no_leaks):
    # (the stdlib refuses fork)
    with Executor(max_workers=1, max_tasks_per_child=2, start_method=method) as executor:
        pids = [executor.submit(pid_of).result(WAIT) for _ in range(4)]
    assert pids[0] == pids[1] != pids[2] == pids[3]


def test_the_workers_traceback_is_the_futures_cause(no_leaks):
    with Executor(max_workers=1) as executor:
        with pytest.raises(RuntimeError) as info:
            executor.submit(raise_runtime).result(WAIT)
        cause = info.value.__cause__
        assert type(cause) is concurrent.futures.process._RemoteTraceback
        assert "raise RuntimeError(123)" in cause.tb and cause.text == cause.tb
        assert not isinstance(cause, RemoteTraceback)  # the pool's class is multiprocessing's
        with pytest.raises(RuntimeError) as info:
            list(executor.map(lambda _: raise_runtime(), [1]))
        assert type(info.value.__cause__) is concurrent.futures.process._RemoteTraceback


def sleep_then_touch(path: str, seconds: float) -> str:
    time.sleep(seconds)
    open(path, "w").close()
    return path


def test_map_timeout_and_leaving_early_cancel_what_has_not_started(no_leaks, tmp_path):
    paths = [str(tmp_path / name) for name in "abcdefghij"]
    seconds = [0, 0, 2] + [0] * 7
    with Executor(max_workers=1) as executor:
        results = executor.map(sleep_then_touch, paths, seconds, timeout=1, chunksize=1)
        assert [next(results), next(results)] == paths[:2]
        with pytest.raises(concurrent.futures.TimeoutError):
            next(results)  # "c" is still sleeping
        with pytest.raises(ValueError, match="chunksize"):
            executor.map(square, [1], chunksize=0)
    # As the stdlib's: the task that had started finished before shutdown returned,
    # and so did those its worker held queued behind it (at most 3 chunks in all);
    # those not handed to a worker were cancelled and never ran.
    ran = [os.path.exists(p) for p in paths]
    assert ran[:3] == [True] * 3, ran
    assert sum(ran) <= 2 + 3, ran
    assert ran == sorted(ran, reverse=True), ran  # in order: a prefix ran


def test_task_timeout_fails_only_the_task(no_leaks):
    with Executor(max_workers=2, task_timeout=1) as executor:
        slow = executor.submit(time.sleep, 60)
        assert isinstance(slow.exception(WAIT), TaskTimeoutError)
        assert executor.submit(square, 2).result(WAIT) == 4


def test_cancel_futures_cancels_what_has_not_started(no_leaks):
    executor = Executor(max_workers=1)
    futures = [executor.submit(time.sleep, 0.05) for _ in range(40)]
    executor.shutdown(wait=True, cancel_futures=True)
    cancelled = [f for f in futures if f.cancelled()]
    assert cancelled and all(f.done() for f in futures)
    assert all(f.exception() is None for f in futures if not f.cancelled())


def test_shutdown_without_waiting_finishes_the_work_in_the_background(no_leaks):
    executor = Executor(max_workers=2)
    results = executor.map(square, range(10))
    futures = [executor.submit(square, i) for i in range(5)]
    pids = executor.worker_pids
    executor.shutdown(wait=False)
    assert list(results) == [x * x for x in range(10)]
    assert [f.result(WAIT) for f in futures] == [0, 1, 4, 9, 16]
    executor.shutdown(wait=True)  # waits for the background shutdown
    assert wait_gone(pids, WAIT) == []


def test_a_dropped_executor_finishes_its_work_then_stops(no_leaks):
    executor = Executor(max_workers=2)
    futures = [executor.submit(square, i) for i in range(5)]
    pids = executor.worker_pids
    ref = weakref.ref(executor)
    del executor
    assert ref() is None
    assert [f.result(WAIT) for f in futures] == [0, 1, 4, 9, 16]
    assert wait_gone(pids, WAIT) == []


def test_no_stale_reference_to_a_submitted_bound_method(no_leaks):
    # (the pool keyed its chunk-size estimates by the bound method: it kept its instance)
    class Owner:
        def method(self):
            return 1

    for make in (lambda: Executor(max_workers=1), lambda: Pool(1)):  # one open at a time
        with make() as pool:
            owner = Owner()
            collected = threading.Event()
            ref = weakref.ref(owner, lambda _, event=collected: event.set())
            pool.submit(owner.method).result(WAIT)
            del owner
            # (the job is dropped once finished, just after its result is set)
            assert collected.wait(WAIT), ref()


EXIT_SCRIPT = """
import time
from easycore.common.parallel import Executor

def sleep_and_print(t, msg):
    time.sleep(t)
    print(msg, flush=True)

if __name__ == "__main__":
    executor = Executor(2, start_method={method!r})
    executor.submit(sleep_and_print, 0.5, "apple")
    {end}
"""


@pytest.mark.parametrize("end", ["", "executor.shutdown(wait=False)"])
@pytest.mark.parametrize("method", METHODS)
def test_pending_work_finishes_at_interpreter_exit(method, end):
    # (the stdlib's ProcessPoolExecutor hangs here with wait=False: CPython gh-83386)
    script = textwrap.dedent(EXIT_SCRIPT).format(method=method, end=end)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=WAIT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "apple" and "Traceback" not in done.stderr


def test_extras_insights_devices_and_the_pool(no_leaks):
    with Executor(devices=["cpu", "cpu"], insights=True) as executor:
        assert executor.max_workers == 2 and executor.devices == ["cpu", "cpu"]
        assert list(executor.map(square, range(20))) == [x * x for x in range(20)]
        assert executor.pool.broadcast(square, 3) == [9, 9]
        assert executor.insights().items >= 20
    with pytest.raises(ValueError, match="max_workers must be greater than 0"):
        Executor(max_workers=0)


@pytest.mark.parametrize("method", METHODS)
def test_asyncio_run_in_executor_and_wrap_future(method, no_leaks):
    async def main(executor):
        loop = asyncio.get_running_loop()
        direct = await loop.run_in_executor(executor, square, 6)
        wrapped = await asyncio.wrap_future(executor.submit(square, 7))
        gathered = await asyncio.gather(*(loop.run_in_executor(executor, square, i)
                                          for i in range(10)))
        return direct, wrapped, gathered

    with Executor(max_workers=2, start_method=method) as executor:
        direct, wrapped, gathered = asyncio.run(main(executor))
    assert (direct, wrapped, gathered) == (36, 49, [i * i for i in range(10)])
