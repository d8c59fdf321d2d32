"""Workers still starting, on demand: a runner whose module holds up the second
spawned worker that imports it, and a ``Pool`` worker context that holds up its worker.

With ``EASYCORE_TEST_GATE`` naming a folder, the first worker process to
import this module goes on, and the next ones wait (at most 60 s) until the
file ``release`` appears in that folder. A ``HeldContext`` holds up the worker
that unpickles it the same way. The caller (no parent process) never waits.
"""

from __future__ import annotations

import multiprocessing
import os
import time

from _parallel_helpers import _Collect

from easycore.common.parallel import UnorderedRunner


def _wait_for(release: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    # Another process's file, no event to wait on: polled, with a deadline.
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.01)


_GATE = os.environ.get("EASYCORE_TEST_GATE")
if _GATE and multiprocessing.parent_process() is not None:
    try:
        os.close(os.open(os.path.join(_GATE, "first"), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        _wait_for(os.path.join(_GATE, "release"))


class Doubles(_Collect, UnorderedRunner):
    """No set-up nor end hook: nothing of the user's runs at a worker's start or stop."""

    @staticmethod
    def producer_work(device, cfg, data):
        return 2 * data


class DoublesWithEnd(Doubles):
    """The same with an end hook (it leaves ``ended-<pid>`` in the gate's folder): a
    starting worker must finish its start, to run it."""

    @staticmethod
    def producer_end(device, cfg):
        open(os.path.join(_GATE or ".", f"ended-{os.getpid()}"), "w").close()


class HeldContext:
    """A ``Pool`` worker context whose unpickling, in a worker (before it is ready),
    waits until the file ``release`` exists (at most ``limit`` seconds): that worker is
    still starting, on demand. Once let go, it leaves ``<release>.passed-<pid>``."""

    def __init__(self, release: str, limit: float = 60.0) -> None:
        self.release = release
        self.limit = limit

    def __reduce__(self):
        return (_held, (self.release, self.limit))


def _held(release: str, limit: float = 60.0) -> HeldContext:
    if multiprocessing.parent_process() is not None:
        _wait_for(release, limit)
        open(f"{release}.passed-{os.getpid()}", "w").close()
    return HeldContext(release, limit)
