"""A user's ``multiprocessing.Pool`` code works by changing the import.

Each snippet is code a user of the stdlib writes (the first is the example of
the stdlib's documentation); it runs once with ``multiprocessing.Pool`` and
once with easycore's, and both runs must print the same.
"""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest
from _pool_funcs import TaskError, add, fail_on, square

import easycore.common.parallel

pytestmark = pytest.mark.timeout(120)

POOLS = {
    "multiprocessing": multiprocessing.Pool,
    "easycore": easycore.common.parallel.Pool,
}


def run_both(snippet):
    outputs = {name: snippet(cls) for name, cls in POOLS.items()}
    assert outputs["easycore"] == outputs["multiprocessing"]
    return outputs["easycore"]


def docs_example(Pool):
    # https://docs.python.org/3/library/multiprocessing.html#using-a-pool-of-workers
    out = []
    with Pool(processes=2) as pool:
        out.append(pool.map(square, range(10)))
        out.append(sorted(pool.imap_unordered(square, range(10))))
        res = pool.apply_async(square, (20,))
        out.append(res.get(timeout=30))
        res = pool.apply_async(os.getpid, ())
        out.append(res.get(timeout=30) != os.getpid())  # a worker's pid, not ours
        multiple_results = [pool.apply_async(os.getpid, ()) for i in range(4)]
        out.append(len({res.get(timeout=30) for res in multiple_results}) <= 2)
        res = pool.apply_async(time.sleep, (10,))
        try:
            out.append(res.get(timeout=0.2))
        except multiprocessing.TimeoutError:
            out.append("We lacked patience and got a multiprocessing.TimeoutError")
        out.append(pool.map(square, [3]))  # "the pool remains available for more work"
    # exiting the with-block terminated the pool (and the sleeping task)
    try:
        pool.map(square, [1])
    except ValueError:
        out.append("Now the pool is closed and no longer available")
    return out


def test_the_stdlib_documentation_example(no_leaks):
    out = run_both(docs_example)
    assert out[-2:] == [[9], "Now the pool is closed and no longer available"]


def callbacks_then_close_and_join(Pool):
    results, errors = [], []
    pool = Pool(2)
    for i in range(10):
        pool.apply_async(fail_on, (i,), callback=results.append,
                         error_callback=lambda e: errors.append(repr(e)))
    pool.close()
    pool.join()  # every task done and every callback called when join returns
    return sorted(results), errors


def test_callbacks_collected_then_close_and_join(no_leaks):
    results, errors = run_both(callbacks_then_close_and_join)
    assert results == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert errors == ["TaskError('bad item 3')"]


def map_async_with_wait_and_ready(Pool):
    with Pool(2) as pool:
        result = pool.map_async(square, range(100), chunksize=10)
        result.wait(timeout=30)
        return result.ready(), result.successful(), sum(result.get())


def test_map_async_polled_with_wait_and_ready(no_leaks):
    assert run_both(map_async_with_wait_and_ready) == (True, True, 328350)


def starmap_and_imap_on_generators(Pool):
    with Pool(2) as pool:
        sums = pool.starmap(add, zip(range(5), range(5, 10)))
        lines = [f"{i}: {v}" for i, v in enumerate(pool.imap(square, (x for x in range(5)), 2))]
    return sums, lines


def test_starmap_over_zip_and_imap_over_a_generator(no_leaks):
    sums, lines = run_both(starmap_and_imap_on_generators)
    assert sums == [5, 7, 9, 11, 13] and lines[-1] == "4: 16"


def exception_handling(Pool):
    out = []
    with Pool(2) as pool:
        try:
            pool.map(fail_on, range(5))
        except TaskError as exc:  # the task's own exception class, caught by name
            out.append(str(exc))
        it = pool.imap(fail_on, range(5))
        for _ in range(5):
            try:
                out.append(next(it))
            except TaskError as exc:
                out.append(f"skipped: {exc}")
    return out


def test_exceptions_are_caught_by_their_own_class(no_leaks):
    assert run_both(exception_handling) == [
        "bad item 3", 0, 1, 2, "skipped: bad item 3", 4,
    ]


def try_finally_terminate(Pool):
    pool = Pool(processes=2, initializer=os.getpid)
    try:
        return pool.apply(add, (1,), {"b": 2})
    finally:
        pool.terminate()
        pool.join()


def test_initializer_apply_with_kwds_and_terminate_in_finally(no_leaks):
    assert run_both(try_finally_terminate) == 3
