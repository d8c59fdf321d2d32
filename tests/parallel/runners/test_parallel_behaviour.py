"""The runner contract beyond the tutorial: order, reuse, cfg copies, lifecycle, progress."""

from __future__ import annotations

import io
import threading
import time

import pytest
from _parallel_helpers import (
    Identity,
    SleepyOrdered,
    SleepyUnordered,
    SumSquares,
    WorkerState,
)

from easycore.common.config import CfgNode
from easycore.common.parallel import (
    BaseRunner,
    OrderedRunner,
    RunnerClosedError,
    UnorderedRunner,
)

pytestmark = pytest.mark.timeout(120)


def test_ordered_runner_delivers_in_input_order_despite_finishing_order(no_leaks):
    # Early items are the slowest, so they finish last.
    items = [(i, 0.02 if i < 4 else 0.0) for i in range(40)]
    with SleepyOrdered(2) as runner:
        assert runner(items) == list(range(40))


def test_unordered_runner_delivers_as_results_finish(no_leaks):
    items = [(0, 0.5)] + [(i, 0.0) for i in range(1, 20)]
    with SleepyUnordered(2) as runner:
        out = runner(items)
    assert sorted(out) == list(range(20))
    # The slow first item arrives among the last (only the chunks queued
    # behind it on the same worker can come later), not first.
    assert out[0] != 0 and out.index(0) >= 10


def test_base_runner_is_unordered_and_the_classes_say_so():
    assert BaseRunner.ordered is False
    assert UnorderedRunner.ordered is False
    assert OrderedRunner.ordered is True


def test_large_ordered_input_keeps_order_through_chunking(no_leaks):
    with Identity(2) as runner:
        assert runner(range(50_000)) == list(range(50_000))


def test_runner_is_reusable_across_calls_and_producer_state_persists(no_leaks):
    with WorkerState(2) as runner:
        first = runner(range(10))
        second = runner(range(10))
        pids = set(runner.worker_pids)
    assert [r[3] for r in first] == list(range(10))
    assert [r[3] for r in second] == list(range(10))
    assert {r[1] for r in first + second} <= pids  # same workers both times
    per_pid_first = {}
    for _, pid, calls, _ in first:
        per_pid_first[pid] = max(per_pid_first.get(pid, 0), calls)
    # producer_init ran once per worker: counters continue in the second call
    for _, pid, calls, _ in second:
        assert calls > per_pid_first.get(pid, 0)


def test_each_call_gets_a_fresh_copy_of_the_constructor_cfg(no_leaks):
    cfg = CfgNode({"log": ["from the caller"]})
    with Counting(2, cfg=cfg) as runner:
        assert [runner(range(5)) for _ in range(3)] == [6, 6, 6]
    assert cfg.log == ["from the caller"]  # the caller's cfg is never touched


def test_consumer_cfg_is_fresh_per_call_even_when_the_consumer_mutates_it(no_leaks):
    with Counting(2, cfg=CfgNode({"log": []})) as runner:
        assert runner(range(3)) == 3
        assert runner(range(4)) == 4  # not 7: last call's appends are gone


class NestedCounting(UnorderedRunner):
    @staticmethod
    def consumer_work(cfg, data):
        cfg.deep.log.append(data)
        cfg.deep.table[f"k{data}"] = -1
        cfg["seen"] += 1

    @staticmethod
    def consumer_end(cfg):
        return len(cfg.deep.log), cfg.seen, sum(cfg.deep.table.values())


def test_nested_changes_of_a_large_cfg_never_reach_the_next_call(no_leaks):
    # The per-call cfg is copied lazily (only what a call touches): changes
    # deep inside it must still stay in that call.
    table = {f"k{i}": 1 for i in range(10_000)}
    cfg = CfgNode({"deep": {"log": [], "table": table}, "seen": 0})
    with NestedCounting(2, cfg=cfg) as runner:
        assert runner(range(3)) == (3, 3, 10_000 - 2 * 3)
        assert runner(range(4)) == (4, 4, 10_000 - 2 * 4)
    assert cfg.deep.log == [] and cfg.seen == 0 and sum(cfg.deep.table.values()) == 10_000


class FreezingConsumer(UnorderedRunner):
    """Changes nodes deep in its cfg, in a list and in a tuple; freezes it all at the end."""

    @staticmethod
    def consumer_work(cfg, data):
        if data >= 0:
            cfg.A.B.c += 1
            cfg.L[0].x += 1
            cfg.T[0].y += 1

    @staticmethod
    def consumer_end(cfg):
        cfg.freeze()
        return cfg.A.B.c, cfg.L[0].x, cfg.T[0].y


@pytest.mark.parametrize("pad", [0, 100], ids=["small levels", "levels of 100 keys (overlays)"])
def test_a_consumer_freezing_its_cfg_never_freezes_the_next_call(pad, no_leaks):
    # Issue 34, item 7: a call's freeze of its copy reached the runner's own nodes.
    # Issue 37: levels of many keys start as overlays over the runner's snapshot.
    extra = {f"pad{i}": i for i in range(pad)}
    cfg = CfgNode({"A": {"B": {"c": 0, **extra}, **extra}, "L": [CfgNode({"x": 0})],
                   "T": (CfgNode({"y": 0}),), **extra})
    with FreezingConsumer(1, cfg=cfg) as runner:
        assert runner([-1]) == (0, 0, 0)  # froze a copy it had not touched
        assert runner(range(2)) == (2, 2, 2)
        assert runner(range(3)) == (3, 3, 3)
    assert not cfg.A.B.is_frozen()


class Counting(UnorderedRunner):
    @staticmethod
    def consumer_work(cfg, data):
        cfg.log.append(data)

    @staticmethod
    def consumer_end(cfg):
        return len(cfg.log)


def test_cfg_reaches_every_worker_as_its_own_copy(no_leaks):
    cfg = CfgNode({"scale": 10})
    with WorkerState(["cpu", "cpu:1"], cfg=cfg) as runner:
        cfg.scale = 1000  # after construction: the runner kept its own copy
        out = runner(range(20))
    assert [r[3] for r in out] == [10 * i for i in range(20)]
    assert {r[0] for r in out} <= {"cpu", "cpu:1"}


def test_devices_argument(no_leaks):
    with Identity(2) as runner:
        assert runner.devices == ["cpu", "cpu"]
        assert len(runner.worker_pids) == 2
    with Identity(iter(["cpu", "cpu"])) as runner:  # any iterable
        assert runner.devices == ["cpu", "cpu"]
    with Identity("cpu") as runner:  # one str is one device, not three letters
        assert runner.devices == ["cpu"]
    for bad in (0, -1, [], [""], [3], True, None, 1.5):
        with pytest.raises((ValueError, TypeError)):
            Identity(bad)
    with pytest.raises(ValueError):
        Identity(1, queue_scale=0)
    with pytest.raises(ValueError, match="unknown backend"):
        Identity(1, backend="nope")


def test_empty_input_and_generators_and_iterators(no_leaks):
    with SumSquares(2) as runner:
        assert runner([]) == 0
        assert runner(x for x in range(1000)) == sum(x * x for x in range(1000))
        assert runner(iter(range(10))) == 285
    with pytest.raises(TypeError), SumSquares(1) as runner:
        runner(42)


MADE = [0]  # items the slow generator has yielded so far (read by the consumer)


def test_a_slow_generator_is_not_held_back_by_chunking(no_leaks):
    # Items are cheap to process but slow to produce: results must keep
    # flowing instead of waiting for a large chunk to fill.
    def slow_items():
        for i in range(60):
            time.sleep(0.01)  # a slow input, not synchronisation
            MADE[0] += 1
            yield i

    MADE[0] = 0
    with FirstSeen(2) as runner:
        made_at_first, n = runner(slow_items())
    assert n == 60
    # The first result was consumed long before the input was done.
    assert made_at_first < 30


class FirstSeen(UnorderedRunner):
    @staticmethod
    def consumer_init(cfg):
        cfg.seen = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.seen.append(MADE[0])

    @staticmethod
    def consumer_end(cfg):
        return cfg.seen[0], len(cfg.seen)


def test_context_manager_and_idempotent_close(no_leaks):
    with SumSquares(2) as runner:
        assert runner.is_activate
        assert runner(range(10)) == 285
    assert not runner.is_activate
    runner.close()
    runner.close()
    assert runner.worker_pids == []
    assert "closed" in repr(runner)


def test_closed_runner_refuses_calls_until_activated(no_leaks):
    runner = SumSquares(2)
    runner.close()
    with pytest.raises(RunnerClosedError, match="activate"):
        runner(range(3))
    runner.activate()
    runner.activate()  # no-op when alive
    assert runner.is_activate
    assert runner(range(3)) == 5
    runner.close()


def test_one_call_at_a_time(no_leaks):
    started = threading.Event()
    release = threading.Event()

    def slow_items():
        started.set()
        release.wait(30)
        yield 1

    with SumSquares(1) as runner:
        t = threading.Thread(target=runner, args=(slow_items(),))
        t.start()
        assert started.wait(30)
        with pytest.raises(RuntimeError, match="already running"):
            runner(range(3))
        release.set()
        t.join(30)
        assert not t.is_alive()
        assert runner(range(3)) == 5


def test_progress_bar_counts_items_and_shows_the_rate(no_leaks):
    out = io.StringIO()
    with SumSquares(2, progress={"file": out, "mininterval": 0}) as runner:
        assert runner(list(range(500))) == sum(x * x for x in range(500))
    text = out.getvalue()
    assert "500/500" in text  # total from len()
    assert "item/s" in text
    assert "SumSquares" in text


def test_progress_without_len_and_per_call_override(no_leaks):
    out = io.StringIO()
    with SumSquares(2) as runner:
        runner(range(10))  # no bar by default
        runner((x for x in range(300)), progress={"file": out, "mininterval": 0})
    text = out.getvalue()
    assert "300item" in text.replace(" ", "")
    assert "item/s" in text
