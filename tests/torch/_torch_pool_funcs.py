"""Tasks of the torch Pool tests (importable by workers under every start method)."""

from __future__ import annotations

import os
import time

import torch


def block(x):
    """A fresh 1 MiB int32 tensor filled with ``x`` (fresh: never a re-sent storage)."""
    return torch.full((512, 512), x, dtype=torch.int32)


def total(t):
    return int(t.sum())


def describe(t):
    """What arrived: dtype, shape, strides, and a checksum of the values."""
    return (str(t.dtype), tuple(t.shape), t.stride(), int(t.to(torch.int64).sum()),
            t.is_shared())


def add(a, b):
    return a + b


def doubled_and_transposed(t):
    """A non-contiguous result."""
    return (t * 2).t()


def die_on(x, bad=3):
    if x == bad:
        os._exit(3)
    return torch.full((256, 1024), x, dtype=torch.float32)


def threads(_=None):
    return torch.get_num_threads()


def on_device(ctx, shape):
    """A tensor made on the worker's device (CUDA tests)."""
    return torch.ones(shape, device=ctx.device) * (ctx.index + 1)


def device_sum(t):
    return (str(t.device), float(t.sum()))


def sleepy_block(x):
    if x == 1:
        time.sleep(60)
    return block(x)


def cuda_roundtrip(t):
    on_gpu = t.to(torch.cuda.current_device())
    return (on_gpu.is_cuda, float(on_gpu.sum()))


def echo_tensors(inbox, outbox, n):
    """Take ``n`` tensors from one queue, send each back doubled through another."""
    for _ in range(n):
        outbox.put(inbox.get(timeout=60) * 2)
    return n


def produce_tensors(q, n, conn):
    """Put ``n`` tensors of 1 MiB, telling ``conn`` after each; close when told."""
    torch.set_num_threads(1)  # forked from a parent whose OpenMP pool ran: not again here
    for i in range(n):
        q.put(torch.full((1 << 18,), float(i)))
        conn.send(i + 1)
    conn.recv()
    q.close()
