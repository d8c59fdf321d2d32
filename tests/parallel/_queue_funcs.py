"""Functions the queue tests run in other processes (module-level: spawn imports them)."""

from __future__ import annotations

import os
import signal

import numpy as np


def produce(q, worker, n, size):
    for i in range(n):
        q.put((worker, i, np.full(size, i, dtype=np.int64)))
    return n


def consume(q, n):
    total = 0
    for _ in range(n):
        total += int(q.get(timeout=60).sum())
    return total


def put_then_die(q):
    q.put(np.ones(1 << 17))
    os.kill(os.getpid(), signal.SIGKILL)


def encode_then_die(q):
    q.put("hello")  # connected
    pack = q._transport.pack

    def pack_then_die(item, segment_for):
        pack(item, segment_for)  # a segment made, never queued: killed mid-put
        os.kill(os.getpid(), signal.SIGKILL)

    q._transport.pack = pack_then_die
    q.put(np.ones(1 << 17))


def own_a_queue(conn, items=0):
    """A process that owns a queue (holding ``items`` arrays), hands it over, waits to die."""
    from easycore.common.parallel import Queue

    q = Queue()
    for i in range(items):
        q.put(np.full(1 << 17, i))
    conn.send(q)
    conn.recv()  # until the test kills us


def get_and_report(q, conn):
    try:
        q.get(timeout=120)
        conn.send("got")
    except Exception as exc:  # noqa: BLE001 (the test checks the type by name)
        conn.send(type(exc).__name__)


def put_full(q, timeout):
    import queue

    try:
        q.put(np.ones(1 << 17), timeout=timeout)
        return "put"
    except queue.Full:
        return "full"
