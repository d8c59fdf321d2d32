"""easycore.common.parallel.Queue (issue 27 item 3): arrays through the runners'
shared memory, between the caller and its workers; never a hang when a side died."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import socket
import threading

import numpy as np
import pytest
from _queue_funcs import (
    consume,
    encode_then_die,
    fail_a_put_then_put,
    get_and_report,
    own_a_queue,
    produce,
    put_full,
    put_then_die,
)

from easycore.common.parallel import (
    BackgroundTask,
    Pool,
    Queue,
    QueueClosedError,
    QueuePeerDiedError,
)
from easycore.common.parallel.transport import shm

BIG = 1 << 17  # int64s: 1 MiB, above the transport's threshold


def segments(q):
    """``q``'s segments that hold memory: the names a producer holds for its next
    puts are there too, empty (the owner made them), until its connection ends."""
    return [f for f in names(q) if shm.made("/" + f)]


def names(q):
    """Every entry of ``q`` in ``/dev/shm``, empty ones included."""
    prefix = q._prefix
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith(prefix))


def test_order_sizes_and_errors_in_one_process(no_leaks):
    q = Queue(maxsize=3)
    arrays = [np.arange(BIG) * k for k in range(2)]
    q.put(arrays[0])
    q.put({"small": 1})
    q.put_nowait(arrays[1])
    assert q.qsize() == 3 and not q.empty()
    with pytest.raises(queue.Full):
        q.put(np.zeros(BIG), timeout=0.05)
    with pytest.raises(queue.Full):
        q.put_nowait(np.zeros(BIG))
    first = q.get()
    assert np.array_equal(first, arrays[0])
    assert q.get() == {"small": 1}
    assert np.array_equal(q.get_nowait(), arrays[1])
    with pytest.raises(queue.Empty):
        q.get(timeout=0.05)
    with pytest.raises(queue.Empty):
        q.get_nowait()
    assert pickle.loads(pickle.dumps(q)) is q  # where it was made, it is itself
    q.put(np.ones(BIG))  # left in the queue: close frees it
    q.close()
    assert segments(q) == []
    with pytest.raises(QueueClosedError):
        q.put(1)
    q.close()  # idempotent
    del first


@pytest.mark.forks_with_threads  # the queue's server threads run while fork workers start
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_pool_workers_put_the_caller_gets(no_leaks, start_method):
    if start_method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {start_method} here")
    with Queue(maxsize=4) as q, Pool(2, start_method=start_method) as pool:
        done = pool.starmap_async(produce, [(q, w, 5, BIG) for w in range(2)], chunksize=1)
        got = [q.get(timeout=60) for _ in range(10)]
        assert done.get(60) == [5, 5]
        for w in range(2):  # each producer's items in its order, arrays intact
            mine = [(i, a) for worker, i, a in got if worker == w]
            assert [i for i, _ in mine] == list(range(5))
            assert all(a.shape == (BIG,) and (a == i).all() for i, a in mine)
    assert segments(q) == []


@pytest.mark.forks_with_threads  # the queue's server threads run while fork workers start
def test_the_caller_puts_a_worker_gets(no_leaks):
    with Queue() as q, Pool(1) as pool:
        result = pool.apply_async(consume, (q, 6))
        for i in range(6):
            q.put(np.full(BIG, i, dtype=np.int64))
        assert result.get(timeout=120) == sum(i * BIG for i in range(6))
        assert q.qsize() == 0
    assert segments(q) == []


def test_a_killed_producer_is_an_error_not_a_hang(no_leaks):
    ctx = multiprocessing.get_context("spawn")
    with Queue() as q:
        child = ctx.Process(target=put_then_die, args=(q,))
        child.start()
        assert q.get(timeout=60).shape == (1 << 17,)  # what it put before dying
        with pytest.raises(QueuePeerDiedError, match=f"process {child.pid} ended") as info:
            q.get(timeout=60)  # empty, and its producer is dead: no waiting forever
        assert info.value.pid == child.pid
        child.join(60)
        q.put(1)  # the queue goes on
        assert q.get(timeout=5) == 1


def test_a_producer_killed_mid_put_leaks_no_segment(no_leaks):
    ctx = multiprocessing.get_context("spawn")
    q = Queue()
    child = ctx.Process(target=encode_then_die, args=(q,))
    child.start()
    child.join(60)
    assert q.get(timeout=60) == "hello"
    with pytest.raises(QueuePeerDiedError):
        q.get(timeout=60)
    # Made under a name the owner handed out, never queued: freed as the
    # death is seen, not only at close.
    assert segments(q) == []
    q.close()
    assert names(q) == []


def test_a_put_that_fails_after_making_a_segment_frees_it_and_keeps_its_name(no_leaks):
    # A producer makes its segments under names the owner reserved (the owner
    # made them, empty). A put that fails after one was made gives its memory
    # back and keeps the name: the next puts use it again.
    n = 10  # more than the names a producer asks for at once
    with Queue() as q, Pool(1, start_method="spawn") as pool:
        done = pool.apply_async(fail_a_put_then_put, (q, n))
        assert q.get(timeout=60) == "hello"
        got = [int(q.get(timeout=60)[0]) for _ in range(n)]
        assert done.get(timeout=60) == ["KeyboardInterrupt"] * n
        assert got == list(range(n))
        assert segments(q) == []


def test_a_dead_owner_is_an_error_in_the_other_processes(no_leaks):
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    owner = ctx.Process(target=own_a_queue, args=(there,))
    owner.start()
    try:
        assert here.poll(60)
        q = here.recv()  # a client of a queue owned by the other process
        assert q.qsize() == 0
        outcome = []
        waiter = threading.Thread(target=lambda: outcome.append(_get_error(q)))
        waiter.start()
        owner.kill()
        waiter.join(60)
        assert outcome == ["QueueClosedError"]
        owner.join(60)
        with pytest.raises(QueueClosedError, match=f"pid {owner.pid}"):
            q.put(1)  # a put that waits for no reply too
    finally:
        owner.kill()
        owner.join(60)
        here.close()
        there.close()


def test_a_dead_owners_items_leave_no_segment(no_leaks):
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    owner = ctx.Process(target=own_a_queue, args=(there, 3))
    owner.start()
    try:
        assert here.poll(60)
        q = here.recv()
        assert q.get(timeout=60)[0] == 0
        assert len(segments(q)) == 2  # the two items the owner still holds
        owner.kill()
        owner.join(60)
        with pytest.raises(QueueClosedError):
            q.get(timeout=60)
        assert segments(q) == []  # nobody could read them any more
    finally:
        owner.kill()
        owner.join(60)
        here.close()
        there.close()


def _get_error(q):
    try:
        q.get(timeout=60)
        return "got"
    except Exception as exc:  # noqa: BLE001 (the test checks the type by name)
        return type(exc).__name__


def test_close_wakes_waiters_everywhere(no_leaks):
    ctx = multiprocessing.get_context("spawn")
    q = Queue()
    outcome = []
    local = threading.Thread(target=lambda: outcome.append(_get_error(q)))
    local.start()
    here, there = ctx.Pipe()
    child = ctx.Process(target=get_and_report, args=(q, there))
    child.start()
    while not q._broker.gets:  # the child is connected and waiting
        child.join(0.05)
        assert child.exitcode is None
    q.close()
    local.join(60)
    assert outcome == ["QueueClosedError"]
    assert here.poll(60) and here.recv() == "QueueClosedError"
    child.join(60)
    here.close()
    there.close()


@pytest.mark.forks_with_threads  # the queue's server threads run while fork workers start
def test_a_full_queue_times_out_in_a_worker_and_frees_its_segment(no_leaks):
    with Queue(maxsize=1) as q:
        q.put(0)
        with Pool(1) as pool:
            assert pool.apply(put_full, (q, 0.2)) == "full"
        assert segments(q) == []
        assert q.get(timeout=5) == 0


@pytest.mark.forks_with_threads  # the queue's server threads run while fork workers start
def test_a_background_task_produces_into_a_queue(no_leaks):
    """A prefetching BackgroundTask calls its target again and again: each call puts one."""
    with Queue(maxsize=2) as q, BackgroundTask(produce, args=(q, 0, 1, BIG), workers=1) as task:
        assert task.get(timeout=120) == 1
        assert (q.get(timeout=60)[2] == 0).all()


def test_bad_arguments():
    with pytest.raises(ValueError, match="maxsize"):
        Queue(maxsize=-1)


def test_the_owner_closes_at_once_with_connections_open(no_leaks):
    """close() returns at once with a client connected and a handshake half done.

    It hung once, when its accept loop had taken a connection just before
    close() began. Connections are now accepted by the connection layer's
    door, which close() ends whatever handshake is in progress.
    """
    from easycore.common.parallel import queue as queue_mod

    q = Queue()
    # a client end in this process (an owner pid that is not ours)
    client = queue_mod._rebuild(Queue, "a-client", q._address, q._authkey, q._prefix,
                                (-1, None, None), 0, q._transport)
    assert client.qsize() == 0
    silent = socket.socket(socket.AF_UNIX)
    silent.connect(q._address)  # and never answers the challenge
    try:
        closer = threading.Thread(target=q.close, daemon=True)
        closer.start()
        closer.join(15)
        assert not closer.is_alive(), "Queue.close() hung"
        with pytest.raises(QueueClosedError):
            client.qsize()
    finally:
        silent.close()
        client.close()


@pytest.mark.forks_with_threads  # the queue's server threads run while fork workers start
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_two_tasks_of_one_worker_put_big_items(method, no_leaks):
    """Each task unpickles its own end of the queue: their segments' names must differ.

    Every end counted its segments from 1 under the same ``<prefix><pid>-``: a
    second task on the same worker failed with FileExistsError while the first
    one's items were still queued (the tutorial's queue.Empty after 60 s, when
    one worker ran both producers).
    """
    with Queue() as q, Pool(1, start_method=method) as pool:
        assert pool.starmap(produce, [(q, 0, 2, BIG), (q, 1, 2, BIG)], chunksize=1) == [2, 2]
        got = sorted((w, i, int(a[0])) for w, i, a in (q.get(timeout=60) for _ in range(4)))
        assert got == [(0, 0, 0), (0, 1, 1), (1, 0, 0), (1, 1, 1)]
        assert segments(q) == []
    assert names(q) == []  # and the names the producers held, at close
