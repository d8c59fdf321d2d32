"""The Queue's connections (issue 34 items 1, 2 and 5; issue 35 item 4).

The Queue is on the connection layer the services use: a connection that
never answers blocks nobody, every timeout a client takes bounds its whole
call (the owner stopped with SIGSTOP included) and gives up nothing it
cannot take back, and a process holds a few connections however many
threads used the queue, while the owner serves them all from one loop.
Real processes, real sockets.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import queue
import signal
import socket
import struct
import threading

import numpy as np
import pytest
from _parallel_support import METHODS
from _queue_funcs import (
    own_then_fork_a_sleeper,
    put_and_report,
    put_from_short_lived_threads,
    serve_a_queue,
)
from processes import in_thread, stop_process
from queue_support import Producer

from easycore.common.parallel import Queue

pytestmark = pytest.mark.timeout(240)


class _Owner:
    """A queue owned by another process (started with ``method``), and its client end here."""

    def __init__(self, method, items=0, maxsize=0):
        ctx = multiprocessing.get_context(method)
        self.here, there = ctx.Pipe()
        self.proc = ctx.Process(target=serve_a_queue, args=(there, items, maxsize))
        self.proc.start()
        there.close()
        assert self.here.poll(60), "the owner did not start"
        self.q = self.here.recv()

    def stop(self):
        stop_process(self.proc.pid)

    def cont(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def close(self):
        self.cont()
        try:
            self.q.close()
            self.here.send("close")
            assert self.here.poll(60) and self.here.recv() == "closed"
            self.proc.join(60)
        finally:
            self.proc.kill()
            self.proc.join(10)
            self.here.close()


# ------------------------------------------------------------------ item 1
@pytest.mark.forks_with_threads  # the queue's server threads run while fork workers start
@pytest.mark.parametrize("method", METHODS)
def test_a_silent_connection_does_not_block_other_clients(method):
    """A socket that connects and never answers the challenge (and one that
    answers half a frame) held every other process's put until it closed."""
    ctx = multiprocessing.get_context(method)
    with Queue() as q:
        silent = [socket.socket(socket.AF_UNIX) for _ in range(3)]
        here, there = ctx.Pipe()
        child = None
        try:
            for s in silent:
                s.connect(q._address)
            silent[0].sendall(struct.pack("!i", 64) + b"xy")  # half an answer, then nothing
            child = ctx.Process(target=put_and_report, args=(q, there))
            child.start()
            # While the silent sockets stay open:
            assert here.poll(60), "a client was blocked by a silent connection"
            assert here.recv() == "put"
            assert q.get(timeout=30) == "small"
            assert (q.get(timeout=30) == 7).all()
        finally:
            for s in silent:
                s.close()
            if child is not None:
                child.join(60)
            here.close()
            there.close()


def test_a_client_stalled_mid_frame_does_not_stop_the_queue():
    """A client that stops half-way through a frame costs only its own buffer."""
    with Queue() as q:
        stalled, other = _client_end(q), _client_end(q)
        assert stalled.qsize() == 0  # connected and greeted
        link = stalled._end.conns[0].link
        os.write(link.fileno(), struct.pack("!i", 100 << 20) + b"x" * 10)  # then nothing
        done, value = in_thread(lambda: other.put(1, timeout=20), 60)
        assert done and value is None, value
        assert q.get(timeout=20) == 1
        other.close()
        stalled.close()


def _client_end(q):
    """A client end of ``q`` in this process (as another process would unpickle it)."""
    from easycore.common.parallel import queue as queue_mod

    return queue_mod._rebuild(Queue, f"client-{id(q)}-{os.urandom(4).hex()}", q._address,
                              q._authkey, q._prefix, (-1, None, None), q._maxsize,
                              q._transport)


# ------------------------------------------------------------------ item 2
def _outcome(future, timeout=60):
    """What ``future`` came to: its result or its exception; fails if it did not end."""
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        raise AssertionError(f"the call was still waiting after {timeout} s") from None
    except Exception as exc:  # noqa: BLE001 - handed to the test, whatever it is
        return exc


@pytest.mark.parametrize("method", METHODS)
def test_a_timeout_bounds_the_whole_call_with_the_owner_stopped(method):
    """get(timeout=2) waited for a stopped owner's reply with no deadline of its own."""
    owner = _Owner(method, items=1)
    q = owner.q
    connected = concurrent.futures.ThreadPoolExecutor(1)  # one thread: one connection
    try:
        assert connected.submit(q.qsize).result(60) == 1  # connected
        owner.stop()
        value = _outcome(connected.submit(q.get, timeout=2))
        assert isinstance(value, queue.Empty) and "did not answer" in str(value), value
        value = _outcome(connected.submit(q.put, "later", timeout=2))
        assert value is None, value  # unbounded: nothing to wait for
        # a thread of its own: connecting is bounded too
        done, value = in_thread(lambda: q.get(timeout=1), 60)
        assert done and isinstance(value, queue.Empty), value
        owner.cont()
        # Nothing given up was lost: the first item (it came after its get
        # gave up), then the put made while the owner was stopped.
        assert connected.submit(q.get, timeout=30).result(60)[0] == 0
        assert connected.submit(q.get, timeout=30).result(60) == "later"
        assert q.qsize() == 0
    finally:
        owner.close()  # resumed first: a call still waiting ends
        connected.shutdown()


@pytest.mark.parametrize("method", METHODS)
def test_a_put_timeout_on_a_full_queue_gives_its_room_back(method):
    owner = _Owner(method, items=1, maxsize=1)
    q = owner.q
    connected = concurrent.futures.ThreadPoolExecutor(1)  # one thread: one connection
    try:
        value = _outcome(connected.submit(q.put, np.ones(1 << 17), timeout=0.2))
        assert isinstance(value, queue.Full), value  # full: the owner says so
        owner.stop()
        value = _outcome(connected.submit(q.put, np.ones(1 << 17), timeout=2))
        assert isinstance(value, queue.Full), value  # the owner says nothing
        owner.cont()
        assert connected.submit(q.qsize).result(60) == 1
        assert connected.submit(q.get, timeout=30).result(60)[0] == 0
        # the reservation given up on went back: there is room again
        connected.submit(q.put, "room again", timeout=30).result(60)
        assert q.get(timeout=30) == "room again"
    finally:
        owner.close()  # resumed first: a call still waiting ends
        connected.shutdown()


# ------------------------------------------------------------------ item 5
@pytest.mark.forks_with_threads  # the queue's server threads run while fork workers start
@pytest.mark.parametrize("method", METHODS)
def test_short_lived_threads_share_a_few_connections(method):
    """300 puts from 300 threads left 300 descriptors in the producer and ~150
    serving threads in the owner."""
    ctx = multiprocessing.get_context(method)
    with Queue() as q:
        threads_before = threading.active_count()
        producer = Producer(ctx, _put_from_300_threads, q, 300)
        try:
            assert producer.here.poll(180)
            opened = producer.here.recv()
            assert opened <= 20, f"{opened} descriptors left open by 300 short-lived threads"
            # the producer's connections are still open: the owner serves them all
            assert threading.active_count() <= threads_before
            got = sorted(q.get(timeout=30) for _ in range(301))
            assert got == list(range(-1, 300))
        finally:
            producer.finish()


def _put_from_300_threads(q, n, conn):
    put_from_short_lived_threads(q, n, 10, conn)


def test_a_dead_owner_ends_a_wait_even_when_its_child_holds_the_connection():
    """No end of stream reaches the client (a child the owner forked holds the
    owner's end of the connection): the owner's death still ends a get waiting
    without a timeout."""
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    owner = ctx.Process(target=own_then_fork_a_sleeper, args=(there,))
    owner.start()
    sleeper = None
    try:
        assert here.poll(60)
        q = here.recv()
        assert q.qsize() == 0  # connected
        here.send("fork")
        assert here.poll(60)
        sleeper = here.recv()
        waiting = concurrent.futures.ThreadPoolExecutor(1)
        future = waiting.submit(q.get)  # no timeout
        owner.kill()
        value = _outcome(future)
        assert type(value).__name__ == "QueueClosedError", value
        waiting.shutdown()
    finally:
        owner.kill()
        # The sleeper first: it holds a copy of the owner's sentinel, which
        # join() waits on (it waited out its 30 s).
        if sleeper is not None:
            os.kill(sleeper, signal.SIGKILL)
        owner.join(30)
        here.close()
        there.close()
