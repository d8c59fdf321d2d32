"""Under ``fork`` the last first worker forks the back-end's zygote, not the caller.

The caller then forks only its workers (as ``multiprocessing.Pool`` does), and
the zygote must still be what a zygote forked by the caller was: a copy of the
caller holding none of the workers' pipes, tied to no worker, there before a
replacement can be needed, gone after ``close``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

import psutil
import pytest
from _engine_funcs import pid, square
from _parallel_support import wait_replaced

from easycore.common.parallel import Pool, TaskTimeoutError
from easycore.common.parallel._os import lifeline
from easycore.common.parallel._os import zygote as zygote_module

pytestmark = pytest.mark.timeout(120)


def _targets(of_pid: int) -> dict:
    out = {}
    for fd in os.listdir(f"/proc/{of_pid}/fd"):
        with contextlib.suppress(OSError):  # (closed meanwhile)
            out[int(fd)] = os.readlink(f"/proc/{of_pid}/fd/{fd}")
    return out


def forked_by_a_worker(pool) -> None:
    if not pool._backend._zygote._from_worker:
        # An OpenBLAS a forked worker cannot shrink at rest (NumPy 2.5's): the
        # zygote forks the first workers too, so the caller forks it first.
        pytest.skip("the caller forks the zygote here: the first workers come from it")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")
def test_the_last_worker_forks_the_zygote_and_it_keeps_none_of_the_pools_descriptors(no_leaks):
    before = set(_targets(os.getpid()).values())
    with Pool(2, start_method="fork") as pool:
        forked_by_a_worker(pool)
        zygote = pool._backend._zygote
        assert psutil.Process(zygote.pid).ppid() == pool.worker_pids[-1]
        victim = pool.worker_pids[0]
        os.kill(victim, signal.SIGKILL)
        assert pool.map(square, range(6), 1) == [x * x for x in range(6)]
        wait_replaced(pool, 0, victim)  # served: the zygote closed what it had to first
        assert psutil.Process(pool.worker_pids[0]).ppid() == zygote.pid
        # None of what the worker that forked it holds (its pipes, its sentinel's
        # end), beyond what the caller had before the pool and the zygote's own
        # status pipe (whose read end, the caller's, that worker inherited).
        status = _targets(os.getpid())[zygote.process.sentinel]
        shared = set(_targets(zygote.pid).values()) & set(_targets(pool.worker_pids[1]).values())
        assert shared <= before | {status}, shared - before
    assert zygote.exitcode == 0  # it saw the end of its socket: not killed


def test_a_worker_timed_out_with_what_it_started_leaves_the_zygote_it_forked(no_leaks):
    with Pool(1, start_method="fork", task_timeout=0.5) as pool:
        forked_by_a_worker(pool)
        zygote = pool._backend._zygote
        first = pool.worker_pids[0]
        assert psutil.Process(zygote.pid).ppid() == first
        with pytest.raises(TaskTimeoutError):
            pool.apply(time.sleep, (60,))
        # The worker went with its descendants; the zygote is not one of them.
        replacement = pool.apply(pid)
        assert replacement != first and psutil.Process(replacement).ppid() == zygote.pid
        assert zygote.exitcode is None


def test_a_workers_tree_leaves_out_the_zygote_it_forked(no_leaks):
    # As a back-end reads a worker's tree before ending it with what it started.
    with Pool(2, start_method="fork") as pool:
        forked_by_a_worker(pool)
        zygote, last = pool._backend._zygote.pid, pool.worker_pids[-1]
        assert [p.pid for p in lifeline.descendants_of([last])[last]] == [zygote]
        assert lifeline.descendants_of([last], [zygote, None]) == {last: []}


def test_a_zygote_whose_worker_died_before_forking_it_is_forked_by_the_caller(no_leaks):
    with Pool(1, start_method="fork") as pool:
        first = pool.worker_pids[0]
        os.kill(first, signal.SIGKILL)  # most likely before its first line ran
        assert pool.map(square, range(4), 1) == [0, 1, 4, 9]
        replacement = pool.apply(pid)
        zygote = pool._backend._zygote.pid
        assert psutil.Process(replacement).ppid() == zygote != os.getpid()


def test_a_worker_stopped_before_forking_the_zygote_does_not_hold_the_pool(no_leaks,
                                                                           monkeypatch):
    monkeypatch.setattr(zygote_module, "_GREETING", 0.2)
    with Pool(2, start_method="fork") as pool:
        last = pool.worker_pids[-1]
        os.kill(last, signal.SIGSTOP)  # maybe before its first line ran
        try:
            assert pool.apply(square, (3,)) == 9  # its coordinator starts: the zygote is there
            assert pool._backend._zygote.pid is not None
        finally:
            os.kill(last, signal.SIGCONT)
