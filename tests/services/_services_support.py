"""Helpers of the service tests: leak probes, and objects to serve.

Module-level, so that spawned service processes and pool workers import them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Iterable, List

import leaks
from processes import stray_children, wait_gone  # noqa: F401  (re-exported)


def shm_of(pids: Iterable[int]) -> List[str]:
    """easycore shared-memory segments named after any of ``pids``."""
    return leaks.shm_segments(leaks.EASYCORE_SHM, pids)


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

    def hold(self, folder, limit=60.0):
        """Write ``folder/0``, then block until ``folder/release`` exists."""
        with open(os.path.join(folder, "0"), "w"):
            pass
        return self.wait_for(os.path.join(folder, "release"), limit)

    def boom(self, message="boom"):
        raise ValueError(message)

    def unpicklable(self):
        import threading

        return threading.Lock()  # neither pickle nor cloudpickle can send this

    def a_lambda(self, offset):
        return lambda x: x + offset  # travels by value (cloudpickle)

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


def _close_fds_then_die(seconds):
    # Every socket closes (the listener included) while the process lives on
    # for a moment, as when it is being killed.
    import socket

    for fd in range(3, 4096):
        try:  # shutdown also ends a listen() another thread blocks on
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        with contextlib.suppress(OSError):  # not a socket, or not connected
            s.shutdown(socket.SHUT_RDWR)
        s.close()
    os.closerange(3, 65536)
    time.sleep(seconds)
    os._exit(9)


def close_fds_then_die(self, seconds):
    """Close every file descriptor, wait ``seconds``, then exit: a slow death."""
    _close_fds_then_die(seconds)


Tool.close_fds_then_die = close_fds_then_die


class Counter:
    """A value to keep in a service (RemoteRef tests)."""

    def __init__(self, start=0):
        self.n = start

    def add(self, k=1):
        self.n += k
        return self.n

    def value(self):
        return self.n

    def child(self):
        return Counter(self.n * 10)


class Tracked:
    """Writes ``path`` when collected: shows a service dropped a kept value."""

    def __init__(self, path):
        self.path = path

    def where(self):
        return os.getpid()

    def __del__(self):
        with open(self.path, "w") as f:
            f.write("collected")


def wait_for_file(path, timeout=30.0):
    """True once ``path`` exists (written by another process); False after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def get_in_child(ref, results):
    results.put(ref.get().value())


def hold_ref_then_die(ref, ready):
    """Load a pickled RemoteRef (an argument), use it, then die without closing anything."""
    ref.call("where")
    ready.set()
    os.kill(os.getpid(), signal.SIGKILL)
