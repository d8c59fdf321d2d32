"""Targets of test_parallel_inherit: objects that record where they were unpickled.

Workers import this module by name (spawn, forkserver); nothing here runs at import.
"""

from __future__ import annotations

import fcntl
import os
from typing import Any, List, Tuple

import numpy as np

#: (pid, nbytes) for every Dataset unpickled in this process (and, under fork,
#: inherited from the parent: hence the pid)
UNPICKLED: List[Tuple[int, int]] = []
#: what an initializer handed to this worker
SEEN: List[Any] = []


def unpickled_here() -> int:
    """How many Dataset objects this very process unpickled."""
    return sum(1 for pid, _ in UNPICKLED if pid == os.getpid())


def _rebuilt(data: np.ndarray) -> Dataset:
    UNPICKLED.append((os.getpid(), data.nbytes))
    d = Dataset.__new__(Dataset)
    d.data = data
    return d


class Dataset:
    """A read-only data set behind a bound method (elektronn2's ``D.getbatch``)."""

    def __init__(self, nbytes: int) -> None:
        self.data = np.ones(nbytes, dtype=np.uint8)

    def __reduce__(self) -> Any:
        return _rebuilt, (self.data,)

    def getbatch(self) -> Tuple[int, int, int]:
        """``(pid, unpickled here, first bytes' sum)``: the call reads the data."""
        return os.getpid(), unpickled_here(), int(self.data[:16].sum())

    def remember(self) -> None:
        """An initializer."""
        SEEN.append(self)


def seen_unpickled() -> Tuple[int, int, int]:
    """``(pid, initializers run, data sets unpickled here)`` in a worker."""
    return os.getpid(), len(SEEN), unpickled_here()


def seen_unpickled_star(*_: Any) -> Tuple[int, int, int]:
    return seen_unpickled()


# --- first results sooner: one worker's start is held back -------------------
def gate(first_dir: str, lock_path: str) -> None:
    """An initializer: the first worker to run it goes on; the others wait until
    the test releases its lock on ``lock_path`` (an flock: no polling)."""
    try:
        os.mkdir(os.path.join(first_dir, "first"))
        return  # the winner
    except FileExistsError:
        pass
    with open(lock_path, "rb") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # blocks while the test holds it
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _first_here(first_dir: str) -> bool:
    """Whether this process is the first of its pool to ask (a directory made once)."""
    try:
        os.mkdir(os.path.join(first_dir, "first"))
    except FileExistsError:
        return False
    return True


def die_unless_first(first_dir: str) -> None:
    """An initializer: the first worker to run it goes on; every other one dies (exit 3)."""
    if not _first_here(first_dir):
        os._exit(3)


def break_task_pipe_unless_first(first_dir: str) -> None:
    """An initializer: the first worker to run it goes on; every other one closes
    its own task pipe, so it says it is ready and dies (exit 75) at its first
    read, before any chunk reaches it: what a library that renews descriptors
    by number at fork once did to a replacement (stop 59)."""
    if _first_here(first_dir):
        return
    import sys

    frame = sys._getframe()
    while frame.f_code.co_name != "_serve":  # the worker loop that reads the pipe
        frame = frame.f_back
    os.close(frame.f_locals["tasks"].fileno())


def pid_of(_: Any = None) -> int:
    return os.getpid()
