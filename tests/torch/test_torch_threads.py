"""The thread budget of torch workers (issue 10): N workers must not each use every core.

A worker reports ``torch.get_num_threads()``. By default each gets
``max(1, cpus // workers)`` with ``cpus`` the CPUs this process may run on
(its affinity mask), whatever the machine: the expected values are computed
here, never assumed. ``cpu_threads=`` overrides it; None leaves torch's own
default, which the test reads from a fresh interpreter.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

import pytest
import torch

from easycore.torch.parallel import UnorderedRunner

pytestmark = pytest.mark.timeout(180)


class Threads(UnorderedRunner):
    """Each item: (torch threads, OMP_NUM_THREADS) as the worker sees them."""

    @staticmethod
    def producer_work(device, cfg, data):
        return torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")

    @staticmethod
    def consumer_init(cfg):
        cfg.seen = set()

    @staticmethod
    def consumer_work(cfg, data):
        cfg.seen.add(data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.seen


def _cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class MoreThreads(Threads):
    # the class attribute form (docs/gpus.md); never what the default would give
    cpu_threads = _cpus() + 1


class DefaultThreads(Threads):
    cpu_threads = None


@pytest.fixture
def forkserver_running():
    """The fork server, started once per interpreter, is no leak: start it first."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("no forkserver start method")
    from multiprocessing import forkserver

    forkserver.ensure_running()


def _fresh_torch_threads() -> int:
    """torch's default intra-op threads in a new interpreter with this environment."""
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        capture_output=True, text=True, timeout=120, check=True,
    )
    return int(out.stdout.strip())


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_each_worker_gets_its_share_of_the_cpus(workers, no_leaks):
    expected = max(1, _cpus() // workers)
    with Threads(workers) as runner:
        assert runner.cpu_threads == expected
        seen = runner(range(6 * workers))
    assert seen == {(expected, str(expected))}


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_the_budget_holds_under_each_start_method(method, forkserver_running, no_leaks):
    expected = max(1, _cpus() // 2)
    with Threads(2, start_method=method) as runner:
        assert runner(range(8)) == {(expected, str(expected))}


def test_cpu_threads_sets_the_budget(no_leaks):
    with Threads(2, cpu_threads=3) as runner:
        assert runner(range(8)) == {(3, "3")}


def test_cpu_threads_none_leaves_torch_default(monkeypatch, no_leaks):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    expected = _fresh_torch_threads()
    with Threads(2, cpu_threads=None) as runner:
        assert runner.cpu_threads is None
        assert runner(range(8)) == {(expected, None)}


def test_a_class_attribute_sets_the_budget(monkeypatch, no_leaks):
    more = _cpus() + 1
    with MoreThreads(1) as runner:
        assert runner.cpu_threads == more
        assert runner(range(4)) == {(more, str(more))}
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    expected = _fresh_torch_threads()
    with DefaultThreads(1) as runner:
        assert runner.cpu_threads is None
        assert runner(range(4)) == {(expected, None)}
    # the constructor's argument wins over the class attribute
    with MoreThreads(1, cpu_threads=1) as runner:
        assert runner(range(4)) == {(1, "1")}


def test_a_forked_worker_limits_a_pool_the_parent_already_started(no_leaks):
    # The parent ran a multi-threaded op first (its OpenMP pool is up); one
    # thread per forked worker keeps them clear of it, and is what they report.
    threads = torch.get_num_threads()
    torch.set_num_threads(max(2, threads))
    try:
        a = torch.randn(500, 500)
        (a @ a).sum()
        workers = max(2, _cpus())  # a budget of 1: fork is safe
        with Threads(workers, start_method="fork") as runner:
            assert runner.cpu_threads == 1
            assert runner(range(3 * workers)) == {(1, "1")}
    finally:
        torch.set_num_threads(threads)
