"""Module-level functions for the engine tests (importable by spawned workers)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from easycore.common.parallel import UnorderedRunner


def logged_exit_on(x, bad, folder):
    """Record that ``x`` ran (in this worker's own file), then die on ``bad``."""
    with open(Path(folder) / str(os.getpid()), "a") as f:
        f.write(f"{x}\n")
    if x == bad:
        os._exit(7)
    return x


def runs(folder):
    """Item -> how many times it ran, over every worker's log."""
    counts: dict = {}
    for path in Path(folder).iterdir():
        for line in path.read_text().split():
            counts[int(line)] = counts.get(int(line), 0) + 1
    return counts


def square(x):
    return x * x


def pid(_=None):
    return os.getpid()


class InterruptWhenPickled:
    """Pickling it raises ``KeyboardInterrupt``: a Ctrl-C landing while items are
    being sent (after a worker's credit was reserved)."""

    def __reduce__(self):
        raise KeyboardInterrupt


def kill_self_on(target):
    """SIGKILL this worker (its pid is ``target``): a death whose sender the caller cannot know."""
    import signal

    if os.getpid() == target:
        os.kill(target, signal.SIGKILL)
    return target


def exit_at(x, bad):
    """A tiny item; ``bad`` kills its worker."""
    if x == bad:
        os._exit(7)
    return x


class SlowDie(UnorderedRunner):
    """Items of ~0.2 ms (their indices are tracked); item ``cfg.item`` kills its worker."""

    @staticmethod
    def producer_work(device, cfg, data):
        time.sleep(0.0002)
        if data == cfg.item:
            os._exit(3)
        return data

    @staticmethod
    def consumer_init(cfg):
        cfg.out = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.out.append(data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.out


class DiesWhenLoaded:
    """Unpickling it ends the process (a job whose function kills the worker
    while the worker builds it, before any item runs)."""

    def __reduce__(self):
        return os._exit, (5,)


def first(x, _extra):
    return x


def busy(x):
    """An item of a few microseconds."""
    return sum(range(1500)) + x


def exit_once_on(x, bad, folder):
    """Record that ``x`` ran; the first run of an item in ``bad`` (an int, or a tuple)
    kills its worker (later ones return)."""
    with open(Path(folder) / f"ran-{os.getpid()}", "a") as f:
        f.write(f"{x}\n")
    marker = Path(folder) / f"died-{x}"
    if x in (bad if isinstance(bad, tuple) else (bad,)) and not marker.exists():
        marker.touch()
        os._exit(9)
    return x * x
