"""The client side of the process back-end: one connection to a local service.

A [`ProcessChannel`][easycore.common.parallel.services.client.ProcessChannel]
is one authenticated connection (a
[`Link`][easycore.common.parallel.connection.client.Link] over the
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

A call's ``timeout`` bounds the whole call: opening the channel (connect,
authentication, hello) runs under its deadline
([`connect`][easycore.common.parallel.connection.client.connect]), so does
sending it (what the socket does not take by then stays queued, whole, and
the reader thread sends it when it can: a stopped service holds the call
no longer than its timeout), and so does waiting for the reply. A send
interrupted inside the socket call (Ctrl-C while a large argument goes
out) leaves the stream in an unknown state: that call fails, and the
channel is *reset* (shut down, so the service drops that connection
alone); the handle opens a new one on its next call.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import select
import threading
import time
from collections import deque
from dataclasses import dataclass

from .._future import Future
from .._os import interrupts
from ..connection.address import process_alive, wait_gone
from ..connection.auth import AuthenticationError
from ..connection.client import connect
from ..errors import ParallelError, ServiceClosedError, ServiceDiedError, WorkerError
from ..transport import shm
from . import wire
from .byvalue import encode, wrap_call
from .dispatch import REF

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable, Deque, Dict, Iterable, List, Optional

__all__ = ["ProcessChannel", "ProcessTarget"]


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
        return process_alive(self.pid, self.pidns)

    def died(self, reason: str) -> ServiceDiedError:
        return ServiceDiedError(self.label, self.device, self.pid, None, reason)

    def open_channel(self, transport_class: type,
                     deadline: Optional[float] = None) -> ProcessChannel:
        return ProcessChannel(self, transport_class, deadline)

    def wait_dead(self, grace: float) -> bool:
        """Whether the process ends within ``grace`` seconds (it may be being killed)."""
        return wait_gone(self.pid, self.pidns, grace)


class _Call:
    __slots__ = ("deadline", "future", "method", "timeout")

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
    #: seconds ``close`` tries to send its goodbye
    bye_timeout = 2.0

    def __init__(self, target: ProcessTarget, transport_class: type,
                 deadline: Optional[float] = None) -> None:
        self.target = target
        self.pid = os.getpid()  # a forked child must not use (or close) our connection
        reply = transport_class()
        reply.prepare()
        try:
            self._link, request = self._open(reply, deadline)
        except BaseException:
            _cleanup(reply)
            raise
        request.bind_worker(0)
        self._reply = reply  # caller role: decodes results
        self._request = request  # worker role: encodes arguments
        self._ids = itertools.count()
        self._pending: Dict[int, _Call] = {}
        self._lock = threading.Lock()  # _pending, _failure, _closed
        self._send_lock = threading.Lock()
        self._feedback: Deque[Any] = deque()  # from the reader, applied by senders
        self._releases: Deque[int] = deque()  # remote references to release
        self._failure: Optional[Callable[[], BaseException]] = None
        self._closed = False
        #: True once an interrupted send left this connection unusable
        self.reset = False
        self._reader = threading.Thread(
            target=self._read_loop, name="easycore-service-client", daemon=True
        )
        fds: List[int] = []
        try:
            # A Ctrl-C in here is held until the reader runs: then (as after any
            # failure here) this connection closes again, and nothing is left open.
            with interrupts.deferred():
                fds.extend(os.pipe())
                for fd in fds:
                    os.set_blocking(fd, False)
                self._wake_r, self._wake_w = fds
                self._reader.start()
        except BaseException:
            if self._reader.ident is not None:  # it runs: close ends it
                self.close()
            else:
                _release(self._link, fds, reply)
            raise

    def _open(self, reply: Any, deadline: Optional[float]) -> tuple:
        """Connect, authenticate and say hello, all before ``deadline``."""
        t = self.target
        hello_deadline = time.monotonic() + self.hello_timeout
        what: Optional[str] = None  # None: the caller's timeout, with its own message
        if deadline is None or deadline > hello_deadline:
            deadline = hello_deadline
            what = f"{t.label} did not answer within {self.hello_timeout} s"

        def check() -> None:
            if not t.alive():
                raise t.died("its process is gone")

        hello = wire.dumps(wire.Hello(reply, shm.tracker_identity(), os.getpid()))
        try:
            link, data = connect(t.address, t.authkey, hello, deadline, check)
        except TimeoutError:
            raise TimeoutError(what or "connecting timed out") from None
        except AuthenticationError as exc:
            raise ParallelError(f"{t.label} refused this handle: wrong auth key ({exc})") from None
        except (ConnectionRefusedError, FileNotFoundError) as exc:
            raise self._gone(f"cannot connect ({type(exc).__name__}: {exc})") from None
        except (EOFError, OSError) as exc:
            raise self._gone("cannot connect (the connection closed during the handshake: "
                             f"{type(exc).__name__})") from None
        try:
            welcome = wire.loads(data)
            if type(welcome) is wire.Closed:
                raise ServiceClosedError(f"{t.label} is closing")
            if type(welcome) is not wire.Welcome:
                raise ParallelError(f"{t.label} answered the hello with "
                                    f"{type(welcome).__name__}, not Welcome")
        except BaseException:
            link.close()
            raise
        return link, welcome.transport

    #: seconds a service whose connection failed may take to finish dying
    death_grace = 2.0

    def _gone(self, reason: str) -> BaseException:
        """The error for a service that cannot be reached: died, or closed.

        A service closed by its owner removes its socket before it stops
        listening; one that is killed leaves it. So a socket that is still
        there means a death, once the process (which may be being killed
        right now) is seen gone.
        """
        t = self.target
        if os.path.exists(t.address):
            if t.wait_dead(self.death_grace):
                return t.died(reason)
            return ServiceClosedError(f"{t.label} is not accepting connections: {reason}")
        if t.alive():
            return ServiceClosedError(f"{t.label} is closing or closed: {reason}")
        return ServiceClosedError(f"{t.label} is gone (closed, or its owner ended): {reason}")

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
            payload, _ = encode(self._request, wrap_call(args, kwargs))
            call_id = next(self._ids)
            with self._lock:
                self._check()
                self._pending[call_id] = _Call(future, method, deadline, timeout)
            call = wire.Call(call_id, method, payload, self._reply.feedback(0))
            self._send(call_id, wire.dumps(call), deadline)
        if deadline is not None:
            self._wake()  # the reader may be waiting without a deadline
        return future

    def _send(self, call_id: int, data: bytes, deadline: Optional[float]) -> None:
        """Send one frame (the send lock held) by ``deadline``; the reader sends the rest.

        An interrupted send resets the channel.
        """
        try:
            if not self._link.send(data, deadline):
                self._wake()  # the service takes no more now: the reader sends the rest
        except OSError:
            pass  # the reader sees the EOF and fails the call
        except BaseException:
            # Ctrl-C inside the socket call: how much of the frame went out is
            # not known, and the rest of the stream would be read as the end
            # of it. Fail this call, shut the connection down (the service
            # drops it, half frame and all) and let the handle reconnect on
            # its next call.
            with self._lock:
                self._pending.pop(call_id, None)
            self.reset = True
            label = self.target.label
            self._fail(lambda: ParallelError(
                f"the connection to {label} was reset: a send was interrupted"))
            self._link.shutdown()
            raise

    def release(self, ref_id: int) -> None:
        """Release a remote reference soon; takes no lock (a finalizer calls it)."""
        self._releases.append(ref_id)
        self._wake()

    def _send_queued(self) -> bool:
        """Send pending releases and what a sender left queued, unless a sender
        holds the lock (False: try again soon). Never waits for the socket."""
        if not self._send_lock.acquire(blocking=False):
            return False
        try:
            ids: List[int] = []
            while self._releases:
                ids.append(self._releases.popleft())
            with contextlib.suppress(OSError):  # the reader sees the EOF
                if ids and self._failure is None and not self._closed:
                    payload, _ = self._request.encode_results([(("release", ids), {})])
                    call = wire.Call(next(self._ids), REF, payload, self._reply.feedback(0))
                    self._link.send(wire.dumps(call), 0)
                elif self._link.unsent:
                    self._link.flush(0)
        finally:
            self._send_lock.release()
        return True

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
        link, label = self._link, self.target.label
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        watching = select.POLLIN
        poller.register(link.fileno(), watching)
        next_check = time.monotonic() + self.tick
        try:
            while True:
                # The rest of a frame a sender left (its deadline came first) is
                # ours to send; while a sender holds the lock it sends itself.
                mine = link.unsent and not self._send_lock.locked()
                want = select.POLLIN | (select.POLLOUT if mine else 0)
                if want != watching:
                    poller.modify(link.fileno(), want)
                    watching = want
                wait = self._wait_time()
                events = dict(poller.poll(None if wait is None else int(wait * 1000) + 1))
                if self._closed:
                    return
                if self._wake_r in events:
                    _drain(self._wake_r)
                if self._releases or link.unsent:
                    self._send_queued()  # or, the lock busy, at the next turn
                if events.get(link.fileno(), 0) & (select.POLLIN | select.POLLHUP | select.POLLERR):
                    try:
                        link.read_ready()
                    except (ValueError, OSError):
                        link.eof = True
                    data = link.take()
                    while data is not None:
                        if not self._dispatch(wire.loads(data)):
                            return
                        data = link.take()
                    if link.eof:
                        self._died("its connection closed")
                        return
                now = time.monotonic()
                self._expire(now)
                if self._pending and now >= next_check:
                    next_check = now + self.tick
                    if not self.target.alive():
                        self._died("its process is gone")
                        return
        except BaseException as exc:  # noqa: BLE001 - a bug here must never leave callers waiting
            message = f"the connection to {label} failed: {type(exc).__name__}: {exc}"
            self._fail(lambda: ParallelError(message))

    def _wait_time(self) -> Optional[float]:
        if self._releases or (self._link.unsent and self._send_lock.locked()):
            return 0.05  # a sender held the lock: try again soon
        if not self._pending:
            # Nothing waits; a call sent now does not wake us (that would cost
            # every call a system call), so come back soon to check on it.
            return self.idle_tick
        now, wait = time.monotonic(), self.tick
        for call in list(self._pending.values()):
            if call.deadline is not None:
                wait = min(wait, max(0.0, call.deadline - now))
        return wait

    def _dispatch(self, reply: wire.Message) -> bool:
        """Resolve the call ``reply`` answers; False when the service closed."""
        if type(reply) is not wire.Reply:
            if type(reply) is wire.Closed:
                label = self.target.label
                self._fail(lambda: ServiceClosedError(f"{label} was closed by its owner"))
                self._forget_lent()
                return False
            raise ParallelError(f"unexpected {type(reply).__name__} from {self.target.label}")
        call_id, payload, report, feedback = reply
        if feedback:
            self._feedback.append(feedback)
        with self._lock:
            call = self._pending.pop(call_id, None)
        if report is None:
            try:
                # decoded even if nobody waits: that recycles its segment
                value = self._reply.decode_results(0, payload)[0]
            except BaseException as exc:  # noqa: BLE001 - any unpickling error goes to the caller
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
            call.future.set_exception(WorkerError.from_report(report, t.device, 0, t.pid))
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

    def _forget_lent(self) -> None:
        """The service closed: remove the segments we made under names it had registered.

        It released its names as it dropped this connection; a call sent
        meanwhile may have made a segment under one after that. Its
        registration was the service's to remove, so only the file goes.
        Under the send lock: no call makes one any more (the channel failed).
        """
        with self._send_lock:
            prefix = getattr(self._request, "prefix", None)
            if prefix:
                shm.remove_names(prefix)

    def _fail(self, make_error: Callable[[], BaseException]) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = make_error
            calls, self._pending = list(self._pending.values()), {}
        for call in calls:
            call.future.set_exception(make_error())

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # closed or full: the reader is gone, or woken
            os.write(self._wake_w, b"\0")

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
            # (gone already: a goodbye is moot) Bounded: a stopped service
            # must not hold a close forever.
            with self._send_lock, contextlib.suppress(OSError):
                self._link.send(wire.BYE, time.monotonic() + self.bye_timeout)
        self._wake()
        if threading.current_thread() is not self._reader:
            interrupts.join(self._reader, 5.0)
        label = self.target.label
        self._fail(lambda: ServiceClosedError(f"this handle to {label} is closed"))
        _release(self._link, (self._wake_r, self._wake_w), self._reply)


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError, InterruptedError):
        while os.read(fd, 4096):
            pass


def _release(link: Any, fds: Iterable[int], reply: Any) -> None:
    """What a channel holds, given back: by ``close`` and by a start that failed."""
    link.close()
    for fd in fds:
        os.close(fd)
    _cleanup(reply)


def _cleanup(transport: Any) -> None:
    try:  # noqa: SIM105 - the except below says why it is broad
        transport.cleanup()
    except Exception:  # noqa: BLE001
        # Any Transport class (the handle's choice) cleans up here, while the
        # channel closes or fails: its error must not replace the one callers see.
        pass
