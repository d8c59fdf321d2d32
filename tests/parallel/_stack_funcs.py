"""Functions that get stuck where a test can name them (importable by spawned workers)."""

from __future__ import annotations

import os
import threading

from _parallel_helpers import _Collect

from easycore.common.parallel import UnorderedRunner

STUCK_FOR = 120  # far longer than any test waits: the test ends it first


def wait_here(x, mark=None):
    """Blocks in a wait (on a lock, GIL released); with ``mark``, says it got here."""
    if mark is not None:
        with open(f"{mark}.{os.getpid()}", "w"):
            pass
    threading.Event().wait(STUCK_FOR)
    return x


def spin_in_c(x):
    """Runs C code that holds the GIL throughout."""
    return sum(range(10**12))


def stuck_on(x, bad, how=wait_here):
    return how(x) if x == bad else x


class StuckRunner(_Collect, UnorderedRunner):
    """Its producer gets stuck on item 1 (marking it, with ``cfg.mark``)."""

    @staticmethod
    def producer_work(device, cfg, data):
        return wait_here(data, cfg.get("mark")) if data == 1 else data


# ---------------------------------------------------------------- memory
_held = []
GROWTH = 40_000_000  # bytes each call keeps (touched: resident)


def grow(x):
    """Keeps 40 MB more for good; says which process ran it and what it then held."""
    from easycore.common.parallel._os import memory

    block = bytearray(GROWTH)
    block[::4096] = b"x" * len(range(0, GROWTH, 4096))
    _held.append(block)
    return x, os.getpid(), memory.resident(os.getpid())


class GrowingRunner(UnorderedRunner):
    """Its producer keeps 40 MB more per item."""

    @staticmethod
    def producer_work(device, cfg, data):
        return grow(data)

    @staticmethod
    def consumer_init(cfg):
        cfg.out = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.out.append(data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.out


class StuckAtEnd(UnorderedRunner):
    """Its ``producer_end`` never returns."""

    @staticmethod
    def producer_end(device, cfg):
        wait_here(0)


class Heavy:
    """An object that pickles to about 16 MB, with a method to map."""

    def __init__(self):
        self.blob = b"x" * (16 * 2**20)

    def size(self, x):
        return len(self.blob) + x
