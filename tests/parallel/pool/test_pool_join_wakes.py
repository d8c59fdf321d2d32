"""``close()`` then ``join()`` wakes the pool's coordinator instead of waiting for its tick.

The coordinator thread waits for the back-end's events at most ``tick``
seconds at a time; ``join`` used to wait for the end of that wait (250 ms on
every short script that closes its pool the stdlib's way). With a tick of a
minute, a ``join`` that does not wake it would outlast the test's wait.
"""

from __future__ import annotations

import threading

import pytest

from easycore.common.parallel import Pool, ProcessBackend

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
