"""The Ray back-end: ``close()`` from another thread ends a running call (issue 15,
item 13), and actors get the runner's thread budget (issue 10)."""

from __future__ import annotations

import itertools
import os
import threading

import pytest

ray = pytest.importorskip("ray")

from _ray_runners import Slow  # noqa: E402

from easycore.common.parallel import RunnerClosedError, UnorderedRunner  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(120), pytest.mark.usefixtures("local_ray")]


#: set by the consumer at each result: the call is running (reset by each test)
_RESULT_SEEN = threading.Event()


class SlowSignals(Slow):
    @staticmethod
    def consumer_work(cfg, data):
        _RESULT_SEEN.set()


@pytest.mark.parametrize("source", ["list", "generator"])
def test_close_from_another_thread_ends_the_call(source):
    _RESULT_SEEN.clear()
    # an endless generator: only close() can end that call
    data = list(range(100_000)) if source == "list" else itertools.count()
    runner = SlowSignals(devices=2, backend="ray")
    errors: list = []

    def close():
        try:
            assert _RESULT_SEEN.wait(60), "the call never started"
            runner.close(timeout=60)
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)

    closer = threading.Thread(target=close, name="test-closer")
    closer.start()
    try:
        with pytest.raises(RunnerClosedError):
            runner(data)
    finally:
        closer.join(90)
        runner.close()
    assert not closer.is_alive()
    assert errors == []
    assert not runner.is_activate


class ThreadEnv(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return os.environ.get("OMP_NUM_THREADS"), os.environ.get("OPENBLAS_NUM_THREADS")

    @staticmethod
    def consumer_init(cfg):
        cfg.seen = set()

    @staticmethod
    def consumer_work(cfg, data):
        cfg.seen.add(data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.seen


@pytest.mark.parametrize("cpu_threads", ["auto", 3])
def test_actors_get_the_thread_budget(cpu_threads):
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    expected = str(max(1, cpus // 2) if cpu_threads == "auto" else cpu_threads)
    with ThreadEnv(devices=2, backend="ray", cpu_threads=cpu_threads) as runner:
        assert runner(range(8)) == {(expected, expected)}
