"""``Pool`` does what the stdlib documents for ``multiprocessing.Pool``.

Written from https://docs.python.org/3/library/multiprocessing.html#module-multiprocessing.pool:
the calls, their arguments and results, ``AsyncResult`` and the iterators of
``imap``. One pool serves the whole module (these checks leave it as they
found it); its end is checked for leaks like every other pool.
"""

from __future__ import annotations

import multiprocessing
import operator
import threading

import pytest
from _pool_funcs import (
    TaskError,
    add,
    describe,
    fail_on,
    identity,
    nap,
    raise_value_error,
    square,
)
from _pool_support import leak_checked

from easycore.common.parallel import AsyncResult, IMapIterator, Pool, RemoteTraceback

pytestmark = pytest.mark.timeout(120)

WAIT = 30  # seconds any single result may take here: "does not hang", not a speed check


@pytest.fixture(scope="module")
def pool():
    with leak_checked():
        p = Pool(2)
        try:
            yield p
        finally:
            p.close()
            p.join()


# --- map / starmap ---------------------------------------------------------
def test_map_returns_results_in_input_order(pool):
    assert pool.map(square, range(100)) == [x * x for x in range(100)]


@pytest.mark.parametrize("chunksize", [1, 7, 1000])
def test_map_with_any_chunksize_gives_the_same_list(pool, chunksize):
    assert pool.map(square, range(50), chunksize) == [x * x for x in range(50)]
    assert pool.map(square, range(50), chunksize=chunksize) == [x * x for x in range(50)]


def test_map_reads_any_iterable_and_an_empty_one_gives_an_empty_list(pool):
    assert pool.map(square, (x for x in range(5))) == [0, 1, 4, 9, 16]
    assert pool.map(square, {3}) == [9]
    assert pool.map(square, []) == []
    assert pool.starmap(add, []) == []


def test_starmap_unpacks_each_item_as_arguments(pool):
    assert pool.starmap(add, [(1, 2), (3, 4)]) == [3, 7]
    assert pool.starmap(add, zip(range(10), range(10)), 3) == [2 * x for x in range(10)]


def test_map_raises_the_tasks_own_exception_with_the_remote_traceback_as_cause(pool):
    with pytest.raises(TaskError, match="bad item 3") as info:
        pool.map(fail_on, range(10), 1)
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert "fail_on" in str(cause) and "TaskError" in str(cause)
    # The pool is unharmed by a task's exception.
    assert pool.map(square, range(5)) == [0, 1, 4, 9, 16]


def test_a_failure_is_never_lost_however_soon_it_comes_back(pool):
    # A chunk may come back before the call that sent it has returned.
    for _ in range(100):
        with pytest.raises(TaskError):
            pool.map(fail_on, [3], 1)
        with pytest.raises(TaskError):
            pool.starmap_async(fail_on, [(3,)]).get(WAIT)


def test_builtin_exception_types_come_back_unchanged(pool):
    with pytest.raises(ValueError, match="no good"):
        pool.apply(raise_value_error, ("no good",))
    with pytest.raises(ZeroDivisionError):
        pool.starmap(operator.truediv, [(1, 1), (1, 0)])
    with pytest.raises(TypeError):
        pool.map(divmod, [1, 2])  # divmod needs two arguments


# --- apply / apply_async ----------------------------------------------------
def test_apply_passes_args_and_kwds(pool):
    assert pool.apply(describe, (1,)) == (1, 0, 0)
    assert pool.apply(describe, (1, 2), {"c": 3}) == (1, 2, 3)
    assert pool.apply(describe, kwds={"a": 5}) == (5, 0, 0)


def test_apply_async_returns_an_asyncresult_whose_get_gives_the_value(pool):
    result = pool.apply_async(add, (2, 3))
    assert isinstance(result, AsyncResult)
    assert result.get(timeout=WAIT) == 5
    assert result.ready() and result.successful()
    assert result.get() == 5  # get may be called again


def test_apply_async_callback_gets_the_result(pool):
    got = []
    done = threading.Event()

    def callback(value):
        got.append(value)
        done.set()

    result = pool.apply_async(square, (9,), callback=callback)
    assert result.get(timeout=WAIT) == 81
    assert done.wait(WAIT)
    assert got == [81]


def test_apply_async_error_callback_gets_the_exception_and_get_reraises_it(pool):
    errors = []
    done = threading.Event()

    def error_callback(exc):
        errors.append(exc)
        done.set()

    result = pool.apply_async(fail_on, (3,), callback=lambda v: errors.append("callback!"),
                              error_callback=error_callback)
    with pytest.raises(TaskError, match="bad item 3"):
        result.get(timeout=WAIT)
    assert done.wait(WAIT)
    assert len(errors) == 1 and isinstance(errors[0], TaskError)
    assert result.ready() and not result.successful()


def test_get_with_a_timeout_raises_multiprocessing_timeouterror_and_the_task_goes_on(pool):
    result = pool.apply_async(nap, (1.0, "late"))
    with pytest.raises(multiprocessing.TimeoutError):
        result.get(timeout=0.05)
    assert not result.ready()
    assert result.get(timeout=WAIT) == "late"  # a get's timeout does not cancel the task


def test_timeouterror_is_also_the_builtin_timeouterror(pool):
    result = pool.apply_async(nap, (1.0,))
    with pytest.raises(TimeoutError):
        result.get(timeout=0.01)
    result.wait(WAIT)


def test_successful_raises_valueerror_until_the_result_is_ready(pool):
    release = pool.apply_async(nap, (0.5, "x"))
    with pytest.raises(ValueError):
        release.successful()
    release.wait(WAIT)
    assert release.ready() and release.successful()


def test_wait_returns_none_after_its_timeout_or_when_ready(pool):
    result = pool.apply_async(nap, (1.0, 1))
    assert result.wait(0.01) is None
    assert not result.ready()
    assert result.wait(WAIT) is None
    assert result.ready()


# --- map_async / starmap_async ---------------------------------------------
def test_map_async_gives_the_list_and_calls_back_once_with_it(pool):
    got = []
    done = threading.Event()

    def callback(values):
        got.append(values)
        done.set()

    result = pool.map_async(square, range(20), 4, callback=callback)
    assert result.get(timeout=WAIT) == [x * x for x in range(20)]
    assert done.wait(WAIT)
    assert got == [[x * x for x in range(20)]]


def test_map_async_error_callback_once_and_get_reraises(pool):
    errors = []
    done = threading.Event()

    def error_callback(exc):
        errors.append(exc)
        done.set()

    result = pool.map_async(fail_on, range(10), 2, callback=lambda v: errors.append(v),
                            error_callback=error_callback)
    with pytest.raises(TaskError):
        result.get(timeout=WAIT)
    assert done.wait(WAIT)
    assert len(errors) == 1 and isinstance(errors[0], TaskError)
    assert not result.successful()


def test_starmap_async(pool):
    got = []
    done = threading.Event()
    result = pool.starmap_async(add, [(1, 1), (2, 2)], callback=lambda v: (got.append(v),
                                                                          done.set()))
    assert result.get(timeout=WAIT) == [2, 4]
    assert done.wait(WAIT) and got == [[2, 4]]


# --- imap / imap_unordered ---------------------------------------------------
def test_imap_yields_in_input_order(pool):
    it = pool.imap(square, range(30))
    assert isinstance(it, IMapIterator)
    assert iter(it) is it
    assert list(it) == [x * x for x in range(30)]


@pytest.mark.parametrize("chunksize", [1, 4])
def test_imap_unordered_yields_every_result_once(pool, chunksize):
    got = list(pool.imap_unordered(square, range(30), chunksize))
    assert sorted(got) == [x * x for x in range(30)]


def test_imap_unordered_yields_fast_results_before_a_slow_one(pool):
    # Item 0 naps; with two workers the others come back first.
    got = list(pool.imap_unordered(_nap_first, range(8), 1))
    assert sorted(got) == list(range(8))
    assert got[0] != 0


def _nap_first(x):
    return nap(0.5, x) if x == 0 else x


def test_imap_reads_a_generator_lazily_and_keeps_order(pool):
    assert list(pool.imap(identity, (x for x in range(500)), 16)) == list(range(500))


def test_imap_over_an_empty_input_stops_at_once(pool):
    assert list(pool.imap(square, [])) == []
    assert list(pool.imap_unordered(square, iter(()))) == []


def test_imap_next_with_a_timeout_raises_multiprocessing_timeouterror(pool):
    it = pool.imap(nap, [1.0])
    with pytest.raises(multiprocessing.TimeoutError):
        it.next(timeout=0.05)
    assert it.next(timeout=WAIT) is None
    with pytest.raises(StopIteration):
        it.next(timeout=WAIT)


def test_imap_raises_a_failed_item_in_its_place_and_goes_on(pool):
    # As the stdlib's iterator: the exception is raised for that item only.
    it = pool.imap(fail_on, range(6), 1)
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(TaskError, match="bad item 3") as info:
        next(it)
    assert isinstance(info.value.__cause__, RemoteTraceback)
    assert list(it) == [4, 5]


def test_imap_unordered_raises_the_failed_item_once_and_delivers_the_others(pool):
    it = pool.imap_unordered(fail_on, range(6), 1)
    got, errors = [], []
    while True:
        try:
            got.append(it.next(timeout=WAIT))
        except StopIteration:
            break
        except TaskError as exc:
            errors.append(exc)
    assert sorted(got) == [0, 1, 2, 4, 5]
    assert len(errors) == 1


# --- arguments the stdlib refuses -------------------------------------------
@pytest.mark.parametrize("chunksize", [0, -1])
def test_a_chunksize_below_one_is_a_valueerror(pool, chunksize):
    with pytest.raises(ValueError):
        pool.map(square, range(3), chunksize)


def test_a_non_callable_is_refused(pool):
    with pytest.raises(TypeError):
        pool.apply_async(42)


@pytest.mark.parametrize("kwargs", [{"processes": 0}, {"processes": -2},
                                    {"maxtasksperchild": 0}])
def test_bad_pool_arguments_are_valueerrors(kwargs, no_leaks):
    with pytest.raises(ValueError):
        Pool(**kwargs)


def test_a_non_callable_initializer_is_a_typeerror(no_leaks):
    with pytest.raises(TypeError):
        Pool(1, initializer=3)
