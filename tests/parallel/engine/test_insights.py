"""Insights: each bottleneck built for real, and the verdict that names it.

Every pipeline has one stage far slower than the others (20 ms of sleep per
item against microseconds), so that the verdict holds on a loaded 2-core box.
"""

from __future__ import annotations

import io
import json
import sys
import time

import pytest
from _pool_funcs import exit_on

from easycore.common.parallel import (
    BackgroundTask,
    Insights,
    JobQueue,
    OrderedRunner,
    Pool,
    TaskTimeoutError,
    UnorderedRunner,
    Verdict,
    WorkerDiedError,
    WorkerInsights,
)
from easycore.common.parallel.progress import Progress

pytestmark = pytest.mark.timeout(120)

SLOW = 0.02  # seconds per item of the slow stage


class SlowConsumer(UnorderedRunner):
    @staticmethod
    def consumer_work(cfg, data):
        time.sleep(SLOW)


class Plain(UnorderedRunner):
    pass


class BigResults(OrderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return b"x" * (8 << 20)  # cheap to make, 8 MB to move


class BusyWorkers(UnorderedRunner):
    # An init hook makes the constructor wait for every worker: without it a
    # worker still starting (a slow forkserver) could take none of the items.
    @staticmethod
    def producer_init(device, cfg):
        pass

    @staticmethod
    def producer_work(device, cfg, data):
        time.sleep(SLOW)
        return data


def slow_input(n):
    for i in range(n):
        time.sleep(SLOW)
        yield i


def device_dependent(ctx, x):
    time.sleep(ctx.context)  # worker 1 is the slow device
    return x


def test_slow_consumer_is_the_verdict(no_leaks):
    with SlowConsumer(2, insights=True) as runner:
        runner(range(60))
        ins = runner.insights()
    verdict = ins.verdict()
    assert verdict.stage == "consumer", ins
    assert ins.items == 60 and sum(w.items for w in ins.workers) == 60
    assert ins.consuming > ins.waiting_for_results
    assert "consumer_work_batch" in str(ins)
    # the timeline: a span per chunk of each worker, and the consumer's
    assert len([s for s in ins.timeline if s[0] >= 0]) == sum(w.chunks for w in ins.workers)
    consumer = [s for s in ins.timeline if s[0] == -1]
    assert sum(s[2] for s in consumer) == pytest.approx(ins.consuming)


def test_slow_input_generator_is_the_verdict(no_leaks):
    with Plain(2, insights=True) as runner:
        runner(slow_input(60))
        ins = runner.insights()
    assert ins.verdict().stage == "input", ins
    assert ins.reading_input >= 0.5 * 60 * SLOW


def test_big_results_are_moving_data(no_leaks):
    with BigResults(2, insights=True) as runner:
        runner(range(24))
        ins = runner.insights()
    assert ins.verdict().stage == "moving data", ins
    assert sum(w.bytes for w in ins.workers) >= 24 * (8 << 20)
    assert all(w.moving > w.working for w in ins.workers if w.items)


@pytest.mark.parametrize("backend", ["process", "thread"])
def test_busy_workers_bound_the_run(no_leaks, backend):
    with BusyWorkers(2, insights=True, backend=backend) as runner:
        runner(list(range(60)))
        ins = runner.insights()
    assert ins.verdict().stage == "workers", ins
    for w in ins.workers:
        assert w.working >= 0.9 * w.items * SLOW  # the sleep is user code
        assert w.working > 5 * w.moving


def test_one_slow_device_is_a_straggler(no_leaks):
    # Both workers busy (a pool hands work to the first worker ready, so a
    # worker with nothing to do would never show as slow), one 10x slower per item.
    with Pool(2, worker_contexts=[0.01, 0.1], insights=True) as pool:
        # The constructor waits for the first worker only: a broadcast waits
        # for both, so the slow one cannot miss the map by starting late.
        pool.broadcast(abs, 0)
        pool.insights(reset=True)
        pool.map(device_dependent, range(40), chunksize=1, pass_context=True)
        ins = pool.insights()
    verdict = ins.verdict()
    assert verdict.stage == "straggler", ins
    assert "worker 1" in verdict.advice


def test_pool_callbacks_are_the_callers_stage(no_leaks):
    def slow_callback(result):
        time.sleep(0.5)

    with Pool(2, insights=True) as pool:
        pool.apply_async(abs, (-1,), callback=slow_callback).get(timeout=30)
        ins = pool.insights(reset=True)
        assert ins.consuming >= 0.4
        assert ins.waiting_for_results >= 0.4  # get() waited for the callback
        # The constructor's start counts for both; one not ready when the
        # constructor returned (it waits for the first) counts until it was.
        assert all(w.startup > 0 for w in ins.workers), ins
        assert pool.insights().items == 0  # counted afresh after reset


def test_background_task_caller_between_gets_is_the_consumer(no_leaks):
    with BackgroundTask(abs, (-1,), workers=1, insights=True) as task:
        for _ in range(20):
            task.get(timeout=30)
            time.sleep(SLOW)  # the caller's own code
        ins = task.insights()
    assert ins.verdict().stage == "consumer", ins
    assert ins.waiting_for_results < ins.consuming


def test_job_queue_busy_jobs_and_a_waiting_caller(no_leaks):
    with JobQueue(2, insights=True) as queue:
        for _ in range(20):
            queue.put(time.sleep, SLOW)
        for _ in range(20):
            queue.get(timeout=30)
        ins = queue.insights()
    assert ins.items == 20
    assert ins.waiting_for_results > ins.consuming
    assert ins.verdict().stage == "workers", ins


def test_insights_off_by_default_and_counted_per_call(no_leaks):
    with Plain(1) as runner:
        runner(range(3))
        with pytest.raises(RuntimeError, match="insights=True"):
            runner.insights()
        assert runner._engine.recorder is None
    with Pool(1) as pool, pytest.raises(RuntimeError, match="insights=True"):
        pool.insights()
    with Plain(1, insights=True) as runner:
        assert runner.insights() is None
        runner(range(10))
        runner(range(4))
        assert runner.insights().items == 4  # the last call only


def test_progress_bar_shows_the_live_bottleneck(no_leaks, monkeypatch):
    monkeypatch.setattr(Progress, "postfix_interval", 0.0)
    out = io.StringIO()
    with SlowConsumer(1, insights=True, progress={"file": out, "mininterval": 0}) as runner:
        runner(range(20))
    assert "consumer " in out.getvalue()


def _sample() -> Insights:
    return Insights(
        wall=2.0,
        workers=[WorkerInsights(0, "cpu", 0.1, 1.5, 0.2, 0.2, 50, 5, 1 << 20),
                 WorkerInsights(1, "cuda:0", 0.1, 1.6, 0.1, 0.2, 50, 5, 1 << 20, deaths=1)],
        reading_input=0.01, consuming=0.1, waiting_for_results=1.8, items=100,
        chunk_sizes=[10] * 10, deaths=1, retries=3,
        timeline=[[0, 0.1, 0.1, 0.02], [1, 0.1, 0.12, 0.01], [-1, 0.25, 0.01, 0.0]],
    )


def test_json_round_trip_and_table():
    ins = _sample()
    data = json.loads(ins.to_json())
    assert data["verdict"]["stage"] == "workers"
    back = Insights.from_dict(data)
    assert back == ins
    text = str(ins)
    assert text.split("verdict: ", 1)[1].split() == str(ins.verdict()).split()
    assert max(len(line) for line in text.splitlines()) < 80
    assert "1 deaths" in text and "3 retries" in text
    assert isinstance(ins.verdict(), Verdict)


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = _sample().plot(str(tmp_path / "insights.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_plot_falls_back_to_text_without_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import raises ImportError
    path = _sample().plot(str(tmp_path / "insights.png"))
    assert path.endswith("insights.png.txt")
    with open(path, encoding="utf-8") as f:
        assert "verdict:" in f.read()


def _two(working, moving, wall=1.0, items=(50, 50), **caller):
    rows = [WorkerInsights(i, "cpu", 0.0, working[i], moving[i],
                           wall - working[i] - moving[i], items[i], 5)
            for i in range(2)]
    return Insights(wall=wall, workers=rows, items=sum(items), **caller)


@pytest.mark.parametrize("ins, stage", [
    (_two([0.1, 0.1], [0.05, 0.05], caller_moving=0.8, waiting_for_results=0.1),
     "moving data"),  # tiny items: the caller moves data, the workers wait
    (_two([0.1, 0.1], [0.0, 0.0], consuming=0.5, caller_moving=0.3), "consumer"),
    (_two([0.2, 0.2], [0.0, 0.0], waiting_for_results=0.9), "latency"),
    (_two([0.95, 0.2], [0.0, 0.0]), "straggler"),  # one slow item, the other done
    (_two([0.9, 0.9], [0.0, 0.0], items=(10, 90)), "straggler"),  # a slow device
    (_two([0.9, 0.85], [0.0, 0.0]), "workers"),
    (Insights(wall=1.0), "none"),
])
def test_verdict_rules(ins, stage):
    assert ins.verdict().stage == stage, ins


def test_deaths_timeouts_and_retries_are_counted(no_leaks):
    with Pool(2, insights=True) as pool:
        before = pool.insights().workers
        with pytest.raises(TaskTimeoutError):
            pool.apply(time.sleep, (30,), task_timeout=0.3)
        # a death in a chunk of several items: the others are sent again
        with pytest.raises(WorkerDiedError):
            pool.map(exit_on, range(40), chunksize=10)
        pool.apply(abs, (-1,))  # the replacements are ready
        ins = pool.insights()
    assert ins.timeouts == 1 and ins.deaths == 1, ins
    assert ins.retries >= 1
    # a replacement's start-up counts on its slot
    assert sum(w.startup for w in ins.workers) > sum(w.startup for w in before)


@pytest.mark.parametrize("late_items, stage", [(10, "workers"), (2, "straggler")])
def test_a_worker_that_joined_late_is_compared_over_the_time_it_was_up(late_items, stage):
    """Worker 1 became ready 1.7 s into a 2 s run (a slow start under load): its
    little busy time makes worker 0 no straggler; slow items of its own still do."""
    ins = Insights(
        wall=2.0,
        workers=[WorkerInsights(0, "cpu", 0.1, 1.8, 0.0, 0.1, 90, 90),
                 WorkerInsights(1, "cpu", 1.7, 0.25, 0.0, 0.05, late_items, late_items)],
        waiting_for_results=1.9, items=90 + late_items,
    )
    verdict = ins.verdict()
    assert verdict.stage == stage, verdict
    if stage == "straggler":
        assert "worker 1" in verdict.advice
