"""BackgroundTask: elektronn2's BackgroundProc example first, then its edge cases.

Real worker processes throughout; every wait has a timeout.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from _background_targets import (
    Dataset,
    call_start,
    count_call,
    die,
    die_until,
    draws,
    fail,
    fail_while,
    nap,
    napping_pid,
    pid,
    wait_for,
)

from easycore.common.parallel import (
    BackgroundStats,
    BackgroundTask,
    RunnerClosedError,
    TaskTimeoutError,
    WorkerDiedError,
    WorkerError,
)

pytestmark = pytest.mark.timeout(120)

#: generous bound for anything that should take a fraction of a second
WAIT = 30.0
METHODS = [m for m in ("fork", "forkserver", "spawn")
           if m in multiprocessing.get_all_start_methods()]


def main_thread_waits_in_get() -> bool:
    """Whether the main thread is inside ``BackgroundTask.get`` (for Ctrl-C tests)."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    while frame is not None:
        if frame.f_code.co_name == "get" and frame.f_code.co_filename.endswith("background.py"):
            return True
        frame = frame.f_back
    return False


def wait_until(predicate, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


# --------------------------------------------------------- the docs example
def test_elektronn2_example_getbatch_with_args_and_kwargs(no_leaks):
    D = Dataset()
    data, label = D.getbatch(2, strided=False, flip=True, grey_augment_channels=[0])
    kwargs = {"strided": False, "flip": True, "grey_augment_channels": [0]}
    # No dtypes or shapes up front: the results say what they are.
    with BackgroundTask(D.getbatch, (2,), kwargs, workers=2) as bg:
        for _ in range(20):
            d, lab = bg.get(timeout=WAIT)
            assert d.dtype == data.dtype == np.float32 and d.shape == data.shape
            assert lab.dtype == label.dtype == np.int16 and lab.shape == label.shape
            # the batch is made from the data set's rows, flipped and augmented
            assert np.all((lab >= 0) & (lab < 50))
            assert d.flags.writeable
        assert bg.workers == 2 and len(bg.worker_pids) == 2


def test_iteration_yields_forever_until_break(no_leaks):
    with BackgroundTask(Dataset().getbatch, (4,), workers=2) as bg:
        batches = [batch for _, batch in zip(range(12), bg)]
    assert len(batches) == 12
    assert all(d.shape == (4, 2, 8, 8) for d, _ in batches)


def test_large_arrays_arrive_intact(no_leaks):
    with BackgroundTask(np.full, ((512, 512), 3.5), {"dtype": np.float64}, workers=2) as bg:
        for _ in range(6):
            a = bg.get(timeout=WAIT)
            assert a.shape == (512, 512) and a.dtype == np.float64 and np.all(a == 3.5)


# ----------------------------------------------------------- random streams
@pytest.mark.parametrize("method", METHODS)
def test_workers_draw_distinct_random_streams(no_leaks, method):
    np.random.seed(0)  # the state a forked child would inherit ...
    np.random.rand()
    state = np.random.get_state()
    try:
        with BackgroundTask(draws, workers=2, start_method=method) as bg:
            results = [bg.get(timeout=WAIT) for _ in range(12)]
    finally:
        np.random.set_state(state)  # ... and no RNG state leaks out of this test
    python_draws = [r[0] for r in results]
    numpy_draws = [r[1] for r in results]
    assert len(set(python_draws)) == len(results)
    assert len(set(numpy_draws)) == len(results)


def test_a_seed_makes_every_call_reproducible_whichever_worker_runs_it(no_leaks):
    def run(workers: int, seed: int) -> list:
        with BackgroundTask(draws, workers=workers, seed=seed, ordered=True) as bg:
            return [bg.get(timeout=WAIT) for _ in range(8)]

    first = run(2, seed=7)
    assert run(2, seed=7) == first
    assert run(1, seed=7) == first  # call k draws the same numbers on any worker
    other = run(2, seed=8)
    assert not set(other) & set(first)
    assert len(set(first)) == len(first)


def test_seed_is_checked():
    with pytest.raises(ValueError, match="non-negative"):
        BackgroundTask(draws, seed=-1)
    with pytest.raises(TypeError, match="seed"):
        BackgroundTask(draws, seed="7")
    with pytest.raises(ValueError, match="backend='thread'"):
        BackgroundTask(draws, seed=1, backend="thread")


# ------------------------------------------------------ get(timeout), reset
def test_get_timeout_raises_timeout_error_and_the_task_goes_on(no_leaks, tmp_path):
    go = tmp_path / "go"
    with BackgroundTask(wait_for, (str(go),), {"value": "done"}) as bg:
        with pytest.raises(TimeoutError):
            bg.get(timeout=0.2)
        with pytest.raises(multiprocessing.TimeoutError):  # the stdlib's too
            bg.get(timeout=0)
        go.touch()
        assert bg.get(timeout=WAIT) == "done"


def test_ctrl_c_in_get_then_reset_then_get(no_leaks, tmp_path):
    go, started = tmp_path / "go", tmp_path / "started"

    def interrupt() -> None:
        wait_until(lambda: started.exists() and main_thread_waits_in_get())
        os.kill(os.getpid(), signal.SIGINT)  # as a terminal's Ctrl-C reaches us

    with BackgroundTask(wait_for, (str(go), str(started))) as bg:
        pids = bg.worker_pids
        timer = threading.Thread(target=interrupt)
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                bg.get(timeout=WAIT)
        finally:
            timer.join(WAIT)
        go.touch()  # the interrupted call may finish now; its result is dropped
        bg.reset()
        assert bg.get(timeout=WAIT) == pids[0]  # the same worker, still alive


def test_reset_discards_prefetched_results(no_leaks):
    with BackgroundTask(call_start, workers=2, prefetch=3) as bg:
        bg.get(timeout=WAIT)
        reset_at = time.monotonic()
        bg.reset()
        # every result after the reset comes from a call started after it
        assert all(bg.get(timeout=WAIT) > reset_at for _ in range(8))


def test_a_task_nobody_reads_stops_prefetch_ahead_per_worker(no_leaks, tmp_path):
    calls = tmp_path / "calls"

    def count() -> int:
        return len(calls.read_text().splitlines()) if calls.exists() else 0

    with BackgroundTask(count_call, (str(calls),), workers=2, prefetch=2) as bg:
        for _ in range(3):
            bg.get(timeout=WAIT)
        wait_until(lambda: count() >= 3 + 2 * 2)
        time.sleep(0.5)  # would the workers run further ahead? (a negative check)
        assert count() == 3 + 2 * 2


# ------------------------------------------------------------------ errors
def test_a_raising_target_raises_worker_error_with_the_worker_traceback(no_leaks):
    with BackgroundTask(fail, ("boom",), workers=2) as bg:
        for _ in range(3):  # each call fails alone; the workers go on
            with pytest.raises(WorkerError) as info:
                bg.get(timeout=WAIT)
            err = info.value
            assert isinstance(err.__cause__, ValueError) and str(err.__cause__) == "boom"
            assert err.exc_type == "ValueError" and err.device == "cpu"
            assert "_background_targets.py" in err.remote_traceback
            assert "ValueError: boom" in str(err)


def test_the_task_recovers_when_the_target_stops_raising(no_leaks, tmp_path):
    flag = tmp_path / "fail"
    flag.touch()
    with BackgroundTask(fail_while, (str(flag),), workers=2, prefetch=1) as bg:
        with pytest.raises(WorkerError):
            bg.get(timeout=WAIT)
        flag.unlink()
        outcomes = []
        for _ in range(10):  # prefetched failures first, then results
            try:
                outcomes.append(bg.get(timeout=WAIT))
            except WorkerError:
                outcomes.append("error")
            if outcomes[-1] == "ok":
                break
        assert outcomes[-1] == "ok"


def test_a_dead_worker_raises_worker_died_error_and_is_replaced(no_leaks, tmp_path):
    counter = tmp_path / "deaths"
    with BackgroundTask(die_until, (str(counter), 1)) as bg:
        first_pid = bg.worker_pids[0]
        with pytest.raises(WorkerDiedError) as info:
            bg.get(timeout=WAIT)
        err = info.value
        assert err.exitcode == 7 and err.worker_index == 0 and err.device == "cpu"
        assert err.pid == first_pid and "exit code 7" in str(err)
        replacement = bg.get(timeout=WAIT)
        assert replacement != first_pid and bg.worker_pids == [replacement]


def test_a_worker_killed_from_outside_is_reported(no_leaks, tmp_path):
    go, started = tmp_path / "go", tmp_path / "started"
    with BackgroundTask(wait_for, (str(go), str(started))) as bg:
        wait_until(started.exists)
        killed = int(started.read_text())
        os.kill(killed, signal.SIGKILL)
        with pytest.raises(WorkerDiedError, match="SIGKILL") as info:
            bg.get(timeout=WAIT)
        assert info.value.pid == killed
        go.touch()
        assert bg.get(timeout=WAIT) not in (killed, None)


def test_after_max_deaths_get_raises_until_reset_revives_the_task(no_leaks, tmp_path):
    counter = tmp_path / "deaths"
    with BackgroundTask(die_until, (str(counter), 3), max_deaths=3) as bg:
        for _ in range(3):
            with pytest.raises(WorkerDiedError):
                bg.get(timeout=WAIT)
        with pytest.raises(WorkerDiedError):  # the job gave up: no hang, the same error
            bg.get(timeout=WAIT)
        bg.reset()
        assert bg.get(timeout=WAIT) == bg.worker_pids[0]


def test_a_target_that_always_dies_never_hangs(no_leaks):
    with BackgroundTask(die, (5,), workers=2) as bg:
        for _ in range(5):
            with pytest.raises(WorkerDiedError):
                bg.get(timeout=WAIT)


def test_task_timeout_fails_the_call_and_replaces_its_worker(no_leaks):
    with BackgroundTask(nap, (60,), task_timeout=0.5) as bg:
        old = bg.worker_pids[0]
        with pytest.raises(TaskTimeoutError) as info:
            bg.get(timeout=WAIT)
        assert info.value.timeout == 0.5 and info.value.pid == old
        wait_until(lambda: bg.worker_pids[0] not in (None, old))


# -------------------------------------------------------- code and backends
@pytest.mark.parametrize("method", METHODS)
def test_lambdas_and_closures_work_under_every_start_method(no_leaks, method):
    offset = np.arange(3)
    with BackgroundTask(lambda k: (os.getpid(), offset * k), (2,), workers=2,
                        start_method=method) as bg:
        worker, value = bg.get(timeout=WAIT)
        assert worker in bg.worker_pids and value.tolist() == [0, 2, 4]


def test_thread_backend(no_leaks):
    calls = []

    def target():  # not picklable: threads need no pickling
        calls.append(threading.current_thread().name)
        return len(calls)

    with BackgroundTask(target, workers=2, backend="thread") as bg:
        assert all(isinstance(bg.get(timeout=WAIT), int) for _ in range(5))
    with BackgroundTask(fail, backend="thread") as bg, pytest.raises(WorkerError) as info:
        bg.get(timeout=WAIT)
    assert isinstance(info.value.__cause__, ValueError)
    assert len(calls) >= 5


# ------------------------------------------------------- stats and closing
def test_stats_say_where_the_time_went(no_leaks):
    # One worker may deliver every result before the other has started (a slow
    # forkserver): take results until both have answered, not a fixed count.
    with BackgroundTask(napping_pid, (0.05,), workers=2) as bg:
        pids, results = set(), 0
        while len(pids) < 2 or results < 6:
            pids.add(bg.get(timeout=WAIT))
            results += 1
            assert results < 200, "only one worker ever answered"
        stats = bg.stats
    assert isinstance(stats, BackgroundStats)
    assert stats.results == results and len(stats.busy) == len(stats.idle) == 2
    assert all(b > 0 for b in stats.busy)  # both workers ran calls
    assert sum(stats.busy) >= results * 0.05
    assert all(abs(b + i - stats.seconds) < 1e-6 for b, i in zip(stats.busy, stats.idle))
    assert 0 <= stats.waited <= stats.seconds


def test_close_is_idempotent_and_get_after_close_raises(no_leaks):
    bg = BackgroundTask(pid, workers=2)
    bg.get(timeout=WAIT)
    pids = bg.worker_pids
    bg.close()
    bg.close()
    assert bg.closed
    with pytest.raises(RunnerClosedError):
        bg.get()
    with pytest.raises(RunnerClosedError):
        bg.reset()
    assert not any(p.pid in pids for p in psutil.Process().children())


def test_close_from_another_thread_wakes_a_waiting_get(no_leaks, tmp_path):
    bg = BackgroundTask(wait_for, (str(tmp_path / "never"),))
    raised = []

    def consumer() -> None:
        try:
            bg.get()
        except RunnerClosedError as exc:
            raised.append(exc)

    thread = threading.Thread(target=consumer)
    thread.start()
    time.sleep(0.2)  # let it block (a negative wait: get() has nothing to return)
    bg.close()
    thread.join(WAIT)
    assert not thread.is_alive() and raised


def test_bad_arguments_are_refused_before_anything_starts(no_leaks):
    with pytest.raises(TypeError, match="callable"):
        BackgroundTask(42)
    with pytest.raises(ValueError, match="prefetch"):
        BackgroundTask(pid, prefetch=0)
    with pytest.raises(ValueError, match="workers"):
        BackgroundTask(pid, workers=0)
    with pytest.raises(TypeError, match="kwargs"):
        BackgroundTask(pid, (), [1])
    with pytest.raises(ValueError, match="backend"):
        BackgroundTask(pid, backend="mpi")


def test_an_initializer_error_is_raised_by_the_constructor(no_leaks):
    with pytest.raises(WorkerError, match="boom"):
        BackgroundTask(pid, initializer=fail, initargs=("boom",))


def test_an_initializer_runs_in_every_worker(no_leaks, tmp_path):
    marks = tmp_path / "marks"
    with BackgroundTask(pid, workers=2, initializer=count_call, initargs=(str(marks),)) as bg:
        # The first result need not wait for the other worker's start (under
        # forkserver or spawn one worker can make thousands of results first):
        # take results until every worker has made one (so has run its
        # initializer), for at most WAIT seconds.
        seen = {bg.get(timeout=WAIT)}
        deadline = time.monotonic() + WAIT
        while seen != set(bg.worker_pids) and time.monotonic() < deadline:
            seen.add(bg.get(timeout=WAIT))
        assert seen == set(bg.worker_pids)
        assert sorted(map(int, marks.read_text().split())) == sorted(bg.worker_pids)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_terminal_ctrl_c_spares_the_workers_and_reset_goes_on(tmp_path, method):
    # The terminal sends SIGINT to the whole group: the workers ignore it.
    script = Path(__file__).resolve().parent / "scripts" / "ctrl_c_reset.py"
    proc = subprocess.run(
        [sys.executable, str(script), method, str(tmp_path / "started"), str(tmp_path / "go")],
        capture_output=True, text=True, timeout=120, start_new_session=True,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"caught": True, "result_from_a_worker": True, "workers_alive": True,
                      "children_after_close": []}
