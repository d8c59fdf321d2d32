"""A worker runs no thread of easycore's where the kernel watches its parent (Linux).

Its parent-death signal (``PR_SET_PDEATHSIG``) does what a watchdog thread did,
and that thread made every fork in the worker a fork from a multi-threaded
process: a pool started inside a worker (a nested pool) warned "This process
... is multi-threaded, use of fork() may lead to deadlocks" three times on
CPython 3.12+ (its zygote and its two workers), against issue 32 item 3 ("no
easycore call may trigger it"). Where the signal cannot be armed (macOS) the
watchdog stays.
"""

from __future__ import annotations

import sys
import warnings

import pytest
from _parallel_helpers import _Collect
from _parallel_support import METHODS

from easycore.common.parallel import Pool, UnorderedRunner

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif("fork" not in METHODS or not sys.platform.startswith("linux"),
                       reason="fork, and Linux's parent-death signal and /proc"),
]


def _plus_one(x):
    return x + 1


def threads_then_a_pool_of_its_own(x):
    """In a worker: its Python threads, then a fork pool of its own and the fork
    warnings."""
    # Python's threads, raw ones included (a library's native threads, such as a
    # BLAS pool's, are not easycore's and a fork's handlers end them anyway).
    threads = len(sys._current_frames())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Pool(2, start_method="fork") as pool:
            results = pool.map(_plus_one, [x, x])
    forks = [str(w.message) for w in caught
             if issubclass(w.category, DeprecationWarning) and "fork()" in str(w.message)]
    return threads, results, forks


class Nested(_Collect, UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return threads_then_a_pool_of_its_own(data)


@pytest.mark.parametrize("kind", ["pool", "runner"])
def test_a_worker_runs_no_thread_and_its_own_pool_forks_without_warning(kind, no_leaks):
    # cpu_threads=None: no thread budget, whose setter may start a BLAS's threads
    # (an OpenBLAS that an earlier test left at another size grows to it).
    if kind == "pool":
        with Pool(1, start_method="fork", cpu_threads=None) as pool:
            threads, results, forks = pool.apply(threads_then_a_pool_of_its_own, (1,))
    else:
        with Nested(1, start_method="fork", cpu_threads=None) as runner:
            [(threads, results, forks)] = runner([1])
    assert results == [2, 2]
    assert threads == 1  # the worker's own only (it was 2: the watchdog)
    assert forks == []  # (3.12+ warned for the inner zygote and both inner workers)
