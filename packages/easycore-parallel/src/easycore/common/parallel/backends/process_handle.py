"""The caller's side of one worker process of the process back-end: its pipes,
what the pipe could not take yet, and what is known of its state.

Separate from [`process`][easycore.common.parallel.backends.process], which
starts, supervises and ends the workers these describe.
"""

from __future__ import annotations

import contextlib
import select
import threading

from .._os import stacks

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Optional

__all__ = ["WorkerHandle"]


class WorkerHandle:
    """The caller's side of one worker process."""

    def __init__(self, slot: int, device: str, process: Any, tasks: Any, results: Any,
                 dump: Optional[stacks.DumpFile] = None, oom_base: Optional[int] = None) -> None:
        """``oom_base``: the out-of-memory killer's count read as the worker starts
        (``oom.kills()``; read once for a batch of workers started together)."""
        self.slot = slot
        self.device = device
        self.process = process
        self.tasks = tasks  # write end of the task pipe (non-blocking)
        self.task_fd = tasks.fileno()
        self.results = results  # read end of the result pipe
        # Connection.poll() builds a selector on every call (~20 us); one poll
        # object per pipe makes "is there another message?" one system call.
        self.poller: Any = None
        if hasattr(select, "poll"):
            self.poller = select.poll()
            self.poller.register(results.fileno(), select.POLLIN)
        self.pid: Optional[int] = None
        self.oom_base = oom_base  # the out-of-memory killer's count as it starts
        self.out = bytearray()  # framed bytes the pipe could not take yet
        self.ready = False
        self.ended = False  # answered a stop
        self.failed = False  # reported an init/end error: its exit is no surprise
        self.expected_exit = False  # we stopped or killed it
        self.gone = False  # exited and reaped
        self.closed = False
        self._exitcode: Optional[int] = None  # once the process object is closed
        # Serialises sends with close(): a closed pipe's file descriptor number
        # may be reused, a write must never race it.
        self.lock = threading.Lock()
        #: where its stacks are dumped when asked (None: no POSIX signals)
        self.dump = dump

    def started(self) -> bool:
        return self.process is not None and self.process.pid is not None

    def readable(self) -> bool:
        """Whether a message (or EOF) waits on the result pipe (never blocks)."""
        if self.poller is None:
            return self.results.poll()
        return bool(self.poller.poll(0))

    def close(self) -> None:
        """Close the pipes; and, once the worker is reaped, its process object's own
        descriptors (its sentinel), now rather than when it is collected: a pool
        replacing workers for days, or an error whose traceback holds the
        back-end, holds no descriptor of a worker that is gone."""
        with self.lock:
            if not self.closed:
                self.closed = True
                for conn in (self.tasks, self.results):
                    with contextlib.suppress(OSError):
                        conn.close()
                self.out.clear()
                if self.dump is not None:
                    self.dump.close()
            if self.gone and self.process is not None:
                code = self.process.exitcode
                try:
                    self.process.close()
                except ValueError:  # still running (a join that timed out): collected later
                    return
                self.process, self._exitcode = None, code

    @property
    def exitcode(self) -> Optional[int]:
        """int or None: the worker's exit code (negative: the signal), None while it runs."""
        return self._exitcode if self.process is None else self.process.exitcode
