"""The caller's side of one worker process of the process back-end: its pipes,
what the pipe could not take yet, and what is known of its state; and the
cleanup that kills and reaps every worker (``kill_all``, the back-end's finalizer).

Separate from [`process`][easycore.common.parallel.backends.process], which
starts, supervises and ends the workers these describe.
"""

from __future__ import annotations

import contextlib
import select
import threading
import time

from .._os import inherit, lifeline, stacks, zygote
from ..transport import shm

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, List, Optional, Tuple

    from ..transport.interface import Transport

__all__ = ["WorkerHandle", "kill_all", "quietly"]


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


def quietly(fn: Any, *args: Any) -> None:
    """``fn(*args)``, whatever it raises: one step of a cleanup that must never raise
    (at interpreter exit, in ``abort``), where a step that fails must not stop the next."""
    try:  # noqa: SIM105
        fn(*args)
    except Exception:  # noqa: BLE001 -- see the docstring
        pass


def kill_all(handles: List[WorkerHandle], transport: Transport, item_slots: Optional[str],
             inherited: Tuple[inherit.Inherited, ...] = (),
             forker: Optional[zygote.Zygote] = None, grace: float = 2.0) -> None:
    """Kill and reap every worker, then release their leftovers; never raises."""
    for ref in inherited:
        inherit.release(ref)  # no later fork needs it: let the program go
    below: List[tuple] = []
    for h in handles:
        # Expected: an engine still pumping (a pool's coordinator at
        # interpreter exit) must not start replacements for them.
        h.expected_exit = True
        if h.started() and not h.gone:
            try:
                below += lifeline.descendants(h.process.pid)  # what it started goes too
                h.process.kill()
            except Exception:  # noqa: BLE001 -- never raises (see quietly): the others go on
                pass
    quietly(lifeline.kill_pids, below)
    deadline = time.monotonic() + grace
    for h in handles:
        if h.started() and not h.gone:
            quietly(h.process.join, max(0.0, deadline - time.monotonic()))
    if forker is not None:
        # Last: closing it kills what it forked, before their own children
        # could be found (expected_exit above: no replacement comes meanwhile).
        quietly(forker.close)
    quietly(lifeline.retire_launcher)  # its last children gone: no thread stays behind
    quietly(transport.cleanup)
    if item_slots is not None:
        quietly(shm.release, item_slots)
