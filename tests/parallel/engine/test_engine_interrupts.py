"""A Ctrl-C while items are handed to a worker loses no credit and leaves no
phantom error, whatever the object (issue 20 item 17's siblings; JobQueue's
own test is in tests/background/test_engine_items.py)."""

from __future__ import annotations

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
