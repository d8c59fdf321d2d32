"""Task functions of the Pool tests, importable by workers under every start method.

Tasks that must be seen running by the test (to kill their worker, or to
interrupt the call) announce themselves by creating a file named after the
item in a folder the test gives; [`wait_for_file`][] waits for it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Optional

#: set by ``remember`` (a pool initializer) in each worker
_INIT: Optional[tuple] = None


class TaskError(Exception):
    """An exception class of the tests' own (it must come back as itself)."""


def square(x):
    return x * x


def add(a, b):
    return a + b


def describe(a, b=0, *, c=0):
    return (a, b, c)


def identity(x):
    return x


def worker_pid(_=None):
    return os.getpid()


def fail_on(x, bad=3):
    if x == bad:
        raise TaskError(f"bad item {x}")
    return x


def raise_value_error(message):
    raise ValueError(message)


def nap(seconds, value=None):
    time.sleep(seconds)
    return value


def nap_on(x, slow=0, seconds=30.0):
    """Sleep ``seconds`` on item ``slow`` (provokes a timeout), return the others at once."""
    if x == slow:
        time.sleep(seconds)
    return x


def exit_on(x, bad=3, how="exit"):
    """Die on item ``bad``: ``os._exit`` or SIGKILL from inside."""
    if x == bad:
        if how == "exit":
            os._exit(7)
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(30)  # never reached: SIGKILL is immediate
    return x


def always_exit(x):
    os._exit(9)


def announce_then_block(x, folder, block=0, seconds=60.0):
    """Item ``block`` writes its worker's pid to ``folder/<x>`` and blocks; others return."""
    if x == block:
        path = Path(folder) / str(x)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(str(os.getpid()))
        os.replace(tmp, path)  # the test never reads a half-written pid
        time.sleep(seconds)
    return x


def announce_then_hold(x, folder, block=0, limit=60.0):
    """Item ``block`` writes its worker's pid to ``folder/<x>`` and waits until
    ``folder/release`` exists (``limit`` seconds at most); others return."""
    if x == block:
        announce_then_block(x, folder, block, seconds=0.0)
        wait_for_file(Path(folder) / "release", limit)
    return x


def announce_and_nap(x, folder, seconds=0.05):
    """Every item announces itself, then naps (a long stream of short tasks)."""
    Path(folder, f"{x}.started").touch()
    time.sleep(seconds)
    return x


def remember(tag):
    """A pool initializer: records what it got, in which process."""
    global _INIT
    _INIT = (tag, os.getpid())


def remembered(_=None):
    return _INIT


def context_info(ctx, x=None):
    """A ``pass_context`` task: what the worker knows about itself."""
    cfg = ctx.cfg
    scale = cfg.get("scale") if hasattr(cfg, "get") else None
    return {"index": ctx.index, "device": ctx.device, "context": ctx.context,
            "scale": scale, "x": x}


def mutate_cfg(ctx, value):
    """Writes into this worker's cfg, returns what was there before."""
    before = ctx.cfg.get("seen")
    ctx.cfg.seen = value
    return before


def wait_for_file(path, timeout: float = 30.0) -> str:
    """The contents of ``path`` once it exists (polls; fails after ``timeout``)."""
    path = Path(path)
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout} s")
        time.sleep(0.01)
    return path.read_text()


# --- counting how often code is pickled and unpickled ------------------------
#: in the caller: times a CountedFunction was pickled; in a worker: unpickled
PICKLED = [0]
UNPICKLED = [0]


def _rebuild_counted(offset):
    UNPICKLED[0] += 1
    return CountedFunction(offset, counting=False)


class CountedFunction:
    """A task that counts its trips through pickle (to check "once per job")."""

    def __init__(self, offset, counting=True):
        self.offset = offset

    def __call__(self, x):
        return x + self.offset

    def __reduce__(self):
        PICKLED[0] += 1
        return (_rebuild_counted, (self.offset,))


def unpickled_count(_=None):
    return UNPICKLED[0]


# --- issue 20: inputs that fail, results that cannot travel, tasks that exit
class SayWhenError(ValueError):
    """Raised by ``failing_input`` where it was told to."""


def failing_input(total, when):
    """Items ``0..total-1``, raising ``SayWhenError`` instead of item ``when``."""
    for i in range(total):
        if i == when:
            raise SayWhenError(f"input failed at {i}")
        yield i


def unpicklable_on(x, bad=7):
    """``x``, except for item ``bad``: a result no pickler can send."""
    import threading

    return threading.Lock() if x == bad else x


def exit_zero(x=None):
    import sys

    sys.exit(0)


class Box:
    """A result whose lifetime the tests watch with weak references."""

    def __init__(self, value):
        self.value = value


def boxed(x):
    return Box(x)


#: made when this module is imported: before the pool, in the caller (and, under
#: ``spawn``, again in the worker before it runs anything)
INHERITED = Box("made before the workers")


def heap_seen_by_worker(_=None):
    """A task: whether this worker's collector still visits ``INHERITED`` (made before
    the pool: inherited under ``fork``, made again by the task's import otherwise) and a
    class of easycore's worker loop (which every worker has before it runs anything),
    and how many objects it keeps frozen."""
    import gc

    from easycore.common.parallel.worker.loop import WorkerSpec

    visited = gc.get_objects()
    return (any(o is INHERITED for o in visited), any(o is WorkerSpec for o in visited),
            gc.get_freeze_count())


def report_exit_to(directory):
    """A pool initializer (or a runner's ``producer_init``): at this worker's exit, an
    ``atexit`` handler writes ``<pid>.json`` into ``directory`` with how many objects the
    garbage collector had frozen by then."""
    import atexit
    import gc
    import json

    def report():
        with open(os.path.join(directory, f"{os.getpid()}.json"), "w") as f:
            json.dump({"frozen": gc.get_freeze_count()}, f)

    atexit.register(report)


def meet(folder, n=2, limit=20.0):
    """A task that waits (at most ``limit`` seconds) until ``n`` tasks run at once:
    returns this worker's pid and whether they all met."""
    import time

    open(os.path.join(folder, f"{os.getpid()}-{time.monotonic_ns()}"), "w").close()
    deadline = time.monotonic() + limit
    # Other processes' files, no event to wait on: polled, with a deadline.
    while len(os.listdir(folder)) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.getpid(), len(os.listdir(folder)) >= n


def touch_in(folder):
    """A pool initializer: leaves the file ``<pid>`` in ``folder``."""
    open(os.path.join(folder, str(os.getpid())), "w").close()
