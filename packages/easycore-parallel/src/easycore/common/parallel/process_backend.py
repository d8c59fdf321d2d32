"""The process back-end: one worker process per device, two pipes each.

Why pipes per worker rather than a shared queue: a shared queue's lock is
left held (and its stream torn) when a worker dies in the middle of a read,
which is how classic pools hang. Here each worker owns its task and result
pipes, and the caller waits with :func:`multiprocessing.connection.wait` on
every result pipe *and* every process sentinel at once, so a hook's error or
a worker's death is seen the moment it happens, whatever the others do.

Workers are not daemonic (a producer may start its own processes, e.g. data
loader workers); a ``multiprocessing.util.Finalize`` with an exit priority
kills them at interpreter exit, before multiprocessing would join them, and
when the back-end is garbage-collected without being stopped. Workers kill
themselves if the caller's process dies (:mod:`.lifeline`).

Seams used here, provided by the runner: the multiprocessing context
(``BaseRunner.get_mp_context``), the result :class:`~.transport.Transport`
(``BaseRunner.make_transport``) and the runner class whose hooks, including
``setup_worker``, the workers call.
"""

from __future__ import annotations

import os
import pickle
import threading
import time
from multiprocessing import connection, util
from multiprocessing.context import BaseContext
from typing import Any, List, Optional

from .backend import Backend, ChannelBroken, Result
from .errors import ParallelError, WorkerDiedError, WorkerError
from .transport import Transport
from .worker import WorkerSpec, process_main

__all__ = ["ProcessBackend"]

_DUMP = pickle.HIGHEST_PROTOCOL
_STOP = pickle.dumps(("stop",), protocol=_DUMP)


class _Handle:
    """The caller's side of one worker."""

    def __init__(self, index: int, device: str, process: Any, tasks: Any, results: Any) -> None:
        self.index = index
        self.device = device
        self.process = process
        self.tasks = tasks  # write end of the task pipe
        self.results = results  # read end of the result pipe
        self.pid: Optional[int] = None
        self.ready = False
        self.ended = False  # answered a stop
        self.reported = False  # sent an error report, so its exit is no surprise
        self.gone = False  # exited and reaped
        # Serialises sends from the feeder with the close in abort(): a closed
        # pipe's file descriptor number may be reused, a send must never race it.
        self.send_lock = threading.Lock()

    def started(self) -> bool:
        return self.process.pid is not None


def _kill_all(handles: List[_Handle], transport: Transport, grace: float = 2.0) -> None:
    """Kill and reap every worker, then release their leftovers; never raises."""
    for h in handles:
        if h.started():
            try:
                h.process.kill()  # SIGKILL: workers hold nothing that needs a tidy exit
            except Exception:
                pass
    deadline = time.monotonic() + grace
    for h in handles:
        if h.started():
            try:
                h.process.join(max(0.0, deadline - time.monotonic()))
            except Exception:
                pass
    try:
        transport.cleanup()
    except Exception:
        pass


class ProcessBackend(Backend):
    """Runs each device's producer hooks in its own process."""

    #: seconds to wait for a stopped (or killed) worker to exit before killing it
    join_timeout = 5.0
    #: longest single wait, so that signals are handled promptly
    tick = 0.25

    def __init__(
        self,
        runner_cls: type,
        devices: List[str],
        cfg: Any,
        context: BaseContext,
        transport: Transport,
    ) -> None:
        """
        Args:
            runner_cls (type): the runner class; its static hooks run in the workers.
            devices (list[str]): one worker per entry.
            cfg (CfgNode): each worker gets its own copy.
            context (BaseContext): the multiprocessing context to start workers with.
            transport (Transport): how results travel back.
        """
        self.devices = list(devices)
        self._runner_cls = runner_cls
        self._cfg = cfg
        self._ctx = context
        self._transport = transport
        self._handles: List[_Handle] = []
        self._wake_r = self._wake_w = None
        self._wake_lock = threading.Lock()
        self._wake_pending = False
        self._finalizer = None
        self._closed = False

    @classmethod
    def from_runner(cls, runner: Any, cfg: Any) -> ProcessBackend:
        """Build from a runner's seams: ``get_mp_context()`` and ``make_transport()``.

        Args:
            runner (BaseRunner):
            cfg (CfgNode):

        Returns:
            ProcessBackend:
        """
        return cls(type(runner), runner.devices, cfg, runner.get_mp_context(),
                   runner.make_transport())

    # ----------------------------------------------------------------- start
    def start(self) -> None:
        self._transport.prepare()
        method = self._ctx.get_start_method()
        # PR_SET_PDEATHSIG fires when the *thread* that forked the worker ends;
        # only the main thread (or the single-threaded forkserver) lives as
        # long as the process. Elsewhere the polling lifeline alone is used.
        arm = method == "forkserver" or threading.current_thread() is threading.main_thread()
        self._wake_r, self._wake_w = self._ctx.Pipe(duplex=False)
        self._finalizer = util.Finalize(
            self, _kill_all, args=(self._handles, self._transport), exitpriority=10
        )
        try:
            for index, device in enumerate(self.devices):
                self._start_one(index, device, method, arm)
            while not all(h.ready for h in self._handles):
                self._pump(None)
        except BaseException:
            self.abort()
            raise

    def _start_one(self, index: int, device: str, method: str, arm: bool) -> None:
        task_r, task_w = self._ctx.Pipe(duplex=False)
        res_r, res_w = self._ctx.Pipe(duplex=False)
        spec = WorkerSpec(
            self._runner_cls, device, index, self._cfg.copy(), self._transport,
            os.getpid(), method, arm,
        )
        process = self._ctx.Process(
            target=process_main,
            args=(spec, task_r, res_w),
            name=f"easycore-parallel-{index}[{device}]",
            daemon=False,
        )
        handle = _Handle(index, device, process, task_w, res_r)
        self._handles.append(handle)
        try:
            process.start()
        finally:
            # The worker's ends must live only in the worker: then its death
            # shows as EOF / EPIPE, and later forks do not inherit them.
            task_r.close()
            res_w.close()
        handle.pid = process.pid

    # ------------------------------------------------------------ per chunk
    def submit(self, worker: int, seq: int, items: List[Any]) -> None:
        feedback = self._transport.feedback(worker)
        data = pickle.dumps(("chunk", seq, items, feedback), protocol=_DUMP)
        h = self._handles[worker]
        with h.send_lock:
            if h.tasks is None:
                raise ChannelBroken(f"worker {worker} on device {h.device!r} is closed")
            try:
                h.tasks.send_bytes(data)
            except OSError as exc:
                raise ChannelBroken(
                    f"cannot send to worker {worker} on device {h.device!r}: {exc}"
                ) from exc

    def poll(self, timeout: Optional[float]) -> List[Result]:
        return self._pump(timeout)

    def wakeup(self) -> None:
        with self._wake_lock:
            if self._wake_pending or self._wake_w is None:
                return
            self._wake_pending = True
            try:
                self._wake_w.send_bytes(b"")
            except OSError:
                pass

    def _pump(self, timeout: Optional[float]) -> List[Result]:
        """Wait for messages or exits; return results, raise on errors and deaths."""
        by_conn, by_sentinel = {}, {}
        for h in self._handles:
            if not h.gone:
                by_conn[id(h.results)] = h
                by_sentinel[h.process.sentinel] = h
        waitables = [h.results for h in by_conn.values()] + list(by_sentinel)
        waitables.append(self._wake_r)
        out: List[Result] = []
        # Never block for long: a Ctrl-C delivered to another thread (a BLAS
        # pool, the feeder) only reaches this one when it next runs Python code.
        tick = self.tick if timeout is None else min(timeout, self.tick)
        for obj in connection.wait(waitables, tick):
            if obj is self._wake_r:
                # Reset before draining, so no wakeup is lost; no lock here: a
                # Ctrl-C landing while this thread held one would deadlock abort().
                self._wake_pending = False
                while self._wake_r.poll():
                    self._wake_r.recv_bytes()
            elif isinstance(obj, int):  # a sentinel: the process has exited
                h = by_sentinel[obj]
                self._drain(h, out)  # what it said before dying comes first
                self._reap(h)
            else:
                self._drain(by_conn[id(obj)], out)
        return out

    def _drain(self, h: _Handle, out: List[Result]) -> None:
        conn = h.results
        while not h.gone:
            try:
                if not conn.poll():
                    return
                data = conn.recv_bytes()
            except (EOFError, OSError):
                self._reap(h)  # EOF: the worker exited (its messages all read)
                return
            self._handle_message(h, pickle.loads(data), out)

    def _handle_message(self, h: _Handle, message: tuple, out: List[Result]) -> None:
        kind = message[0]
        if kind == "result":
            _, seq, payload, n_items, seconds, nbytes = message
            try:
                results = self._transport.decode(payload)
            except Exception as exc:
                raise ParallelError(
                    f"results of worker {h.index} on device {h.device!r} could not be "
                    f"decoded in the caller: {type(exc).__name__}: {exc}"
                ) from exc
            out.append(Result(h.index, seq, results, n_items, seconds, nbytes))
        elif kind == "ready":
            h.ready, h.pid = True, message[1]
        elif kind == "ended":
            h.ended = True
        elif kind == "error":
            h.reported = True
            raise WorkerError.from_report(message[2], h.device, h.index, h.pid)

    def _reap(self, h: _Handle) -> None:
        if h.gone:
            return
        # EOF can come a moment before the process is reapable.
        h.process.join(self.join_timeout)
        h.gone = True
        if not (h.ended or h.reported):
            raise WorkerDiedError(h.device, h.index, h.pid, h.process.exitcode)

    # ------------------------------------------------------------------ end
    def stop(self, timeout: Optional[float] = None) -> None:
        if self._closed:
            return
        for h in self._handles:
            with h.send_lock:
                try:
                    h.tasks.send_bytes(_STOP)
                except OSError:
                    pass  # already dead: _pump reports it
        deadline = None if timeout is None else time.monotonic() + timeout
        errors: List[BaseException] = []
        try:
            while any(not (h.gone or h.ended or h.reported) for h in self._handles):
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    errors.append(
                        TimeoutError(f"producer_end did not finish within {timeout} s")
                    )
                    break
                try:
                    self._pump(remaining)
                except ParallelError as exc:  # record, and keep ending the others
                    errors.append(exc)
            for h in self._handles:
                if not h.gone:
                    h.process.join(self.join_timeout)
        finally:
            self.abort()  # kills stragglers, releases pipes and shared memory
        if errors:
            raise errors[0]

    def abort(self) -> None:
        if self._closed:
            return
        self._closed = True
        _kill_all(self._handles, self._transport)
        for h in self._handles:
            try:
                while h.results.poll():
                    message = pickle.loads(h.results.recv_bytes())
                    if message[0] == "result":
                        self._transport.discard(message[2])
            except Exception:
                pass  # EOF: drained
            h.results.close()
            with h.send_lock:
                h.tasks.close()
                h.tasks = None
            h.gone = True
        with self._wake_lock:
            for conn in (self._wake_r, self._wake_w):
                if conn is not None:
                    conn.close()
            self._wake_r = self._wake_w = None
        try:
            self._transport.cleanup()  # again: segments discarded above are gone now
        except Exception:
            pass
        if self._finalizer is not None:
            self._finalizer.cancel()

    @property
    def closed(self) -> bool:
        """bool: whether the workers are gone."""
        return self._closed

    @property
    def pids(self) -> List[Optional[int]]:
        return [h.pid for h in self._handles]
