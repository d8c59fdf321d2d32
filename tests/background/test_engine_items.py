"""Background clients against the engine's promises (issue 20 items 16, 17, 21, 26;
issue 27 items 6 and 7): cancelling a queued job, Ctrl-C inside ``put``,
``__main__`` code under every start method, Ctrl-C while workers boot,
``JobQueue.stats``, elektronn2's ``timeout=False`` and ``shutdown()``."""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
from _background_targets import count_call, identity, nap, wait_for
from _engine_targets import InterruptWhenPickled

from easycore.common.parallel import BackgroundTask, JobQueue

pytestmark = pytest.mark.timeout(180)

WAIT = 30.0
SCRIPTS = Path(__file__).resolve().parent / "scripts"
METHODS = [m for m in ("fork", "spawn", "forkserver")
           if m in multiprocessing.get_all_start_methods()]


def _script(name, method):
    proc = subprocess.run([sys.executable, str(SCRIPTS / name), method], capture_output=True,
                          text=True, timeout=150, start_new_session=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------- item 21: __main__
@pytest.mark.parametrize("method", METHODS)
def test_a_target_job_and_initializer_defined_under_main_work(method):
    # Defined under `if __name__ == "__main__":`: a spawned worker cannot import
    # them; easycore's wrappers must not hide them from the by-value path.
    assert _script("main_defined.py", method) == {
        "background": [3, "bg"], "background_plain": [4, False],
        "jobqueue": 103, "jobqueue_plain": 5,
    }


# ------------------------------------------------ item 26: Ctrl-C at worker boot
@pytest.mark.parametrize("method", METHODS)
def test_ctrl_c_while_workers_boot_is_never_a_worker_death(method):
    assert _script("sigint_at_boot.py", method) == {
        "pool": [0, 2, 4, 6], "background": 7, "jobqueue": 42,
    }


# --------------------------------------------------- item 16: cancelling a job
def test_cancelling_a_queued_job_means_it_never_runs(tmp_path, no_leaks):
    go, marks = tmp_path / "go", tmp_path / "marks"
    with JobQueue(workers=1) as q:
        first = q.put(wait_for, str(go), value="first")  # holds the only worker
        queued = q.put(count_call, str(marks))
        assert queued.cancel() is True and queued.cancelled()
        go.touch()
        assert q.get(timeout=WAIT) == "first" and first.result() == "first"
        with pytest.raises(concurrent.futures.CancelledError):
            q.get(timeout=WAIT)  # the cancelled job, in its turn
        assert len(q) == 0
        q.put(identity, 5)
        assert q.get(timeout=WAIT) == 5
    assert not marks.exists()  # it never ran


def test_cancelling_a_running_job_returns_false_and_it_delivers(tmp_path, no_leaks):
    go, started = tmp_path / "go", tmp_path / "started"
    with JobQueue(workers=1) as q:
        running = q.put(wait_for, str(go), str(started), value="ran")
        wait_for(str(started), limit=WAIT)  # it runs now
        assert running.cancel() is False and not running.cancelled()
        go.touch()
        assert q.get(timeout=WAIT) == "ran"
        assert running.cancel() is False  # finished


# --------------------------------------------------- item 17: Ctrl-C in put()
def test_an_interrupt_inside_put_loses_no_credit_and_leaves_no_phantom(no_leaks):
    with JobQueue(workers=1) as q:
        for _ in range(3):
            with pytest.raises(KeyboardInterrupt):
                q.put(identity, InterruptWhenPickled())
            assert len(q) == 0  # nothing of it in the FIFO
        # The only worker's credit is free, and get() raises nothing nobody sent.
        for k in range(4):
            q.put(identity, k)
        assert [q.get(timeout=WAIT) for _ in range(4)] == [0, 1, 2, 3]


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_background_task_whose_arguments_interrupt_leaves_nothing(method, no_leaks):
    # Under spawn and forkserver the target and its arguments are pickled for
    # the workers (under fork they are inherited, never pickled: nothing to interrupt).
    for _ in range(2):
        with pytest.raises(KeyboardInterrupt):
            BackgroundTask(identity, (InterruptWhenPickled(),), workers=1, start_method=method)
    with BackgroundTask(identity, (5,), workers=1, start_method=method) as bg:
        assert bg.get(timeout=WAIT) == 5


def test_a_service_call_interrupted_while_sending_leaves_the_service_usable(no_leaks):
    from _engine_targets import Echo

    from easycore.common.parallel.services import Service

    service = Service.start(Echo)
    try:
        for _ in range(3):
            with pytest.raises(KeyboardInterrupt):
                service.call("echo", InterruptWhenPickled())
        assert service.call("echo", 7) == 7
    finally:
        service.close()


def test_random_ctrl_c_during_put_and_get_leaves_the_queue_usable(no_leaks):
    # Real SIGINTs at random moments of put()/get() (main thread): after each,
    # the queue still works and holds only jobs that were put.
    import random
    import signal

    def surface() -> None:
        # A Python-level call: the interpreter runs a pending signal handler
        # when a function starts, so a SIGINT already delivered raises here.
        return None

    main = threading.main_thread().ident
    rng = random.Random(7)
    interrupted = 0
    with JobQueue(workers=1) as q:
        for _ in range(40):
            # Aimed at the main thread (pthread_kill), not the process: the kernel
            # may hand a process-wide signal to another thread, whose handler can
            # then run after this iteration has moved on, and the interrupt would
            # land in the drain below (or in pytest) instead of in put()/get().
            timer = threading.Timer(rng.uniform(0, 0.004),
                                    lambda: signal.pthread_kill(main, signal.SIGINT))
            try:
                try:
                    timer.start()  # inside: the signal can come before start() returns
                    q.put(identity, 1)
                    q.get(timeout=WAIT)
                finally:
                    timer.join(timeout=WAIT)
                surface()  # the SIGINT has been sent: if still pending, it raises here
            except KeyboardInterrupt:
                interrupted += 1
            # The SIGINT may have cut the join above short (it landed there):
            # it is the timer's only one, so this join is not interrupted.
            timer.join(timeout=WAIT)
            assert not timer.is_alive()
            while len(q):  # a put that went in before the interrupt: drain it
                assert q.get(timeout=WAIT) == 1
            q.put(identity, 2)
            assert q.get(timeout=WAIT) == 2
    assert interrupted  # the test did interrupt something


# ------------------------------------------------------ issue 27 item 6: stats
def test_jobqueue_has_the_stats_of_a_background_task(no_leaks):
    with JobQueue(workers=2) as q:
        for _ in range(4):
            q.put(nap, 0.05, "x")
        assert [q.get(timeout=WAIT) for _ in range(4)] == ["x"] * 4
        stats = q.stats
    assert stats.results == 4 and len(stats.busy) == 2 == len(stats.idle)
    assert sum(stats.busy) >= 0.2 and stats.waited > 0 and stats.seconds >= stats.waited
    assert q.stats.results == 4  # still readable once closed


# ------------------------------------ issue 27 item 7: elektronn2's literal ports
def test_get_timeout_false_blocks_with_a_deprecation_warning(no_leaks):
    with BackgroundTask(nap, (0.3, "late"), workers=1) as bg:  # noqa: SIM117 (as one, the line would pass 100 columns)
        with pytest.warns(DeprecationWarning, match="timeout=None"):
            assert bg.get(timeout=False) == "late"
    with JobQueue(workers=1) as q:
        q.put(nap, 0.3, "late")
        with pytest.warns(DeprecationWarning, match="timeout=None"):
            assert q.get(timeout=False) == "late"


def test_a_zero_timeout_is_still_a_timeout(no_leaks):
    with BackgroundTask(nap, (5, "late"), workers=1) as bg, warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TimeoutError):
            bg.get(timeout=0)


@pytest.mark.parametrize("cls", ["BackgroundTask", "JobQueue"])
def test_shutdown_is_close(cls, no_leaks):
    obj = BackgroundTask(identity, (1,)) if cls == "BackgroundTask" else JobQueue(workers=1)
    obj.shutdown()
    assert obj.closed
    obj.shutdown()  # idempotent, as close
