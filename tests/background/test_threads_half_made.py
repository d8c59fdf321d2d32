"""A thread started on the caller's behalf that fails to start, or that a Ctrl-C
lands in, leaves nothing behind.

``Thread.start`` waits for the new thread: a Ctrl-C there raised
``KeyboardInterrupt`` with the thread already running, and the object that
started it never learnt so (a staging thread waiting for ever, a thread
back-end's worker its pool would not join). A thread that cannot start at
all (``RuntimeError``) must not leave the rest behind either (a
``JobQueue``'s workers). Now the error reaches the caller and nothing stays:
no thread, no process, no descriptor. Real threads and processes; only the
failure is made.
"""

from __future__ import annotations

import threading
import time

import pytest
from ctrl_c import needs_python_sigint_handler
from thread_starts import cannot_start, ctrl_c_once_it_runs, on_start_of

from easycore.common.parallel import BackgroundTask, JobQueue, Pool

pytestmark = pytest.mark.timeout(120)


def _one(x=1):
    return x


class _StagedTask(BackgroundTask):
    _stage = staticmethod(lambda value: value + 1)


class _StagedJobs(JobQueue):
    _stage = staticmethod(lambda value: value + 1)


FAILURES = [
    pytest.param(cannot_start, RuntimeError, id="cannot-start"),
    pytest.param(ctrl_c_once_it_runs, KeyboardInterrupt, id="ctrl-c",
                 marks=needs_python_sigint_handler),
]


@pytest.mark.parametrize(("fail", "error"), FAILURES)
def test_a_background_tasks_staging_thread(monkeypatch, no_leaks, fail, error):
    with monkeypatch.context() as patch:
        on_start_of(patch, "easycore-background-stage", fail)
        with pytest.raises(error):
            _StagedTask(_one, (1,), workers=1)
    with _StagedTask(_one, (1,), workers=1) as task:  # and the next one works
        assert task.get(timeout=60) == 2


@pytest.mark.parametrize(("fail", "error"), FAILURES)
def test_a_job_queues_staging_thread(monkeypatch, no_leaks, fail, error):
    with monkeypatch.context() as patch:
        on_start_of(patch, "easycore-jobqueue-stage", fail)
        with pytest.raises(error):
            _StagedJobs(workers=1)
    with _StagedJobs(workers=1) as jobs:
        assert jobs.put(_one, 3).result(timeout=60) == 4


def _ends_late_after_a_ctrl_c(thread, start):
    """``ctrl_c_once_it_runs``, for a thread that takes a while to end once told:
    only a pool that knows of it, and joins it, waits for it."""
    run = thread.run

    def run_then_linger():
        run()
        time.sleep(0.3)  # not a synchronisation: the late end a join must wait for

    thread.run = run_then_linger
    ctrl_c_once_it_runs(thread, start)


@needs_python_sigint_handler
def test_a_ctrl_c_inside_a_thread_workers_start(monkeypatch, no_leaks):
    with monkeypatch.context() as patch:
        on_start_of(patch, "easycore-worker-1", _ends_late_after_a_ctrl_c)
        with pytest.raises(KeyboardInterrupt):
            Pool(2, backend="thread")
    # Joined before the error reached us: the pool knew of the thread.
    assert not [t.name for t in threading.enumerate() if t.name.startswith("easycore-worker")]
    with Pool(2, backend="thread") as pool:
        assert pool.map(_one, range(4)) == [0, 1, 2, 3]
