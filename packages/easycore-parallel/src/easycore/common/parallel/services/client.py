"""The client side of the process back-end: one connection to a local service.

A [`ProcessChannel`][easycore.common.parallel.services.client.ProcessChannel]
is one authenticated connection (``multiprocessing.connection`` over the
service's Unix socket) with a reader thread. Calls are sent by the calling
thread (several threads may share a channel) and tagged with an id; the
reader receives every reply, decodes it and resolves that call's future. So
``call_async`` needs no thread of its own, and the reader is also what
notices, within a fraction of a second, that the service is gone: EOF on the
connection, or (for calls in flight) its process no longer running. Then
every waiting call fails with
[`ServiceDiedError`][easycore.common.parallel.services.ServiceDiedError].

The reader never takes a lock a sender holds: a sender blocked on a full
socket must not stop the replies that will unblock it.
"""

from __future__ import annotations

import itertools
import os
import pickle
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing import AuthenticationError, Pipe, connection
from typing import Any, Callable, Deque, Dict, Optional

from ..errors import ParallelError, WorkerError
from . import wire
from .errors import ServiceClosedError, ServiceDiedError
from .naming import pid_alive, pid_namespace

__all__ = ["ProcessTarget", "ProcessChannel"]


@dataclass(frozen=True)
class ProcessTarget:
    """How to reach a local service (what a pickled handle carries).

    The auth key is in here: a handle is a credential for its service.
    """

    address: str
    authkey: bytes
    pid: int
    device: str
    label: str
    pidns: Optional[int]

    def alive(self) -> bool:
        """Whether the service's process runs (True when this process cannot tell)."""
        if self.pidns is not None and self.pidns != pid_namespace():
            return True  # another pid namespace: its pids mean nothing here
        return pid_alive(self.pid)

    def died(self, reason: str) -> ServiceDiedError:
        return ServiceDiedError(self.label, self.device, self.pid, None, reason)

    def open_channel(self, transport_class: type) -> ProcessChannel:
        return ProcessChannel(self, transport_class)


class _Call:
    __slots__ = ("future", "method", "deadline", "timeout")

    def __init__(self, future: Future, method: str, deadline: Optional[float],
                 timeout: Optional[float]) -> None:
        self.future = future
        self.method = method
        self.deadline = deadline
        self.timeout = timeout


class ProcessChannel:
    """One connection to a local service.

    Args:
        target (ProcessTarget): the service.
        transport_class (type): a [`Transport`][easycore.common.parallel.Transport]
            class, e.g. ``SharedMemoryTransport`` or ``TensorTransport``.
    """

    #: seconds between checks that the service still runs while calls wait
    tick = 0.25
    #: the reader's longest wait while no call waits (a call sent meanwhile is
    #: checked after at most this plus ``tick``: within the promised 2 s)
    idle_tick = 0.5
    #: seconds to wait for the service's answer to our hello
    hello_timeout = 30.0

    def __init__(self, target: ProcessTarget, transport_class: type) -> None:
        self.target = target
        self.pid = os.getpid()  # a forked child must not use (or close) our connection
        self._conn = self._connect()
        try:
            reply = transport_class()
            reply.prepare()
            hello = (wire.HELLO, reply, wire.tracker_identity(), os.getpid())
            try:
                self._conn.send_bytes(wire.dumps(hello))
            except OSError as exc:  # a closing service turns new clients away
                raise self._gone(f"the connection closed ({type(exc).__name__})") from None
            _, request, _info = self._welcome()
        except BaseException:
            self._conn.close()
            raise
        request.bind_worker(0)
        self._reply = reply  # caller role: decodes results
        self._request = request  # worker role: encodes arguments
        self._ids = itertools.count()
        self._pending: Dict[int, _Call] = {}
        self._lock = threading.Lock()  # _pending, _failure, _closed
        self._send_lock = threading.Lock()
        self._feedback: Deque[Any] = deque()  # from the reader, applied by senders
        self._failure: Optional[Callable[[], BaseException]] = None
        self._closed = False
        self._wake_r, self._wake_w = Pipe(duplex=False)
        self._reader = threading.Thread(
            target=self._read_loop, name="easycore-service-client", daemon=True
        )
        self._reader.start()

    def _connect(self) -> Any:
        t = self.target
        try:
            return connection.Client(t.address, family="AF_UNIX", authkey=t.authkey)
        except AuthenticationError as exc:
            raise ParallelError(f"{t.label} refused this handle: wrong auth key ({exc})") from None
        except (OSError, EOFError) as exc:
            raise self._gone(f"cannot connect ({type(exc).__name__}: {exc})") from None

    def _gone(self, reason: str) -> BaseException:
        """The error for a service that cannot be reached: died, or closed."""
        t = self.target
        if t.alive():
            return ServiceClosedError(f"{t.label} is closing or closed: {reason}")
        if os.path.exists(t.address):  # nobody cleaned up: it did not end by close()
            return t.died(reason)
        return ServiceClosedError(f"{t.label} is gone (closed, or its owner ended): {reason}")

    def _welcome(self) -> tuple:
        deadline = time.monotonic() + self.hello_timeout
        while not self._conn.poll(self.tick):
            if not self.target.alive():
                raise self.target.died("its process is gone")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.target.label} did not answer within "
                                   f"{self.hello_timeout} s")
        try:
            message = pickle.loads(self._conn.recv_bytes())
        except (EOFError, OSError) as exc:
            raise self._gone(f"the connection closed ({type(exc).__name__})") from None
        if message[0] == wire.CLOSED:
            raise ServiceClosedError(f"{self.target.label} is closing")
        return message

    # ------------------------------------------------------------- calls
    def submit(self, method: str, args: tuple, kwargs: Dict[str, Any],
               timeout: Optional[float]) -> Future:
        """Send one call; its future resolves when the reply comes.

        Raises:
            ServiceClosedError, ServiceDiedError: the channel is unusable.
            TypeError, pickle.PicklingError: the arguments cannot be sent.
        """
        future: Future = Future()
        future.set_running_or_notify_cancel()  # sent calls cannot be cancelled
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._send_lock:
            self._check()
            while self._feedback:
                self._request.on_feedback(self._feedback.popleft())
            payload, _ = self._request.encode_results([(args, kwargs)])
            call_id = next(self._ids)
            with self._lock:
                self._check()
                self._pending[call_id] = _Call(future, method, deadline, timeout)
            message = (wire.CALL, call_id, method, payload, self._reply.feedback(0))
            try:
                self._conn.send_bytes(wire.dumps(message))
            except OSError:
                pass  # the reader sees the EOF and fails the call
        if deadline is not None:
            self._wake()  # the reader may be waiting without a deadline
        return future

    def call(self, method: str, args: tuple, kwargs: Dict[str, Any],
             timeout: Optional[float]) -> Any:
        return self.submit(method, args, kwargs, timeout).result()

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure()
        if self._closed:
            raise ServiceClosedError(f"this handle to {self.target.label} is closed")

    # ------------------------------------------------------------ reader
    def _read_loop(self) -> None:
        conn, label = self._conn, self.target.label
        next_check = time.monotonic() + self.tick
        try:
            while True:
                ready = connection.wait([conn, self._wake_r], self._wait_time())
                if self._closed:
                    return
                if self._wake_r in ready:
                    while self._wake_r.poll():
                        self._wake_r.recv_bytes()
                if conn in ready:
                    try:
                        data = conn.recv_bytes()
                    except (EOFError, OSError):
                        self._died("its connection closed")
                        return
                    if not self._dispatch(pickle.loads(data)):
                        return
                now = time.monotonic()
                self._expire(now)
                if self._pending and now >= next_check:
                    next_check = now + self.tick
                    if not self.target.alive():
                        self._died("its process is gone")
                        return
        except BaseException as exc:  # a bug here must never leave callers waiting
            message = f"the connection to {label} failed: {type(exc).__name__}: {exc}"
            self._fail(lambda: ParallelError(message))

    def _wait_time(self) -> Optional[float]:
        if not self._pending:
            # Nothing waits; a call sent now does not wake us (that would cost
            # every call a system call), so come back soon to check on it.
            return self.idle_tick
        now, wait = time.monotonic(), self.tick
        for call in list(self._pending.values()):
            if call.deadline is not None:
                wait = min(wait, max(0.0, call.deadline - now))
        return wait

    def _dispatch(self, message: tuple) -> bool:
        kind = message[0]
        if kind == wire.CLOSED:
            label = self.target.label
            self._fail(lambda: ServiceClosedError(f"{label} was closed by its owner"))
            return False
        _, call_id, body, feedback = message
        if feedback:
            self._feedback.append(feedback)
        with self._lock:
            call = self._pending.pop(call_id, None)
        if kind == wire.OK:
            try:
                # decoded even if nobody waits: that recycles its segment
                value = self._reply.decode_results(0, body)[0]
            except BaseException as exc:
                if call is not None:
                    call.future.set_exception(ParallelError(
                        f"the result of {call.method}() of {self.target.label} could not be "
                        f"unpickled here: {type(exc).__name__}: {exc}"
                    ))
                return True
            if call is not None:
                call.future.set_result(value)
        elif call is not None:
            t = self.target
            call.future.set_exception(WorkerError.from_report(body, t.device, 0, t.pid))
        return True

    def _expire(self, now: float) -> None:
        expired = []
        with self._lock:
            for call_id, call in list(self._pending.items()):
                if call.deadline is not None and call.deadline <= now:
                    expired.append(self._pending.pop(call_id))
        for call in expired:  # its late reply is dropped when it comes
            call.future.set_exception(TimeoutError(
                f"{call.method}() of {self.target.label} did not return within {call.timeout} s"
            ))

    def _died(self, reason: str) -> None:
        target = self.target
        self._fail(lambda: target.died(reason))
        # Nobody else will unlink the shared memory we lent the dead service
        # (names of its prefix): a fresh instance of its transport sweeps them.
        _cleanup(pickle.loads(pickle.dumps(self._request)))

    def _fail(self, make_error: Callable[[], BaseException]) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = make_error
            calls, self._pending = list(self._pending.values()), {}
        for call in calls:
            call.future.set_exception(make_error())

    def _wake(self) -> None:
        try:
            self._wake_w.send_bytes(b"")
        except OSError:
            pass

    # ------------------------------------------------------------- close
    @property
    def failed(self) -> bool:
        """bool: whether the service was found closed or dead."""
        return self._failure is not None

    def close(self) -> None:
        """Disconnect; calls still waiting fail with ``ServiceClosedError``. Idempotent."""
        if os.getpid() != self.pid:
            return  # a forked copy: the connection and segments are the parent's
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._failure is None:
            with self._send_lock:
                try:
                    self._conn.send_bytes(wire.dumps((wire.BYE,)))
                except OSError:
                    pass
        self._wake()
        if threading.current_thread() is not self._reader:
            self._reader.join(5.0)
        label = self.target.label
        self._fail(lambda: ServiceClosedError(f"this handle to {label} is closed"))
        for conn in (self._conn, self._wake_r, self._wake_w):
            conn.close()
        _cleanup(self._reply)


def _cleanup(transport: Any) -> None:
    try:
        transport.cleanup()
    except Exception:
        pass
