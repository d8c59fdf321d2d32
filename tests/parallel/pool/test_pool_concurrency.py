"""Several jobs at once from several threads, each with its own results and order."""

from __future__ import annotations

import concurrent.futures
import functools
import threading

import pytest
from _pool_funcs import TaskError, add, fail_on, identity, nap, square
from _pool_support import leak_checked

from easycore.common.parallel import Pool

pytestmark = pytest.mark.timeout(120)

WAIT = 30


@pytest.fixture(scope="module")
def pool():
    with leak_checked():
        p = Pool(2)
        try:
            yield p
        finally:
            p.close()
            p.join()


def _in_threads(*calls):
    """Run each call in its own thread, all released at once; their results."""
    barrier = threading.Barrier(len(calls))
    results = [None] * len(calls)

    def run(k, call):
        barrier.wait(WAIT)
        try:
            results[k] = ("ok", call())
        except BaseException as exc:  # noqa: BLE001 - handed to the asserting thread
            results[k] = ("error", exc)

    threads = [threading.Thread(target=run, args=(k, c)) for k, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 2)
    assert not any(t.is_alive() for t in threads)
    return results


def test_submit_while_a_map_runs(pool):
    running = pool.map_async(nap, [0.02] * 100, 1)
    futures = [pool.submit(add, k, b=k) for k in range(20)]
    assert [f.result(WAIT) for f in futures] == [2 * k for k in range(20)]
    assert running.get(timeout=WAIT) == [None] * 100


def test_two_maps_from_two_threads_each_in_its_own_order(pool):
    n = 3000
    results = _in_threads(
        lambda: pool.map(square, range(n)),
        lambda: pool.map(identity, range(n, 0, -1), 7),
    )
    assert results == [("ok", [x * x for x in range(n)]), ("ok", list(range(n, 0, -1)))]


def test_two_imaps_consumed_in_turns_from_one_thread(pool):
    a = pool.imap(square, range(500))
    b = pool.imap(identity, range(500, 1000), 3)
    got_a, got_b = [], []
    for x, y in zip(a, b):
        got_a.append(x)
        got_b.append(y)
    assert got_a == [x * x for x in range(500)] and got_b == list(range(500, 1000))


def test_many_threads_submitting_at_once(pool):
    def client(k):
        futures = [pool.submit(square, 100 * k + i) for i in range(25)]
        return [f.result(WAIT) for f in futures]

    with concurrent.futures.ThreadPoolExecutor(4) as clients:
        outs = list(clients.map(client, range(4)))
    assert outs == [[(100 * k + i) ** 2 for i in range(25)] for k in range(4)]


def test_a_failing_job_does_not_disturb_a_concurrent_one(pool):
    results = _in_threads(
        lambda: pool.map(functools.partial(fail_on, bad=50), range(100), 1),
        lambda: pool.map(square, range(1000)),
        lambda: sorted(pool.imap_unordered(identity, range(200))),
    )
    assert results[0][0] == "error" and isinstance(results[0][1], TaskError)
    assert results[1] == ("ok", [x * x for x in range(1000)])
    assert results[2] == ("ok", list(range(200)))


def test_submit_returns_a_future_that_carries_the_tasks_exception(pool):
    future = pool.submit(fail_on, 3)
    assert isinstance(future, concurrent.futures.Future)
    with pytest.raises(TaskError, match="bad item 3"):
        future.result(WAIT)
    assert pool.submit(fail_on, 4).result(WAIT) == 4


def test_an_imap_left_unread_does_not_block_other_jobs(pool):
    # A consumer that stops reading holds only its own job's credits.
    it = pool.imap(identity, iter(range(10**6)))
    assert next(it) == 0
    assert pool.map(square, range(100)) == [x * x for x in range(100)]
    it.close()
    assert pool.apply(square, (4,)) == 16
