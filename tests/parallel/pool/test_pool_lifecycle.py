"""``close``, ``join``, ``terminate`` and the context manager, as the stdlib documents them,
and nothing left behind however a pool ends."""

from __future__ import annotations

import gc
import threading

import pytest
from _pool_funcs import announce_then_block, nap, square, wait_for_file
from processes import wait_gone

from easycore.common.parallel import Pool, RunnerClosedError

pytestmark = pytest.mark.timeout(120)

WAIT = 30


def test_close_then_join_finishes_the_submitted_tasks(no_leaks):
    pool = Pool(2)
    pending = [pool.apply_async(nap, (0.2, i)) for i in range(4)]
    mapped = pool.map_async(square, range(10))
    pool.close()
    pool.join()
    assert [r.get(timeout=0) for r in pending] == [0, 1, 2, 3]
    assert mapped.get(timeout=0) == [x * x for x in range(10)]


def test_join_while_running_is_a_valueerror(no_leaks):
    with Pool(1) as pool, pytest.raises(ValueError):
        pool.join()


@pytest.mark.parametrize("end", ["close", "terminate"])
def test_a_closed_or_terminated_pool_refuses_every_call_with_valueerror(end, no_leaks):
    pool = Pool(1)
    getattr(pool, end)()
    calls = [
        lambda: pool.map(square, [1]),
        lambda: pool.map_async(square, [1]),
        lambda: pool.starmap(divmod, [(1, 1)]),
        lambda: pool.starmap_async(divmod, [(1, 1)]),
        lambda: pool.imap(square, [1]),
        lambda: pool.imap_unordered(square, [1]),
        lambda: pool.apply(square, (1,)),
        lambda: pool.apply_async(square, (1,)),
        lambda: pool.submit(square, 1),
        lambda: pool.broadcast(square, 1),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="not running"):
            call()
    with pytest.raises(ValueError), pool:
        pass
    pool.join()


def test_close_terminate_and_join_may_be_repeated(no_leaks):
    pool = Pool(1)
    pool.close()
    pool.close()
    pool.join()
    pool.join()
    pool.terminate()
    pool.terminate()


def test_the_context_manager_returns_the_pool_and_terminates_it(no_leaks):
    with Pool(2) as pool:
        pids = pool.worker_pids
        # A task still running when the block ends is stopped, not waited for.
        running = pool.apply_async(nap, (60,))
    assert wait_gone(pids, timeout=WAIT) == []
    with pytest.raises(ValueError):
        pool.map(square, [1])
    # Unlike the stdlib (where it would wait forever), the interrupted task fails.
    assert running.wait(WAIT) is None and running.ready() and not running.successful()
    with pytest.raises(RunnerClosedError):
        running.get(timeout=0)


def test_terminate_fails_the_unfinished_calls_of_other_threads_at_once(tmp_path, no_leaks):
    pool = Pool(2)
    results = {}

    def mapping():
        try:
            results["value"] = pool.starmap(announce_then_block, [(0, str(tmp_path))] * 2)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assert
            results["error"] = exc

    thread = threading.Thread(target=mapping)
    thread.start()
    try:
        wait_for_file(tmp_path / "0")
    finally:
        pool.terminate()
        thread.join(WAIT)
    assert not thread.is_alive()
    assert "value" not in results and isinstance(results["error"], Exception)
    pool.join()


def test_a_pool_dropped_without_close_leaves_nothing_behind(no_leaks):
    pool = Pool(2)
    pids = pool.worker_pids
    assert pool.map(square, range(4)) == [0, 1, 4, 9]
    del pool
    gc.collect()
    assert wait_gone(pids, timeout=WAIT) == []


def test_repr_says_its_state(no_leaks):
    pool = Pool(1)
    assert "RUN" in repr(pool)
    pool.close()
    assert "CLOSE" in repr(pool)
    pool.join()
    assert "TERMINATED" in repr(pool)
