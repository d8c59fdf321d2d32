"""``close()`` then ``join()`` wakes the pool's coordinator instead of waiting for its tick.

The coordinator thread waits for the back-end's events at most ``tick``
seconds at a time; ``join`` used to wait for the end of that wait (250 ms on
every short script that closes its pool the stdlib's way). With a tick of a
minute, a ``join`` that does not wake it would outlast the test's wait.

A back-end of someone else's may have no tick at all: its ``poll`` waits until
something comes or ``wakeup`` is called, and its ``abort`` need not end that
wait. ``terminate`` used to set the coordinator's stop flag without waking it,
give up joining it after five seconds and leave it blocked for ever.
"""

from __future__ import annotations

import queue
import threading

import pytest

from easycore.common.parallel import Backend, Pool, ProcessBackend, WorkerContext
from easycore.common.parallel.extending import DirectTransport, WorkerHandler

pytestmark = pytest.mark.timeout(120)


def test_join_after_close_wakes_the_coordinator(monkeypatch):
    monkeypatch.setattr(ProcessBackend, "tick", 60.0)
    pool = Pool(2)
    try:
        assert pool.map(abs, range(-5, 5)) == [abs(x) for x in range(-5, 5)]
        pool.close()
        joiner = threading.Thread(target=pool.join, daemon=True)
        joiner.start()
        joiner.join(30.0)
        assert not joiner.is_alive(), "join waited for the coordinator's tick"
    finally:
        pool.terminate()


class WaitingBackend(Backend):
    """Runs each chunk in the sending thread; ``poll`` waits with no tick of its own."""

    def __init__(self, spec):
        self.devices = list(spec.devices)
        self.transport = DirectTransport()
        self._executors = [WorkerHandler(spec.program, WorkerContext(i, d, spec.cfg, None))
                           for i, d in enumerate(self.devices)]
        self._out = queue.SimpleQueue()

    @classmethod
    def from_spec(cls, spec, **options):
        return cls(spec)

    def start(self):
        for executor in self._executors:
            executor.init()

    def send(self, worker, message):
        self._out.put((worker, self._executors[worker].handle(message)))

    def poll(self, timeout):
        try:
            answers = [self._out.get(timeout=timeout)]
        except queue.Empty:
            return []
        while not self._out.empty():
            answers.append(self._out.get())
        return [answer for answer in answers if answer is not None]

    def wakeup(self):
        self._out.put(None)

    def stop(self, timeout=None):
        for executor in self._executors:
            executor.end()

    def abort(self):
        pass  # ends nothing a poll waits on


class WaitingPool(Pool):
    backends = {**Pool.backends, "waiting": WaitingBackend}  # noqa: RUF012 -- as the docs write it


def _new_threads(before):
    return [t for t in threading.enumerate() if t not in before and t.is_alive()]


@pytest.mark.parametrize("how", ["terminate", "close-join", "with"])
def test_a_pool_ends_its_coordinator_on_a_back_end_that_only_wakeup_ends(how):
    before = set(threading.enumerate())
    pool = WaitingPool(2, backend="waiting")
    assert pool.map(abs, range(-5, 5)) == [abs(x) for x in range(-5, 5)]
    assert any(t.name == "easycore-pool-coordinator" for t in _new_threads(before))
    if how == "terminate":
        pool.terminate()
    elif how == "close-join":
        pool.close()
        pool.join()
    else:
        with pool:
            assert pool.apply(abs, (-3,)) == 3
    left = [t for t in _new_threads(before) if t.name == "easycore-pool-coordinator"]
    for thread in left:
        thread.join(30.0)
    assert not [t for t in left if t.is_alive()], "the coordinator still waits in poll"
