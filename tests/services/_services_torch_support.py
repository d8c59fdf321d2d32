"""Torch helpers of the service tests (module-level: spawned workers import them)."""

from __future__ import annotations

import os
import time

import torch

TRUE_W = torch.tensor([[1.0, -2.0, 0.5]])
TRUE_B = 0.3


def toy_batch(generator, n=32):
    x = torch.randn(n, 3, generator=generator)
    return x, x @ TRUE_W.T + TRUE_B


class GatedSGD(torch.optim.SGD):
    """SGD whose steps wait until a file exists: holds the reducer still, on cue."""

    def __init__(self, params, lr, gate):
        super().__init__(params, lr=lr)
        self.gate = gate

    def step(self, closure=None):
        deadline = time.monotonic() + 120
        while not os.path.exists(self.gate):
            if time.monotonic() > deadline:
                raise TimeoutError(self.gate)
            time.sleep(0.01)
        return super().step(closure)


def sgd(params, lr=0.1):
    return torch.optim.SGD(params, lr=lr)


def train_async(server, seed, steps):
    """A client process of a gradient server: pull, compute, push, ``steps`` times."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = torch.nn.Linear(3, 1)
    for _ in range(steps):
        server.pull(model)
        model.zero_grad()
        x, y = toy_batch(generator)
        torch.nn.functional.mse_loss(model(x), y).backward()
        server.push_gradients(model)
    server.handle.close()
    return steps


def push_successes(sync, seed, count):
    """A client process of a ModelSync: ``count`` successful pushes, pulling on failure."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 2)
    sync.pull(model)
    versions = []
    while len(versions) < count:
        with torch.no_grad():
            model.weight.add_(1.0)
        if sync.push(model):  # on failure it pulls, and we try again from there
            versions.append(sync.version(model))
    sync.close()
    return versions
