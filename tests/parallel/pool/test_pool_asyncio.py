"""asyncio without blocking the loop (issue 36 item 2): ``await`` a pool's results,
``async for`` over ``imap`` / ``imap_unordered``.

A heartbeat task counts the loop's turns; the assertions count, they never time:
the heartbeat must tick between every two results. Iterating the same results
with the blocking ``next()`` inside the coroutine gives it no tick at all (the
check can fail).
"""

from __future__ import annotations

import asyncio
import itertools

import pytest
from _parallel_support import METHODS

from easycore.common.parallel import Pool

pytestmark = pytest.mark.timeout(180)

N = 1000


def square(x):
    return x * x


def fail_on_three(x):
    if x == 3:
        raise ValueError("three")
    return x


class Heartbeat:
    """A task that counts the loop's turns until stopped."""

    def __init__(self) -> None:
        self.ticks = 0
        self._stop = False

    async def run(self) -> None:
        while not self._stop:
            self.ticks += 1
            await asyncio.sleep(0)

    def stop(self) -> None:
        self._stop = True


async def _with_heartbeat(consume):
    heartbeat = Heartbeat()
    task = asyncio.create_task(heartbeat.run())
    try:
        return await consume(heartbeat)
    finally:
        heartbeat.stop()
        await asyncio.wait_for(task, 30)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("unordered", [False, True])
def test_async_for_over_imap_lets_the_loop_run_between_results(method, unordered, no_leaks):
    async def consume(heartbeat):
        seen, results = [], []
        with Pool(2, start_method=method) as pool:
            imap = pool.imap_unordered if unordered else pool.imap
            async for result in imap(square, range(N)):
                results.append(result)
                seen.append(heartbeat.ticks)
        return seen, results

    seen, results = asyncio.run(_with_heartbeat(consume))
    expected = [x * x for x in range(N)]
    assert (sorted(results) if unordered else results) == expected
    assert all(b > a for a, b in itertools.pairwise(seen))  # a tick between every two results


def test_async_for_over_a_lazy_input_and_a_failing_task(no_leaks):
    def numbers():
        yield from range(N)

    async def consume(heartbeat):
        with Pool(2) as pool:
            results = [r async for r in pool.imap(square, numbers(), chunksize=7)]
            got = []
            with pytest.raises(ValueError, match="three"):
                async for r in pool.imap(fail_on_three, range(10)):
                    got.append(r)
        return results, got, heartbeat.ticks

    results, got, ticks = asyncio.run(_with_heartbeat(consume))
    assert results == [x * x for x in range(N)] and got == [0, 1, 2]
    assert ticks >= N  # at least a turn of the loop per result


def test_await_apply_async_and_map_async(no_leaks):
    async def consume(heartbeat):
        with Pool(2) as pool:
            before = heartbeat.ticks
            one = await pool.apply_async(square, (12,))
            many = await pool.map_async(square, range(N))
            star = await pool.starmap_async(pow, [(2, 3), (3, 2)])
            ticked = heartbeat.ticks - before
            with pytest.raises(ValueError, match="three"):
                await pool.apply_async(fail_on_three, (3,))
            ready = pool.apply_async(square, (5,))
            ready.wait(30)
            done = await ready  # already there: still one turn of the loop
        return one, many, star, ticked, done

    one, many, star, ticked, done = asyncio.run(_with_heartbeat(consume))
    assert (one, many, star, done) == (144, [x * x for x in range(N)], [8, 9], 25)
    assert ticked >= 3  # the loop ran while each awaited


def test_blocking_next_inside_a_coroutine_gives_the_heartbeat_no_tick(no_leaks):
    # The control: the same results read with the blocking API hold the loop.
    async def consume(heartbeat):
        with Pool(2) as pool:
            before = heartbeat.ticks
            results = list(pool.imap(square, range(N)))
            return results, heartbeat.ticks - before

    results, ticks = asyncio.run(_with_heartbeat(consume))
    assert results == [x * x for x in range(N)] and ticks == 0
