"""Targets of the background tests: importable by spawned workers and Ray actors."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import numpy as np


class Dataset:
    """elektronn2's ``D``: a data set whose ``getbatch`` makes augmented batches."""

    def __init__(self, n: int = 50, channels: int = 2, side: int = 8) -> None:
        rng = np.random.default_rng(0)
        self.data = rng.random((n, channels, side, side), dtype=np.float32)
        self.label = np.arange(n, dtype=np.int16)

    def getbatch(self, batch_size, strided=False, flip=False, grey_augment_channels=()):
        index = np.random.randint(0, len(self.data), batch_size)
        data = self.data[index].copy()
        if strided:
            data = data[..., ::2, ::2]
        if flip:
            data = data[..., ::-1].copy()
        for c in grey_augment_channels:
            data[:, c] = data[:, c] ** np.random.uniform(0.5, 2.0)
        return data, self.label[index]


def draws(n: int = 3):
    """Numbers from the generators a target uses without asking, and who drew them."""
    return tuple(random.random() for _ in range(n)), tuple(np.random.rand(n).tolist())


def call_start() -> float:
    """When this call started (CLOCK_MONOTONIC: one clock for all processes)."""
    return time.monotonic()


def fail(message: str = "boom"):
    raise ValueError(message)


def fail_while(path: str) -> str:
    """Raise while ``path`` exists."""
    if os.path.exists(path):
        raise ValueError("boom")
    return "ok"


def die(code: int = 3):
    os._exit(code)


def die_until(counter: str, deaths: int) -> int:
    """Exit (code 7) until ``counter`` holds ``deaths`` lines, then return the pid."""
    path = Path(counter)
    done = len(path.read_text().splitlines()) if path.exists() else 0
    if done < deaths:
        with path.open("a") as f:
            f.write("died\n")
        os._exit(7)
    return os.getpid()


def wait_for(go: str, started: str = "", value=None, limit: float = 60.0):
    """Say we started (``started`` file), wait until ``go`` exists; return ``value``
    (or the pid). Never forever: a test that failed must not hold its workers."""
    if started:
        # Atomically: the test reads the pid as soon as the file exists.
        tmp = f"{started}.{os.getpid()}.tmp"
        Path(tmp).write_text(str(os.getpid()))
        os.replace(tmp, started)
    deadline = time.monotonic() + limit
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.getpid() if value is None else value


def count_call(path: str) -> int:
    """Append a line to ``path`` (one per call)."""
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")
    return os.getpid()


def identity(value):
    return value


def pid() -> int:
    return os.getpid()


def nap(seconds: float, value=None):
    time.sleep(seconds)
    return value


def napping_pid(seconds: float) -> int:
    """Sleep, then say which worker ran the call."""
    time.sleep(seconds)
    return os.getpid()
