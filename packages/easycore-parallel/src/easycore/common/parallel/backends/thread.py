"""The thread back-end: workers are threads of the caller's process (``backend="thread"``).

The same engine, jobs and errors as with processes, without pickling:
items, functions and results are handed over as they are, so anything
works, closures and open files included. Threads share the GIL, so this pays
off for work that releases it (I/O, NumPy, torch) or waits (network calls).

What differs from processes, and why:

* Each worker still gets its own copy of ``cfg`` (a deep copy), so hooks
  behave as with processes.
* A thread cannot be killed. A task past its ``task_timeout`` still fails
  with [`TaskTimeoutError`][easycore.common.parallel.TaskTimeoutError] and a
  fresh thread takes its place at once, but the stuck thread runs on until
  its task returns, then exits without delivering anything.
* Nothing dies the way a process does: a hook's exception is the only
  failure, and ``cpu_threads`` does not apply (one process, one set of
  library thread pools).
"""

from __future__ import annotations

import copy
import os
import queue
import threading

from .._os import interrupts, stacks
from .._os.stacks import Stack
from ..errors import WorkerError
from ..options import check_options
from ..transport.interface import DirectTransport
from ..worker.executor import WorkerContext, WorkerHandler
from ..worker.protocol import RunChunk, StopWorker, WorkerFailed
from ..worker.slots import ItemSlot, ItemSlots
from .base import Backend, BackendSpec, ChannelBroken, WorkerExited, wait_ended, wait_ready

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Dict, Iterable, List, Optional, Tuple

__all__ = ["ThreadBackend"]

_WAKE = object()


class _Slot:
    __slots__ = ("inbox", "index", "thread", "token")

    def __init__(self, index: int) -> None:
        self.index = index
        self.thread: Optional[threading.Thread] = None
        self.inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.token: Optional[object] = None  # the running thread's; None: abandoned


class ThreadBackend(Backend):
    """Runs each device's worker in a thread of this process."""

    takes_no_cfg = True

    def __init__(self, spec: BackendSpec) -> None:
        """
        Args:
            spec (BackendSpec): the program, devices, cfg and policy.
        """
        self.devices = list(spec.devices)
        self.transport = DirectTransport()
        self._spec = spec
        self._slots = [_Slot(i) for i in range(len(self.devices))]
        self._item_slots = ItemSlots.local(len(self.devices))  # no shared memory needed
        self._out: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False

    @classmethod
    def from_spec(cls, spec: BackendSpec, **options: Any) -> ThreadBackend:
        """As ``Backend.from_spec``; the thread back-end takes no options."""
        check_options("thread", options, ())
        return cls(spec)

    def start(self) -> None:
        for slot in self._slots:
            self._start_one(slot)
        try:
            wait_ready(self, set(range(len(self.devices))), lambda _slot: os.getpid())
        except BaseException:
            self.abort()
            raise

    def _start_one(self, slot: _Slot) -> None:
        token = slot.token = object()
        slot.inbox = queue.SimpleQueue()
        spec = self._spec
        context = spec.contexts[slot.index] if spec.contexts is not None else None
        cfg = copy.deepcopy(spec.cfg)
        ctx = WorkerContext(slot.index, self.devices[slot.index], cfg, context)
        executor = WorkerHandler(spec.program, ctx, self._item_slots)
        inbox = slot.inbox
        thread = threading.Thread(
            target=self._run, args=(slot, token, inbox, executor),
            name=f"easycore-worker-{slot.index}[{self.devices[slot.index]}]", daemon=True,
        )
        with interrupts.deferred():  # a Ctrl-C inside start: held until the thread is known
            thread.start()
            # Set once started: an abort meanwhile (a replacement's start races the
            # pool's terminate) must never join a thread not started yet.
            slot.thread = thread
        if self._closed:  # aborted while it started: it goes too
            slot.token = None
            inbox.put(StopWorker())

    def _run(self, slot: _Slot, token: object, inbox: Any, executor: WorkerHandler) -> None:
        post = self._out.put
        index = slot.index
        ready = executor.start()
        post((index, ready))
        if type(ready) is WorkerFailed:
            return
        while True:
            message = inbox.get()
            if slot.token is not token:
                return  # abandoned or replaced: whatever is left belongs to nobody
            reply = executor.handle(message)
            if slot.token is not token:
                return  # timed out and replaced: its answer is nobody's
            post((index, reply))
            if type(message) is StopWorker:
                post((index, WorkerExited(os.getpid(), 0, True)))
                return
            # Not kept while this worker waits for its next chunk: the caller
            # may have dropped these inputs and results already (bpo-29861).
            del message, reply

    def send(self, worker: int, message: Any) -> None:
        if self._closed:
            raise ChannelBroken(f"worker {worker} is closed")
        slot = self._slots[worker]
        if not isinstance(message, (RunChunk, StopWorker)):
            raise TypeError(f"cannot send {type(message).__name__}")
        slot.inbox.put(message)

    def poll(self, timeout: Optional[float]) -> List[Tuple[int, Any]]:
        out: List[Tuple[int, Any]] = []
        try:
            # Short waits, so that Ctrl-C reaches the waiting thread promptly.
            first = self._out.get(timeout=0.25 if timeout is None else min(timeout, 0.25))
        except queue.Empty:
            return out
        while True:
            if first is not _WAKE:
                out.append(first)
            try:
                first = self._out.get_nowait()
            except queue.Empty:
                return out

    def wakeup(self) -> None:
        self._out.put(_WAKE)

    def item_slot(self, worker: int) -> Optional[ItemSlot]:
        return self._item_slots.read(worker)

    def stacks(self, workers: Optional[Iterable[int]] = None,
               timeout: float = 1.0) -> Dict[int, Optional[Stack]]:
        """Each worker thread's stack, from ``sys._current_frames()``."""
        out: Dict[int, Optional[Stack]] = {}
        for w in range(len(self.devices)) if workers is None else workers:
            slot = self._slots[w]
            alive = slot.token is not None and slot.thread is not None
            out[w] = stacks.of_thread(slot.thread.ident) if alive else None  # type: ignore[union-attr]
        return out

    def kill(self, worker: int) -> None:
        slot = self._slots[worker]
        slot.token = None  # it cannot be stopped; it exits when its task returns
        self._out.put((worker, WorkerExited(os.getpid(), None, True, "abandoned")))

    def restart(self, worker: int) -> None:
        self._start_one(self._slots[worker])

    def abort(self) -> None:
        if self._closed:
            return
        self._closed = True
        for slot in self._slots:
            slot.token = None
            slot.inbox.put(StopWorker())
        for slot in self._slots:
            if slot.thread is not None and slot.thread is not threading.current_thread():
                # a thread stuck in a task cannot be stopped
                interrupts.join(slot.thread, 0.5)

    def stop(self, timeout: Optional[float] = None) -> None:
        if self._closed:
            return
        errors: List[BaseException] = []
        alive = set()
        for slot in self._slots:
            if slot.thread is not None and slot.thread.is_alive() and slot.token is not None:
                slot.inbox.put(StopWorker())
                alive.add(slot.index)

        def handle(index: int, message: Any) -> None:
            if isinstance(message, WorkerFailed) and message.job is None:
                errors.append(WorkerError.from_report(message.report, self.devices[index],
                                                      index, os.getpid()))
            elif isinstance(message, WorkerExited):
                alive.discard(index)

        wait_ended(self, lambda: bool(alive), timeout, handle, errors)
        self.abort()
        if errors:
            raise errors[0]

    @property
    def pids(self) -> List[Optional[int]]:
        return [os.getpid()] * len(self.devices)
