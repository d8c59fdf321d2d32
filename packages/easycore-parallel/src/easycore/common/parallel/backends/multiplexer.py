"""The process back-end's pipe multiplexer: one selector over every worker, and a wake-up pipe.

The caller waits on every worker's result pipe *and* every process sentinel
at once (one ``epoll`` set kept across polls), so a message or a death is
seen the moment it happens, whatever the others do; a task pipe joins the
set only while it holds output the pipe could not take yet (sends never
block: the polling thread flushes them when there is room). Another thread
makes a blocked poll return through the wake-up pipe, as CPython's
``concurrent.futures.process`` keeps its ``_ThreadWakeup`` apart. Where the
polling thread is the one waiting (a runner's caller) and its waits are short
(a kept-alive call's answer), a poll spins for a moment before it sleeps: see
[`spin`][easycore.common.parallel._os.spin].

This module knows file descriptors and slots only; what a readable pipe or
a fired sentinel means is the [`ProcessBackend`][easycore.common.parallel.ProcessBackend]'s.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading

from .._os.spin import Spinner

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Callable, Dict, List, Optional, Set, Tuple

__all__ = ["Multiplexer"]


class Multiplexer:
    """One selector over the workers' pipes and sentinels, plus a wake-up pipe.

    ``select`` is called by one thread at a time (the back-end's poll lock);
    ``wakeup`` and ``want_write`` by any thread.
    """

    def __init__(self, spin: float = 0.0) -> None:
        """
        Args:
            spin (float): the longest spin before a blocking wait (seconds; 0:
                never), see [`spin.budget`][easycore.common.parallel._os.spin.budget].
        """
        self._spinner = Spinner(spin)
        self._sel: Optional[selectors.BaseSelector] = selectors.DefaultSelector()
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        self._wake_r: Optional[int] = wake_r
        self._wake_w: Optional[int] = wake_w
        self._wake_pending = False
        self._wake_lock = threading.Lock()
        self._sel.register(wake_r, selectors.EVENT_READ, ("wake", -1))
        self._writers: Set[int] = set()  # slots with buffered output
        self._writers_lock = threading.Lock()
        self._registered: Dict[int, int] = {}  # slot -> its task pipe, watched for room

    @property
    def closed(self) -> bool:
        """bool: whether ``close`` ran."""
        return self._sel is None

    # --------------------------------------------------------------- workers
    def watch(self, slot: int, results_fd: int, sentinel: int) -> None:
        """Watch a new worker's result pipe and process sentinel."""
        assert self._sel is not None
        self._sel.register(results_fd, selectors.EVENT_READ, ("result", slot))
        self._sel.register(sentinel, selectors.EVENT_READ, ("exit", slot))

    def forget(self, slot: int, results_fd: Optional[int], sentinel: int) -> None:
        """Stop watching a worker that exited (``results_fd`` None: its pipe is closed)."""
        sel = self._sel
        if sel is None:
            return
        for fd in (results_fd, sentinel, self._registered.pop(slot, None)):
            if fd is None:
                continue
            with contextlib.suppress(KeyError, ValueError, OSError):  # not registered, or closed
                sel.unregister(fd)
        with self._writers_lock:
            self._writers.discard(slot)

    def want_write(self, slot: int) -> None:
        """``slot``'s task pipe holds buffered output: flush it when it has room."""
        with self._writers_lock:
            self._writers.add(slot)
        self.wakeup()

    # --------------------------------------------------------------- waiting
    def wakeup(self) -> None:
        """Make a concurrent or the next ``select`` return; any thread."""
        with self._wake_lock:
            if self._wake_pending or self._wake_w is None:
                return
            self._wake_pending = True
            with contextlib.suppress(OSError):  # the pipe is closed: nothing to wake
                os.write(self._wake_w, b"x")

    def select(self, timeout: float, flush: Callable[[int], bool],
               task_fd: Callable[[int], Optional[int]], spin: bool = False
               ) -> List[Tuple[str, int]]:
        """Wait up to ``timeout`` seconds; what happened, as ``("result" | "exit", slot)``.

        Args:
            timeout (float): seconds.
            flush (callable): ``flush(slot)`` writes what the task pipe takes;
                True when nothing is left (or the worker is gone).
            task_fd (callable): ``task_fd(slot)``: the task pipe's descriptor,
                None once the worker is gone or its pipes are closed.
            spin (bool): spin for a moment first, while waits are short (the
                polling thread is the one waiting for the results).

        Returns:
            list: in the selector's order; writes and wake-ups are handled here.
        """
        sel = self._sel
        if sel is None:
            return []
        self._update_writers(sel, flush, task_fd)
        if spin:
            ready = self._spinner.wait(lambda: sel.select(0), sel.select, timeout)
        else:
            ready = sel.select(timeout)
        out: List[Tuple[str, int]] = []
        for key, _mask in ready:
            kind, slot = key.data
            if kind == "wake":
                # Reset before draining, so no wakeup is lost; no lock here: a
                # Ctrl-C landing while this thread held one would deadlock.
                self._wake_pending = False
                try:
                    while self._wake_r is not None and os.read(self._wake_r, 4096):
                        pass
                except (BlockingIOError, OSError):
                    pass
            elif kind == "write":
                if flush(slot):
                    with self._writers_lock:
                        self._writers.discard(slot)
            else:
                out.append((kind, slot))
        return out

    def _update_writers(self, sel: selectors.BaseSelector, flush: Callable[[int], bool],
                        task_fd: Callable[[int], Optional[int]]) -> None:
        with self._writers_lock:
            want = set(self._writers)
        for slot in want - self._registered.keys():
            fd = task_fd(slot)
            if fd is None or flush(slot):
                with self._writers_lock:
                    self._writers.discard(slot)
                continue
            sel.register(fd, selectors.EVENT_WRITE, ("write", slot))
            self._registered[slot] = fd
        for slot in self._registered.keys() - want:
            fd = self._registered.pop(slot)
            if task_fd(slot) == fd:  # not when closed: the number may be reused
                with contextlib.suppress(KeyError, ValueError):  # not registered now
                    sel.unregister(fd)

    # ------------------------------------------------------------------- end
    def close(self) -> None:
        """Close the selector and the wake-up pipe (``wakeup`` does nothing after)."""
        if self._sel is not None:
            with contextlib.suppress(Exception):  # closing never raises: an abort goes on
                self._sel.close()
            self._sel = None
        with self._wake_lock:
            for fd in (self._wake_r, self._wake_w):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._wake_r = self._wake_w = None
