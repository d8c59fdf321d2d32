"""Work given to a pool just made, while some of its workers still start: it waits for
them rather than queueing behind the first one ready (``Dispatcher.share_left``)."""

from __future__ import annotations

import gc
import multiprocessing
import warnings

import pytest
from _parallel_support import METHODS
from _pool_funcs import (
    announce_then_hold,
    meet,
    raise_value_error,
    touch_in,
    wait_for_file,
    worker_pid,
)
from _slow_start import HeldContext
from processes import wait_gone

from easycore.common.parallel import Pool

pytestmark = pytest.mark.timeout(120)

WAIT = 30.0


@pytest.mark.parametrize("method", METHODS)
def test_two_long_tasks_given_at_once_run_on_two_workers(method, tmp_path, no_leaks):
    # Each task waits until both run: queued behind each other on the first worker
    # ready, they would only meet at the deadline, in one process.
    with Pool(2, start_method=method) as pool:
        got = pool.map(meet, [str(tmp_path)] * 2, chunksize=1)
    assert [met for _, met in got] == [True, True]
    assert len({pid for pid, _ in got}) == 2


@pytest.mark.parametrize("method", METHODS)
def test_a_call_made_while_another_runs_waits_for_a_starting_worker_not_behind_it(
        method, tmp_path, no_leaks):
    # Worker 1 starts only once ``started`` exists; the long call holds worker 0
    # until ``release`` exists, which is made only after the short call answered.
    started = tmp_path / "started"
    with Pool(2, start_method=method, worker_contexts=[None, HeldContext(str(started))]) as pool:
        long = pool.apply_async(announce_then_hold, (0, str(tmp_path)))
        wait_for_file(tmp_path / "0", WAIT)  # worker 0 runs it
        short = pool.apply_async(worker_pid)
        started.touch()
        try:
            short_pid = short.get(timeout=WAIT)  # (queued behind the long call: no answer)
            assert short_pid == pool.worker_pids[1]  # the worker that was starting
        finally:
            (tmp_path / "release").touch()
        assert long.get(timeout=WAIT) == 0


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("end", ["close", "terminate"])
def test_a_pool_never_given_work_ends_without_its_coordinator(method, end, no_leaks):
    # The coordinator thread starts with the first job: a pool that had none ends
    # all the same, its workers gone.
    pool = Pool(2, start_method=method)
    pids = [h.pid for h in pool._backend._handles]
    getattr(pool, end)()
    pool.join()
    assert repr(pool).startswith("<Pool state=TERMINATED")
    assert wait_gone(pids) == []


@pytest.mark.parametrize("method", METHODS)
def test_a_pool_with_an_initializer_waits_for_its_first_worker(method, tmp_path, no_leaks):
    # An initializer is the user's code, which may fail: the constructor returns once a
    # worker ran it (as before), under every start method.
    with Pool(2, start_method=method, initializer=touch_in, initargs=(str(tmp_path),)):
        assert list(tmp_path.iterdir())


@pytest.mark.parametrize("method", [m for m in METHODS if m != "fork"])
def test_a_pool_failing_after_its_workers_launched_ends_them(method, monkeypatch, no_leaks):
    # Under spawn and forkserver the workers start before the pool sets up its
    # engine: a failure in between (here its books) ends them before it raises.
    def fail(self):
        raise RuntimeError("books")

    monkeypatch.setattr(Pool, "_open_books", fail)
    with pytest.raises(RuntimeError, match="books"):
        Pool(2, start_method=method)
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("method", METHODS)
def test_a_pool_whose_constructor_raised_does_not_warn_when_collected(method, no_leaks):
    # An initializer that raises fails the constructor; the half-made pool, once
    # collected, is not an "unclosed running pool" (its workers are gone).
    with pytest.raises(Exception, match="no init"):
        Pool(2, start_method=method, initializer=raise_value_error, initargs=("no init",))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
