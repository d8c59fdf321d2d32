"""Make a thread's start fail, for the tests of what a half-made object leaves behind.

``Thread.start`` waits for the new thread: a Ctrl-C there raises with the
thread already running. Only the failure is made; the threads are real.
"""

from __future__ import annotations

import signal
import threading


def on_start_of(patch, prefix, then):
    """With ``patch`` (a ``monkeypatch``), ``then(thread, start)`` replaces the start of
    each thread whose name starts with ``prefix``."""
    start = threading.Thread.start

    def patched(thread):
        if thread.name.startswith(prefix):
            return then(thread, start)
        return start(thread)

    patch.setattr(threading.Thread, "start", patched)


def cannot_start(thread, start):
    """No thread to be had."""
    raise RuntimeError("can't start new thread")


def ctrl_c_once_it_runs(thread, start):
    """The thread starts, then a Ctrl-C comes while ``start`` would still wait for it."""
    start(thread)
    signal.raise_signal(signal.SIGINT)
