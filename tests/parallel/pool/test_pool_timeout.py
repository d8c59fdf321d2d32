"""``task_timeout``: a task running too long fails alone, naming where it ran.

Pool-wide and per call; the call raises
[`TaskTimeoutError`][easycore.common.parallel.TaskTimeoutError] (also a
``TimeoutError``) soon after the limit, only the stuck worker is killed and
replaced, other jobs go on, and the pool keeps serving. Durations here are
generous upper bounds that prove "does not hang", never speed checks.
"""

from __future__ import annotations

import functools
import threading
import time

import pytest
from _pool_funcs import nap, nap_on, remember, remembered, square, worker_pid

from easycore.common.parallel import Pool, TaskTimeoutError

pytestmark = pytest.mark.timeout(120)

SLACK = 5.0  # CI machines are slow and shared: "within timeout + 1 s" plus margin
WAIT = 30


def _other_pids_unchanged(before, after, stuck):
    return [p for i, p in enumerate(after) if i != stuck] == [
        p for i, p in enumerate(before) if i != stuck
    ]


def test_a_pool_wide_timeout_fails_the_call_naming_device_worker_and_item(no_leaks):
    with Pool(2, task_timeout=1.0) as pool:
        before = pool.worker_pids
        start = time.monotonic()
        with pytest.raises(TaskTimeoutError) as info:
            pool.map(functools.partial(nap_on, slow=2, seconds=60), range(6), 1)
        assert time.monotonic() - start < 1.0 + SLACK
        err = info.value
        assert isinstance(err, TimeoutError)
        assert err.item == 2 and err.device == "cpu" and err.timeout == 1.0
        assert err.worker_index in (0, 1) and err.pid == before[err.worker_index]
        text = str(err)
        assert "item 2" in text and "'cpu'" in text and f"worker {err.worker_index}" in text
        # The pool keeps serving, with a new worker in place of the stuck one only.
        assert pool.map(square, range(10)) == [x * x for x in range(10)]
        after = pool.worker_pids
        assert after[err.worker_index] != before[err.worker_index]
        assert _other_pids_unchanged(before, after, err.worker_index)
        assert set(pool.broadcast(worker_pid)) == set(after)


def test_a_per_call_timeout_applies_to_that_call_only(no_leaks):
    with Pool(2) as pool:
        with pytest.raises(TaskTimeoutError) as info:
            pool.apply(nap, (60,), task_timeout=0.5)
        assert info.value.item == 0 and info.value.timeout == 0.5
        # Without one, a task may take longer.
        assert pool.apply(nap, (1.0, "slow but fine")) == "slow but fine"


def test_a_per_call_timeout_overrides_the_pools(no_leaks):
    with Pool(1, task_timeout=0.5) as pool:
        assert pool.map(nap, [1.0], task_timeout=10) == [None]
        with pytest.raises(TaskTimeoutError):
            pool.map(nap, [10.0])


def test_the_timeout_counts_from_when_the_task_started_not_when_it_was_queued(no_leaks):
    # One worker, six 0.3 s tasks queued at once: the last starts ~1.5 s after
    # the call, past the limit, yet each runs far less than it.
    with Pool(1, task_timeout=1.5) as pool:
        assert pool.map(nap, [0.3] * 6, 1) == [None] * 6


def test_imap_raises_the_timed_out_item_in_its_place_and_goes_on(no_leaks):
    with Pool(2) as pool:
        it = pool.imap(functools.partial(nap_on, slow=3, seconds=60), range(8), 1,
                       task_timeout=1.0)
        got = []
        for _ in range(8):
            try:
                got.append(it.next(timeout=WAIT))
            except TaskTimeoutError as exc:
                got.append(("timeout", exc.item))
        with pytest.raises(StopIteration):
            it.next(timeout=WAIT)
    assert got == [0, 1, 2, ("timeout", 3), 4, 5, 6, 7]


def test_other_jobs_complete_while_one_times_out(no_leaks):
    with Pool(2) as pool:
        stuck = pool.apply_async(nap, (60,), task_timeout=1.0)
        busy = pool.map_async(nap, [0.05] * 20, 1)
        other = pool.apply_async(square, (7,))
        with pytest.raises(TaskTimeoutError):
            stuck.get(timeout=WAIT)
        assert busy.get(timeout=WAIT) == [None] * 20
        assert other.get(timeout=WAIT) == 49


def test_a_timeout_in_one_thread_leaves_another_threads_map_intact(no_leaks):
    with Pool(2) as pool:
        results = {}

        def mapping():
            results["map"] = pool.map(square, range(200), 1)

        thread = threading.Thread(target=mapping)
        thread.start()
        with pytest.raises(TaskTimeoutError):
            pool.apply(nap, (60,), task_timeout=0.5)
        thread.join(WAIT)
        assert not thread.is_alive()
        assert results["map"] == [x * x for x in range(200)]


def test_the_replacement_runs_the_initializer_again(no_leaks):
    with Pool(2, initializer=remember, initargs=("set",)) as pool:
        with pytest.raises(TaskTimeoutError) as info:
            pool.apply(nap, (60,), task_timeout=0.5)
        replaced = info.value.worker_index
        state = pool.broadcast(remembered)
        assert [s[0] for s in state] == ["set", "set"]
        assert state[replaced][1] == pool.worker_pids[replaced] != info.value.pid


def test_several_timeouts_in_a_row_keep_the_pool_whole(no_leaks):
    with Pool(2, task_timeout=0.5) as pool:
        for _ in range(3):
            with pytest.raises(TaskTimeoutError):
                pool.apply(nap, (60,))
        assert pool.map(square, range(4)) == [0, 1, 4, 9]
        assert len(set(pool.broadcast(worker_pid))) == 2


@pytest.mark.parametrize("bad", [0, -1.0])
def test_a_timeout_that_is_not_positive_is_a_valueerror(bad, no_leaks):
    with Pool(1) as pool, pytest.raises(ValueError, match="task_timeout"):
        pool.map(square, [1], task_timeout=bad)
