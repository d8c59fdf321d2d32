"""A Ctrl-C while items are handed to a worker loses no credit and leaves no
phantom error, whatever the object (issue 20 item 17's siblings; JobQueue's
own test is in tests/background/test_engine_items.py)."""

from __future__ import annotations

import os

import pytest
from _engine_funcs import InterruptWhenPickled, square
from _parallel_helpers import Identity

from easycore.common.parallel import Pool

pytestmark = pytest.mark.timeout(120)

WAIT = 30


def test_pool_submit_interrupted_while_sending_keeps_every_credit(no_leaks):
    with Pool(1) as pool:
        for _ in range(5):  # more than the worker's credits
            with pytest.raises(KeyboardInterrupt):
                pool.apply_async(square, (InterruptWhenPickled(),))
            with pytest.raises(KeyboardInterrupt):
                pool.map_async(square, [1, InterruptWhenPickled()], chunksize=2)
        assert pool.apply_async(square, (3,)).get(timeout=WAIT) == 9
        assert pool.map(square, range(5)) == [0, 1, 4, 9, 16]


def test_runner_call_interrupted_while_sending_closes_it_cleanly(no_leaks):
    # A runner's documented answer to any error of a call, Ctrl-C included:
    # its workers are gone (nothing leaks) and activate() starts it again.
    runner = Identity(["cpu"])
    try:
        for _ in range(3):
            with pytest.raises(KeyboardInterrupt):
                runner([1, InterruptWhenPickled(), 3])
            assert not runner.is_activate
            runner.activate()
            assert runner([1, 2, 3]) == [1, 2, 3]
    finally:
        runner.close()


class _InterruptsTheCaller:
    """A result whose unpickling raises KeyboardInterrupt in the process ``pid``."""

    def __init__(self, pid):
        self.pid = pid

    def __reduce__(self):
        return (_rebuild_interrupting, (self.pid,))


def _rebuild_interrupting(pid):
    if os.getpid() == pid:
        raise KeyboardInterrupt
    return _InterruptsTheCaller(pid)


def _interrupting_result(pid):
    return _InterruptsTheCaller(pid)


def test_a_keyboard_interrupt_from_a_results_unpickling_fails_that_call_not_the_pool(no_leaks):
    # Off the main thread (a pool's coordinator) it can only come from the
    # result: the call fails naming it, and the pool serves on (no hang).
    from easycore.common.parallel import ParallelError

    with Pool(1, start_method="fork") as pool:
        with pytest.raises(ParallelError, match=r"could not be decoded.*KeyboardInterrupt"):
            pool.apply(_interrupting_result, (os.getpid(),))
        assert pool.apply(abs, (-1,)) == 1
