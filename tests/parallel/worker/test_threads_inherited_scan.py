"""A forked worker limits the thread pools it inherited without scanning for them
(issue 24: runner start-up). The caller scans its loaded BLAS/OpenMP runtimes
once (threadpoolctl); its forked workers reuse that scan and set only the pools
not at their budget. Their pools end at the budget, the caller's stay as they were.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

np = pytest.importorskip("numpy")
threadpoolctl = pytest.importorskip("threadpoolctl")

from _parallel_helpers import _Collect  # noqa: E402
from _parallel_support import METHODS, run_script  # noqa: E402

from easycore.common.parallel import Pool, UnorderedRunner  # noqa: E402
from easycore.common.parallel._os import threads  # noqa: E402

pytestmark = pytest.mark.timeout(120)


_SCANS = []  # in a worker: the scans it made of its own (inherited from the test)


def _recording_limits(*args, **kwargs):
    _SCANS.append(args)
    return _threadpool_limits(*args, **kwargs)


_threadpool_limits = threadpoolctl.threadpool_limits


def pools_and_scan(_=None):
    """In a worker: its thread pools' sizes, and how many scans it made."""
    return (sorted((p["internal_api"], p["num_threads"]) for p in threadpoolctl.threadpool_info()),
            len(_SCANS))


class Reports(_Collect, UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return pools_and_scan()


def _caller_pools():
    return sorted((p["internal_api"], p["num_threads"]) for p in threadpoolctl.threadpool_info())


def _run(kind, budget):
    if kind == "runner":
        with Reports(2, start_method="fork", cpu_threads=budget) as runner:
            return runner(range(4))
    with Pool(2, start_method="fork", cpu_threads=budget) as pool:
        return pool.map(pools_and_scan, range(4), chunksize=1)


@pytest.mark.parametrize("kind", ["runner", "pool"])
@pytest.mark.parametrize("budget", [1, 2])
def test_forked_workers_reuse_the_callers_scan_and_end_at_the_budget(kind, budget, monkeypatch,
                                                                     no_leaks):
    before = _caller_pools()
    if not before:
        pytest.skip("no BLAS/OpenMP runtime loaded in this process")
    monkeypatch.setattr(threadpoolctl, "threadpool_limits", _recording_limits)  # forks inherit it
    out = _run(kind, budget)
    assert threads._scanned is not None, "the caller did not scan before forking"
    for pools, scans in out:
        assert pools == [(api, budget) for api, _ in before]
        assert scans == 0  # the worker did not scan again
    assert _caller_pools() == before  # the caller's own pools are untouched


@pytest.mark.skipif("fork" not in METHODS, reason="no fork on this platform")
@pytest.mark.parametrize("kind", ["runner", "pool"])
def test_a_fresh_scripts_first_workers_find_the_scan_current(kind):
    # In a fresh interpreter, starting the zygote imports a module after the
    # first scan: the scan is refreshed before the first workers fork, so a
    # worker's check is a length comparison (a walk of sys.modules right
    # after a fork costs each worker its copy-on-write faults).
    out = run_script("scan_at_fork.py", kind, timeout=100)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found and all(check == [True] for check in found), found



def openblas_started_and_pools(size=0):
    """In a worker: whether each OpenBLAS pool runs its threads (``blas_server_avail``,
    which a fork clears), and the pools' sizes, after a ``size`` x ``size`` matrix
    product (none for 0)."""
    import ctypes

    if size:
        a = np.ones((size, size))
        assert (a @ a)[0, 0] == size
    started = [ctypes.c_int.in_dll(lib.dynlib, "blas_server_avail").value != 0
               for lib in threadpoolctl.ThreadpoolController().lib_controllers
               if lib.internal_api == "openblas"]
    return started, _caller_pools()


def _openblas_pthreads() -> bool:
    import ctypes

    libs = [lib for lib in threadpoolctl.ThreadpoolController().lib_controllers
            if lib.internal_api == "openblas" and lib.threading_layer == "pthreads"]
    try:
        return bool(libs) and all(
            ctypes.c_int.in_dll(lib.dynlib, "blas_server_avail") is not None for lib in libs)
    except ValueError:  # a build that does not export it
        return False


@pytest.mark.skipif("fork" not in METHODS, reason="no fork on this platform")
@pytest.mark.parametrize("kind", ["runner", "pool"])
def test_a_forked_worker_shrinks_openblas_without_starting_its_threads(kind, no_leaks):
    # OpenBLAS ends its threads at a fork; its setter started them all again in
    # each worker (every core's, each spinning ~0.1 s) for a budget of 1.
    if not _openblas_pthreads():
        pytest.skip("NumPy's BLAS here is not an OpenBLAS on pthreads that exports its pool's "
                    "state (NumPy 2.5's wheels export none: the zygote shrinks it, tested "
                    "by test_a_forked_worker_limiting_any_openblas_starts_none_of_its_threads)")
    if kind == "runner":
        class Started(_Collect, UnorderedRunner):
            producer_work = staticmethod(
                lambda device, cfg, data: openblas_started_and_pools(data))

        with Started(1, start_method="fork", cpu_threads=1) as runner:
            shrunk, after_product = runner([0, 300])
    else:
        with Pool(1, start_method="fork", cpu_threads=1) as pool:
            shrunk, after_product = pool.map(openblas_started_and_pools, [0, 300],
                                              chunksize=1)
    assert shrunk[0] and not any(shrunk[0])  # the budget started no OpenBLAS thread
    assert all(n == 1 for api, n in shrunk[1] if api == "openblas")  # and holds
    assert not any(after_product[0])  # a product at the budget runs on the caller's thread


def threads_and_openblas(_=None):
    """In a worker: its OS threads (the kernel's count) and its OpenBLAS pools' sizes."""
    return (len(os.listdir("/proc/self/task")),
            [p["num_threads"] for p in threadpoolctl.threadpool_info()
             if p["internal_api"] == "openblas"])


class Threads(_Collect, UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return threads_and_openblas()


def _threads_in_workers(kind, budget):
    if kind == "runner":
        with Threads(2, start_method="fork", cpu_threads=budget) as runner:
            return runner(range(2))
    # "replacements": each item in a worker that replaced the last one
    replace = 1 if kind == "replacements" else None
    with Pool(2, start_method="fork", cpu_threads=budget, maxtasksperchild=replace) as pool:
        return pool.map(threads_and_openblas, range(4 if replace else 2), chunksize=1)


@pytest.mark.skipif("fork" not in METHODS or not sys.platform.startswith("linux"),
                    reason="fork, and /proc's count of a process's threads")
@pytest.mark.parametrize("kind", ["runner", "pool", "replacements"])
def test_a_forked_worker_limiting_any_openblas_starts_none_of_its_threads(kind, no_leaks):
    # Whatever the build: where the worker cannot shrink the pool at rest
    # (NumPy 2.5's OpenBLAS exports no pool state), the zygote limits it once
    # and forks the workers, which inherit it at the budget. Before, each worker
    # started every core's thread (spinning ~0.1 s each) for a budget of 1.
    pools = [p["num_threads"] for p in threadpoolctl.threadpool_info()
             if p["internal_api"] == "openblas" and p.get("threading_layer") == "pthreads"]
    if not pools or max(pools) < 2:
        pytest.skip("no OpenBLAS on pthreads with more than one thread loaded here")
    untouched = _threads_in_workers(kind, None)  # nothing set: the threads a fork leaves
    limited = _threads_in_workers(kind, 1)
    assert {n for n, _ in limited} == {n for n, _ in untouched}, (limited, untouched)
    assert all(sizes and set(sizes) == {1} for _, sizes in limited), limited
