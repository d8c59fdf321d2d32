"""Helpers of the service tests: leak probes, and objects to serve.

Module-level, so that spawned service processes and pool workers import them.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Iterable, List

from processes import stray_children, wait_gone  # noqa: F401  (re-exported)

SHM_DIR = "/dev/shm"


def shm_of(pids: Iterable[int]) -> List[str]:
    """easycore shared-memory segments named after any of ``pids``."""
    if not os.path.isdir(SHM_DIR):
        return []
    prefixes = tuple(f"{kind}-{pid:x}-" for pid in pids for kind in ("ecp", "ect"))
    return sorted(f for f in os.listdir(SHM_DIR) if f.startswith(prefixes))


class Tool:
    """A service object with one method per behaviour under test."""

    def __init__(self, tag="tool", marker=None):
        self.tag = tag
        self.marker = marker  # a file written by close()
        self.calls = []

    def echo(self, *args, **kwargs):
        return args, kwargs

    def record(self, value):
        self.calls.append(value)
        return len(self.calls)

    def history(self):
        return list(self.calls)

    def pid(self):
        return os.getpid()

    def sleep(self, seconds, then=None):
        time.sleep(seconds)
        return then

    def wait_for(self, path, timeout=60.0):
        """Block until ``path`` exists (a cross-process gate, no sleeping as sync)."""
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                raise TimeoutError(path)
            time.sleep(0.01)
        return "opened"

    def boom(self, message="boom"):
        raise ValueError(message)

    def unpicklable(self):
        return lambda: None  # pickle (not cloudpickle) sends results: this cannot travel

    def die(self):
        os.kill(os.getpid(), signal.SIGKILL)

    def fork_sleeper(self):
        """A child that inherits every socket of the service, and outlives it."""
        pid = os.fork()
        if pid == 0:
            time.sleep(120)
            os._exit(0)
        return pid

    def _private(self):
        return "secret"

    def close(self):
        if self.marker:
            with open(self.marker, "w") as f:
                f.write(self.tag)


class FailingFactory:
    def __init__(self):
        raise RuntimeError("cannot build this service")


def push_until_done(handle, key, who, count, results):
    """A client process: ``count`` acknowledged compare-and-set pushes on ``key``."""
    acked = []
    while len(acked) < count:
        versions = handle.call("versions", key)
        prev = versions[-1] if versions else None
        version = 1 if prev is None else prev + 1
        value = (who, len(acked))
        if handle.call("push", key, value, version, prev):
            acked.append((version, value))
    handle.close()
    results.put((who, acked))


def call_in_pool(args):
    handle, x = args
    return os.getpid(), handle.call("record", x)


def call_then_hold(handle, started, path):
    """A client that starts a long call; its process gets killed meanwhile."""
    started.set()
    handle.call("wait_for", path)
