"""What the node-loss tests run on Ray: items that wait at a gate the test opens.

Ray workers import this module (``conftest`` puts this folder on their
``PYTHONPATH``). Every node of the local cluster sees the same file system, so
the gate is a folder: an item marks that it started, then waits until the test
opens the gate. A test that waits until every worker has an item at the gate
knows that each one is busy, the one on the node it is about to remove too.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

WAIT = 60.0  # seconds anything here waits at most


def here() -> str:
    """The Ray node this runs on."""
    import ray

    return ray.get_runtime_context().get_node_id()


def wait_for(condition: Any, what: str, timeout: float = WAIT) -> None:
    """Until ``condition()`` holds; ``TimeoutError`` naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout} s for {what}")
        time.sleep(0.01)


class Gate:
    """A folder: items mark that they started in it, and wait for ``open``."""

    def __init__(self, folder: Any) -> None:
        self.folder = Path(folder)

    def open(self) -> None:
        (self.folder / "open").touch()

    def started(self) -> int:
        return len(list(self.folder.glob("started-*")))

    def wait_started(self, n: int) -> None:
        """Until ``n`` items are at the gate (or ran past it)."""
        wait_for(lambda: self.started() >= n, f"{n} items at the gate in {self.folder}")

    def enter(self, item: Any) -> None:
        """In a worker: say ``item`` started, then wait until the gate is open."""
        (self.folder / f"started-{item}-{uuid.uuid4().hex}").touch()
        wait_for((self.folder / "open").exists, f"the gate in {self.folder} to open")


def held(x: int, gate: Gate, after: int = 0, seconds: float = 0.0) -> tuple:
    """Item ``x`` (those from ``after`` on wait at the gate): ``(x, node, pid)``."""
    if x >= after:
        gate.enter(x)
        time.sleep(seconds)  # work: keeps the workers busy long enough to share it out
    return x, here(), os.getpid()


def held_draw(gate: Gate) -> tuple:
    """A seeded call of a BackgroundTask, held at the gate: the draws of its stream."""
    import random

    import numpy as np

    gate.enter("draw")
    return random.random(), float(np.random.random())


def die_at(x: int, bad: int, how: str) -> int:
    """Item ``bad`` ends its worker's process (``"exit"``: os._exit; ``"kill"``: SIGKILL)."""
    if x == bad:
        if how == "exit":
            os._exit(3)
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    return x


class Tally:
    """A service's object: counts what it was given."""

    def __init__(self) -> None:
        self.total = 0

    def add(self, n: int) -> int:
        self.total += n
        return self.total
