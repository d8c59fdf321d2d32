"""A producer's death is told to a get, whatever else the queue was doing at that moment.

The owner's broker learns of a death when the dead process's connection ends. A get
that waits then is told once the queue is empty; if none is told (nobody waited, or
the get that waited took an item that came with the death), the next get on the empty
queue is. These cases put the broker in each order of events at once, without the
timing a real death needs (``test_queue.py`` kills real producers).
"""

from __future__ import annotations

import pickle
import queue
import threading

import pytest

from easycore.common.parallel import QueuePeerDiedError
from easycore.common.parallel.queue.broker import Broker, _Ask, _Client

WAIT = 30


class _Peer:
    """A connection's stand-in: what the broker sends it is kept, unpickled."""

    def __init__(self, pid: int) -> None:
        self.data = _Client(pid)
        self.frames: list = []
        self.sent: list = []

    def send(self, data: bytes) -> bool:
        self.sent.append(pickle.loads(data))
        return True


def _dies(broker: Broker, peer: _Peer, *, with_item: object = None) -> None:
    """``peer``'s process puts ``with_item`` (if any) and dies, both under one hold of the
    lock: a waiting get wakes only after both."""
    with broker.cond:
        if with_item is not None:
            broker.items.append(with_item)
            broker.cond.notify_all()
        broker._died(peer.data.pid)


class _NotingCondition(threading.Condition):
    """The broker's condition, saying when a get first waits on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    def wait(self, timeout=None):  # type: ignore[no-untyped-def]
        self.waiting.set()  # the lock is still held: it is released inside the wait
        return super().wait(timeout)


def _broker() -> Broker:
    broker = Broker(0, "/ecq-test-")
    broker.cond = _NotingCondition()
    return broker


def _waiting_get(broker: Broker) -> tuple:
    """A local get waiting on the empty queue in a thread: (thread, its result list)."""
    got: list = []
    thread = threading.Thread(target=lambda: got.append(_outcome(broker, WAIT)))
    thread.start()
    assert broker.cond.waiting.wait(WAIT)
    return thread, got


def _outcome(broker: Broker, timeout: float) -> object:
    try:
        return broker.get(True, timeout)
    except (QueuePeerDiedError, queue.Empty) as exc:
        return type(exc)


def test_a_get_waiting_on_the_empty_queue_is_told():
    broker = _broker()
    thread, got = _waiting_get(broker)
    _dies(broker, _Peer(4242))
    thread.join(WAIT)
    assert got == [QueuePeerDiedError]
    # Told once: the next get on the empty queue just finds it empty.
    assert _outcome(broker, 0) is queue.Empty


def test_a_death_that_came_with_the_item_a_waiting_get_took_is_told_to_the_next_get():
    # The waiting get wakes to the dead producer's last item and returns it; the death
    # was told to nobody, so the next get on the empty queue hears of it (it waited
    # 60 s and found the queue empty, once, in a full CI run).
    broker = _broker()
    thread, got = _waiting_get(broker)
    _dies(broker, _Peer(4242), with_item=("plain", 1))
    thread.join(WAIT)
    assert got == [("plain", 1)]
    with pytest.raises(QueuePeerDiedError, match="process 4242 ended"):
        broker.get(True, WAIT)
    assert _outcome(broker, 0) is queue.Empty


def test_a_death_with_nobody_waiting_is_told_to_the_next_get():
    broker = _broker()
    _dies(broker, _Peer(4242))
    assert _outcome(broker, 0) is QueuePeerDiedError
    assert _outcome(broker, 0) is queue.Empty


def test_a_death_while_another_processs_get_is_served_an_item_is_told_to_its_next_get():
    # The same order for a get from another process, parked in the broker: it is
    # served the item at the next tick, and its next get is told.
    broker = _broker()
    consumer = _Peer(1111)
    broker.gets.append(_Ask(consumer, 1, None, None))
    _dies(broker, _Peer(4242), with_item=("plain", 1))
    broker.tick(0.0)
    broker._ask(consumer, consumer.data, 2, "get", True, None, None)
    assert [m[0] for m in consumer.sent] == ["item", "died"]
    assert consumer.sent[1][3] == 4242


def test_a_parked_get_on_the_empty_queue_is_told_at_once_and_only_once():
    broker = _broker()
    consumer = _Peer(1111)
    broker.gets.append(_Ask(consumer, 1, None, None))
    _dies(broker, _Peer(4242))
    assert [m[:2] for m in consumer.sent] == [("died", 1)]
    broker._ask(consumer, consumer.data, 2, "get", False, None, None)
    assert consumer.sent[-1] == ("empty", 2)
