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


def serve_a_queue(conn, items=0, maxsize=0):
    """Own a queue holding ``items`` arrays, hand it over; close it when told, then report."""
    from easycore.common.parallel import Queue

    q = Queue(maxsize=maxsize)
    for i in range(items):
        q.put(np.full(1 << 17, i))
    conn.send(q)
    conn.recv()  # "close"
    q.close()
    conn.send("closed")


def put_and_report(q, conn):
    """A client: one small put and one array put, each with a timeout; then report."""
    try:
        q.put("small", timeout=20)
        q.put(np.full(1 << 17, 7), timeout=20)
        conn.send("put")
    except Exception as exc:  # noqa: BLE001 (the test checks the type by name)
        conn.send(type(exc).__name__)


def produce_and_report(q, n, conn):
    """Put ``n`` 1 MiB arrays, telling ``conn`` after each; then wait to be told to close."""
    for i in range(n):
        q.put(np.full(1 << 17, i, dtype=np.int64))
        conn.send(i + 1)
    conn.recv()
    q.close()


def put_from_short_lived_threads(q, n, batch, conn):
    """``n`` puts, each from a thread of its own (``batch`` at a time); report the
    descriptors this process opened meanwhile; close when told."""
    import gc
    import threading

    q.put(-1)  # this thread's connection: the baseline has one
    before = len(os.listdir("/proc/self/fd"))
    for start in range(0, n, batch):
        threads = [threading.Thread(target=q.put, args=(i,))
                   for i in range(start, min(n, start + batch))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    del threads
    gc.collect()
    conn.send(len(os.listdir("/proc/self/fd")) - before)
    conn.recv()
    q.close()


def own_then_fork_a_sleeper(conn):
    """Own a queue, hand it over; when told, fork a child that keeps every
    descriptor of ours open (the clients' connections too) and report its pid."""
    import time

    from easycore.common.parallel import Queue

    q = Queue()
    conn.send(q)
    conn.recv()  # "fork": a client is connected by now
    pid = os.fork()
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    conn.send(pid)
    conn.recv()  # until the test kills us



def fail_a_put_then_put(q, n):
    """``n`` puts that fail once their array went into a segment (as a signal
    arriving there would), then ``n`` that succeed; what the failed ones raised."""
    q.put("hello")  # connected
    pack = q._transport.pack

    def pack_then_fail(item, segment_for):
        pack(item, segment_for)  # a segment made under the owner's name
        raise KeyboardInterrupt

    q._transport.pack = pack_then_fail
    raised = []
    for i in range(n):
        try:
            q.put(np.full(1 << 17, i))
        except KeyboardInterrupt:
            raised.append("KeyboardInterrupt")
    q._transport.pack = pack
    for i in range(n):
        q.put(np.full(1 << 17, i))
    return raised
