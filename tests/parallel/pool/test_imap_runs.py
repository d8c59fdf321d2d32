"""``imap`` hands results over in runs (a chunk's results at a time) and failed items
in their place: whatever the chunk size and wherever the failures, the caller reads
every result and every item's error in input order, one at a time, through ``for``,
``next(it)``, ``it.next(timeout)`` and ``async for`` alike, and the iteration goes on
after a failed item (as the stdlib's)."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest
from _pool_funcs import TaskError, boxed

from easycore.common.parallel import Pool

pytestmark = pytest.mark.timeout(180)

WAIT = 60


def fail_on_any(x: int, bad: frozenset) -> int:
    if x in bad:
        raise TaskError(f"item {x}")
    return x * 10


def read_all(it, how: str) -> list:
    """Each result, or ("error", message) for a failed item, until the end."""
    out: list = []
    while True:
        try:
            out.append(it.next(WAIT) if how == "next(timeout)" else next(it))
        except StopIteration:
            return out
        except TaskError as err:
            out.append(("error", str(err)))


def expected(n: int, bad: frozenset) -> list:
    return [("error", f"item {x}") if x in bad else x * 10 for x in range(n)]


@pytest.fixture(scope="module")
def pool():
    with Pool(2) as p:
        yield p


@pytest.mark.parametrize("chunksize", [1, 4, 7])
@pytest.mark.parametrize("bad", [
    frozenset(),
    frozenset({0}),  # the first item of a chunk
    frozenset({3, 4}),  # the last of one chunk, the first of the next (chunks of 4)
    frozenset({5, 6}),  # two in a row inside a chunk
    frozenset({0, 1, 2, 3}),  # a whole chunk
    frozenset({29}),  # the very last item
], ids=["none", "first", "across", "adjacent", "whole-chunk", "last"])
@pytest.mark.parametrize("how", ["next", "next(timeout)"])
def test_every_result_and_error_in_input_order(pool, chunksize, bad, how):
    it = pool.imap(_Bound(bad), range(30), chunksize)
    assert read_all(it, how) == expected(30, bad)


class _Bound:
    """``fail_on_any`` with its failing items bound (picklable)."""

    def __init__(self, bad: frozenset) -> None:
        self.bad = bad

    def __call__(self, x: int) -> int:
        return fail_on_any(x, self.bad)


def test_for_and_next_share_one_position(pool):
    it = pool.imap(abs, range(0, -40, -1), 8)
    head = [next(it) for _ in range(3)]  # inside the first run
    middle = []
    for value in it:
        middle.append(value)
        if value == 20:
            break
    tail = [it.next(WAIT) for _ in range(5)] + list(it)
    assert head + middle + tail == list(range(40))


def test_unordered_runs_bring_every_result_and_error_once(pool):
    bad = frozenset({2, 9, 10, 17})
    got = read_all(pool.imap_unordered(_Bound(bad), range(20), 5), "next")
    assert sorted(got, key=repr) == sorted(expected(20, bad), key=repr)


def test_async_for_reads_a_run_one_result_at_a_time(pool):
    bad = frozenset({4})

    async def read() -> list:
        out = []
        it = pool.imap(_Bound(bad), range(12), 6)
        while True:
            try:
                out.append(await it.__anext__())
            except StopAsyncIteration:
                return out
            except TaskError as err:
                out.append(("error", str(err)))

    assert asyncio.run(read()) == expected(12, bad)


def test_a_lazy_input_is_read_ahead_as_runs_are_read(pool):
    # A generator input (read ahead within a window): every result still comes,
    # in order, whether the caller reads slowly or all at once.
    it = pool.imap(abs, (-x for x in range(2000)), 16)
    assert [next(it) for _ in range(10)] == list(range(10))
    assert list(it) == list(range(10, 2000))


def test_a_result_handed_over_is_no_longer_held(pool):
    # CPython's issue #14406, for a run of several results: the iterator keeps
    # no reference to what it already returned.
    for obj in pool.imap(boxed, range(12), 6):
        ref = weakref.ref(obj)
        del obj
        gc.collect()
        assert ref() is None
