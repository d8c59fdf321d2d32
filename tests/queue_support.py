"""Helpers of the Queue tests (parallel and torch): a producer process, watched."""

from __future__ import annotations

import time


class Producer:
    """A process running ``target(q, n, conn)``: it puts ``n`` items, sending
    ``conn`` the count after each, then waits to be told to close."""

    def __init__(self, ctx, target, q, n):
        self.q, self.n = q, n
        self.here, there = ctx.Pipe()
        self.proc = ctx.Process(target=target, args=(q, n, there))
        self.proc.start()
        there.close()
        self.done = 0

    def wait_blocked_or_done(self, timeout: float = 120.0) -> int:
        """Until its next put waits for room (a reservation parked at the owner),
        or it put all; the puts it finished."""
        deadline = time.monotonic() + timeout
        while not (getattr(self.q._broker, "rooms", ()) or self.done == self.n):
            assert time.monotonic() < deadline, "timed out"
            while self.here.poll(0.02):  # another process's progress: polled
                self.done = self.here.recv()
        return self.done

    def finish(self) -> None:
        """Tell it to close its end; it must exit cleanly."""
        try:
            self.here.send("close")
            self.proc.join(60)
            assert self.proc.exitcode == 0
        finally:
            self.proc.kill()
            self.proc.join(10)
            self.here.close()


def check_room_before_memory(ctx, q, target, n, segments, first) -> None:
    """A producer of ``n`` items in another process, nobody taking: while its
    next put waits for room it holds no shared memory beyond ``q``'s maxsize.

    Args:
        segments: lists ``q``'s segments in ``/dev/shm``.
        first: an item's first element as an int (items carry their number).
    """
    producer = Producer(ctx, target, q, n)
    try:
        assert producer.wait_blocked_or_done() == q._maxsize
        assert len(segments()) <= q._maxsize, "a waiting producer made shared memory"
        assert q.qsize() == q._maxsize
        assert [first(q.get(timeout=60)) for _ in range(n)] == list(range(n))
    finally:
        producer.finish()
