"""Bounded memory: the input is read lazily, never further ahead than the queues hold."""

from __future__ import annotations

import math

import psutil
import pytest

from easycore.common.parallel import OrderedRunner, UnorderedRunner
from easycore.common.parallel.engine.chunking import AdaptiveChunker
from easycore.common.parallel.engine.core import Engine

pytestmark = pytest.mark.timeout(170)

MAX_CHUNK = AdaptiveChunker().max_items
PULLED = [0]  # items the generator has handed out (it runs in the feeder thread)


def counted(n):
    for i in range(n):
        PULLED[0] += 1
        yield i


class _Gap:
    """The consumer records how far the input was read ahead of it."""

    @staticmethod
    def producer_work(device, cfg, data):
        return data

    @staticmethod
    def consumer_init(cfg):
        cfg.check_order = bool(cfg.get("ordered", False))
        cfg.state = [0, 0, 0, True]  # consumed, max gap, peak RSS, order ok

    @staticmethod
    def consumer_work(cfg, data):
        # Lean on purpose: it runs ten million times.
        st = cfg.state
        n = st[0] = st[0] + 1
        gap = PULLED[0] - n
        if gap > st[1]:
            st[1] = gap
        if cfg.check_order and data != n - 1:
            st[3] = False
        if not n & 0x3FFFF:  # every 262144 items
            st[2] = max(st[2], psutil.Process().memory_info().rss)

    @staticmethod
    def consumer_end(cfg):
        consumed, max_gap, peak_rss, order_ok = cfg.state
        return {"consumed": consumed, "max_gap": max_gap, "peak_rss": peak_rss,
                "order_ok": order_ok}


class Gap(_Gap, UnorderedRunner):
    pass


class OrderedGap(_Gap, OrderedRunner):
    pass


def bound(queue_scale: float, workers: int, ordered: bool = False) -> int:
    # credits are taken before items are pulled; +1: the feeder may pull the
    # next chunk while the consumer is still inside the previous one
    in_flight = (math.ceil(queue_scale) * workers + 1) * MAX_CHUNK
    if not ordered:
        return in_flight
    # An ordered call also runs ahead of a late chunk, by what its reorder
    # buffer may hold (counted at no less than 64 bytes an item).
    return in_flight + Engine.reorder_bytes_default // 64


def test_ten_million_items_from_a_generator_run_in_bounded_memory(no_leaks):
    n = 10_000_000
    PULLED[0] = 0
    with Gap(2) as runner:
        state = runner(counted(n))
    assert state["consumed"] == n == PULLED[0]
    assert state["max_gap"] <= bound(3.0, 2), state  # never a list of ten million ints


@pytest.mark.parametrize("queue_scale", [1.0, 2.5])
def test_ordered_read_ahead_follows_queue_scale(no_leaks, queue_scale):
    n = 1_000_000
    PULLED[0] = 0
    with OrderedGap(2, cfg={"ordered": True}, queue_scale=queue_scale) as runner:
        state = runner(counted(n))
    assert state["consumed"] == n and state["order_ok"]
    assert state["max_gap"] <= bound(queue_scale, 2, ordered=True), state


def test_chunker_grows_for_cheap_items_and_stays_small_for_costly_ones():
    cheap = AdaptiveChunker()
    for _ in range(10):
        cheap.observe(cheap.size, cheap.size * 1e-7, cheap.size * 30)
    assert cheap.size == cheap.max_items

    slow = AdaptiveChunker()
    for _ in range(10):
        slow.observe(slow.size, slow.size * 0.05, slow.size * 30)
    assert slow.size == 1

    big = AdaptiveChunker()  # fast but 8 MB per item: bytes cap the chunk
    for _ in range(10):
        big.observe(big.size, big.size * 1e-5, big.size * (8 << 20))
    assert big.size == 1

    medium = AdaptiveChunker()  # 1 ms per item: a few items per chunk
    for _ in range(10):
        medium.observe(medium.size, medium.size * 1e-3, medium.size * 100)
    assert 2 <= medium.size <= 8


def test_chunker_growth_is_gradual():
    c = AdaptiveChunker()
    c.observe(1, 1e-7, 10)
    assert c.size == int(c.growth)  # one observation cannot jump to the maximum
