"""The producer side: the hook contract, and the loop a worker process runs.

:class:`ProducerWorker` is the whole producer contract for one device and
knows nothing about processes or pipes: ``init()`` (``setup_worker`` then
``producer_init``), ``run_chunk(items)`` (``producer_work`` once per item) and
``end()`` (``producer_end``), each turning a hook's exception into
:class:`HookFailed` with an :class:`~.errors.ErrorReport`. A Ray actor wraps
exactly this class; the process back-end wraps it with :func:`process_main`.

:func:`process_main` is the entry point of a worker process. Messages are
pickled tuples:

* caller -> worker: ``("chunk", seq, items, feedback)``, ``("stop",)``;
* worker -> caller: ``("ready", pid)``, ``("result", seq, payload, n_items,
  seconds, nbytes)``, ``("error", seq_or_None, ErrorReport)``, ``("ended",)``.

A small inbox thread drains the task pipe into a local queue (so the caller's
feeder never blocks on a busy worker) and watches the parent
(:mod:`.lifeline`); the main thread runs the hooks.
"""

from __future__ import annotations

import os
import pickle
import queue
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, List

from .errors import ErrorReport
from .lifeline import arm_parent_death_signal, parent_gone
from .transport import Transport

__all__ = ["HookFailed", "ProducerWorker", "WorkerSpec", "process_main"]

#: exit code of a worker that found its parent gone
EXIT_PARENT_GONE = 75
_DUMP = pickle.HIGHEST_PROTOCOL


class HookFailed(Exception):
    """A producer hook raised; ``report`` describes the original exception."""

    def __init__(self, report: ErrorReport) -> None:
        super().__init__(report.hook, report.exc_type, report.message)
        self.report = report


class ProducerWorker:
    """Runs one device's producer hooks, with that worker's own ``cfg``."""

    def __init__(self, runner_cls: type, device: str, cfg: Any) -> None:
        """
        Args:
            runner_cls (type): the runner class whose static hooks to call.
            device (str): this worker's device.
            cfg (CfgNode): this worker's copy of the runner's cfg.
        """
        self.runner_cls = runner_cls
        self.device = device
        self.cfg = cfg

    def init(self) -> None:
        """Run ``setup_worker`` then ``producer_init``; raises :class:`HookFailed`."""
        for hook in ("setup_worker", "producer_init"):
            try:
                if hook == "setup_worker":
                    self.runner_cls.setup_worker(self.device)
                else:
                    self.runner_cls.producer_init(self.device, self.cfg)
            except BaseException as exc:
                raise HookFailed(ErrorReport.capture(hook, exc)) from None

    def run_chunk(self, items: List[Any]) -> List[Any]:
        """Call ``producer_work`` on each item, in order.

        Args:
            items (list): a chunk of inputs.

        Returns:
            list: one result per item. Raises :class:`HookFailed`.
        """
        work, device, cfg = self.runner_cls.producer_work, self.device, self.cfg
        try:
            return [work(device, cfg, item) for item in items]
        except BaseException as exc:
            raise HookFailed(ErrorReport.capture("producer_work", exc)) from None

    def end(self) -> None:
        """Run ``producer_end``; raises :class:`HookFailed`."""
        try:
            self.runner_cls.producer_end(self.device, self.cfg)
        except BaseException as exc:
            raise HookFailed(ErrorReport.capture("producer_end", exc)) from None


@dataclass
class WorkerSpec:
    """Everything a worker process needs; pickled under spawn and forkserver."""

    runner_cls: type
    device: str
    index: int
    cfg: Any
    transport: Transport
    owner_pid: int
    start_method: str
    arm_pdeathsig: bool


class _Inbox(threading.Thread):
    """Drains the task pipe into a queue and exits the process if the parent dies."""

    interval = 0.2  # seconds between parent checks while idle

    def __init__(self, conn: Any, expected_ppid: int) -> None:
        super().__init__(name="easycore-parallel-inbox", daemon=True)
        self._conn = conn
        self._expected_ppid = expected_ppid
        self._queue: queue.SimpleQueue = queue.SimpleQueue()

    def run(self) -> None:
        conn, put = self._conn, self._queue.put
        while True:
            try:
                if conn.poll(self.interval):
                    put(conn.recv_bytes())
                    continue
            except (EOFError, OSError):
                # The caller closes the task pipe only after this worker should
                # be gone, or by dying: either way nobody needs us any more.
                os._exit(EXIT_PARENT_GONE)
            if parent_gone(self._expected_ppid):
                os._exit(EXIT_PARENT_GONE)

    def get(self) -> bytes:
        return self._queue.get()


def process_main(spec: WorkerSpec, tasks: Any, results: Any) -> None:
    """Entry point of a worker process.

    Args:
        spec (WorkerSpec): what to run.
        tasks (Connection): read end of this worker's task pipe.
        results (Connection): write end of this worker's result pipe.
    """
    # Ctrl-C reaches the whole process group; the caller decides what happens,
    # workers must not print their own KeyboardInterrupt tracebacks.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if spec.arm_pdeathsig:
        arm_parent_death_signal()
    expected_ppid = os.getppid()
    # Arming after the parent already died would never fire: check once by hand.
    if spec.start_method != "forkserver" and expected_ppid != spec.owner_pid:
        os._exit(EXIT_PARENT_GONE)
    inbox = _Inbox(tasks, expected_ppid)
    inbox.start()

    def post(message: tuple) -> None:
        results.send_bytes(pickle.dumps(message, protocol=_DUMP))

    transport = spec.transport
    worker = ProducerWorker(spec.runner_cls, spec.device, spec.cfg)
    try:
        transport.bind_worker(spec.index)
        worker.init()
    except HookFailed as failed:
        post(("error", None, failed.report))
        return
    post(("ready", os.getpid()))

    while True:
        data = inbox.get()
        start = time.perf_counter()
        try:
            message = pickle.loads(data)
        except BaseException as exc:
            post(("error", None, ErrorReport.capture("receiving items", exc)))
            continue
        if message[0] != "chunk":  # ("stop",)
            break
        _, seq, items, feedback = message
        if feedback is not None:
            transport.on_feedback(feedback)
        try:
            out = worker.run_chunk(items)
        except HookFailed as failed:
            post(("error", seq, failed.report))
            continue
        try:
            payload, nbytes = transport.encode(out)
        except BaseException as exc:
            post(("error", seq, ErrorReport.capture("sending results", exc)))
            continue
        del out  # shared-memory results are copied out; free the originals now
        elapsed = time.perf_counter() - start
        post(("result", seq, payload, len(items), elapsed, nbytes + len(data)))

    try:
        worker.end()
    except HookFailed as failed:
        post(("error", None, failed.report))
        return
    post(("ended",))
