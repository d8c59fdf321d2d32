"""easycore.torch.parallel.Queue: tensors both ways through the runners' segments."""

from __future__ import annotations

import multiprocessing
import os

import pytest
import torch
from _torch_pool_funcs import echo_tensors, produce_tensors
from queue_support import check_room_before_memory

from easycore.torch.parallel import Pool, Queue, TensorTransport

# The queue's server threads run while the test's fork workers start.
FORK = pytest.param("fork", marks=pytest.mark.forks_with_threads)


def _segments(q):
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith(q._prefix))


@pytest.mark.parametrize("start_method", [FORK, "spawn"])
def test_tensors_to_a_worker_and_back(no_leaks, start_method):
    big = torch.arange(1 << 20, dtype=torch.float32).reshape(1024, 1024)
    sent = [
        big,
        big.t(),  # not contiguous
        big.to(torch.bfloat16),
        torch.randint(0, 9, (600, 600), dtype=torch.int16),
        torch.ones(3),  # small: inside the message
    ]
    with Queue() as inbox, Queue(maxsize=2) as outbox, \
            Pool(1, start_method=start_method, cpu_threads=1) as pool:
        assert isinstance(inbox._transport, TensorTransport)
        done = pool.apply_async(echo_tensors, (inbox, outbox, len(sent)))
        for t in sent:
            inbox.put(t)
        back = [outbox.get(timeout=60) for _ in sent]
        assert done.get(timeout=60) == len(sent)
        for a, b in zip(sent, back):
            assert b.dtype == a.dtype and b.shape == a.shape
            assert torch.equal(b, a * 2)
        del back
    assert _segments(inbox) == [] and _segments(outbox) == []


@pytest.mark.parametrize("start_method", [FORK, "forkserver", "spawn"])
def test_maxsize_bounds_a_producers_shared_memory(start_method):
    """Issue 34 item 3, the torch variant: 117 tensors in /dev/shm through maxsize=4."""
    with Queue(maxsize=4) as q:
        check_room_before_memory(multiprocessing.get_context(start_method), q, produce_tensors,
                                 10, lambda: _segments(q), lambda item: int(item[0].item()))
    assert _segments(q) == []
