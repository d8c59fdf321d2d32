"""An inter-process queue whose arrays travel through shared memory: `Queue`.

machin's ``SimpleQueue(ctx, copy_tensor)`` and ``torch.multiprocessing.Queue``
for easycore: ``put`` / ``get(timeout)`` / ``qsize`` / ``close``, picklable
into any process (a `Pool` task's argument, a `BackgroundTask`'s ``args``, a
``spawn``-ed process), and it never hangs when the other side died.

How it works:

* **Data**: ``put`` pickles the item with the runners' transport
  ([`SharedMemoryTransport`][easycore.common.parallel.SharedMemoryTransport];
  ``TensorTransport`` in the torch variant), which copies every large buffer
  once into a POSIX shared-memory segment named after the queue; ``get`` maps
  that segment and rebuilds the arrays *on* it (no copy) and removes its name
  at once, so its memory goes with the last array viewing it. Small items
  travel inside the message.
* **Order**: the process that made the queue (its *owner*) keeps the items'
  messages (a few hundred bytes each, never the data) in a deque; other
  processes reach it through a ``multiprocessing.connection`` socket
  (authenticated), one connection per thread that uses the queue; a blocking
  ``put`` without a timeout gets no reply (the socket's buffer is the
  back-pressure), so puts stream.
* **Death**: a process whose connection ends without saying goodbye (killed,
  crashed) is recorded: every ``get`` waiting on the empty queue then, and the
  next one to find it empty, raises
  [`QueuePeerDiedError`][easycore.common.parallel.QueuePeerDiedError] naming
  its pid, instead of waiting for items that may never come. In other
  processes, a queue whose owner died or closed it raises
  [`QueueClosedError`][easycore.common.parallel.QueueClosedError].
* **No leaks**: segment names carry the queue's prefix; ``close()`` releases
  the segments of items never taken and sweeps the prefix for any a killed
  producer left; a process that finds the owner dead sweeps the prefix too
  (the items it held can never be read); and every segment is registered with
  multiprocessing's resource tracker from the moment it exists.

(Over 400 lines on purpose: the ``Queue`` broker, its two ends and their shared-memory
payloads are one protocol, read best side by side.)
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import pickle
import queue as _stdqueue
import secrets
import socket
import threading
import time
import weakref
from multiprocessing import AuthenticationError, connection, util
from typing import Any, Callable, Deque, List, Optional, Tuple, Type

from .errors import ParallelError
from .transport import shm
from .transport.shared_memory import SharedMemoryTransport, _Packed

__all__ = ["Queue", "QueueClosedError", "QueuePeerDiedError"]

Empty = _stdqueue.Empty
Full = _stdqueue.Full

# Weak references die through C code (see shm.BufferView): nothing to recycle.
_FORGET: Callable[[Any], Any] = collections.deque(maxlen=0).append
_POLL = 0.2  # seconds between checks of a closing queue in waiting threads


class QueueClosedError(ParallelError):
    """The queue was closed, or its owner process died."""


class QueuePeerDiedError(ParallelError):
    """A process using the queue ended without closing it, while the queue was empty.

    Attributes:
        pid (int): that process's id.
    """

    def __init__(self, message: str, pid: int = 0) -> None:
        super().__init__(message)
        self.pid = pid

    def __reduce__(self) -> Any:
        return (QueuePeerDiedError, (str(self), self.pid))


#: The numbers of the segments this process's puts make, for every queue and
#: end (``next`` on a count is atomic: no lock needed).
_segment_numbers = itertools.count(1)
_NAME_TRIES = 100

# The owners alive in this process, by token: a queue unpickled where it was
# made is that same queue (thread back-end, or a round trip through a pool).
_OWNED: weakref.WeakValueDictionary[str, Queue] = weakref.WeakValueDictionary()


class _Broker:
    """The owner's side: the items' messages in order, and a thread per connection."""

    def __init__(self, maxsize: int, authkey: bytes, prefix: str) -> None:
        self.maxsize = maxsize
        self.authkey = authkey
        self.prefix = prefix
        self.items: Deque[Any] = collections.deque()
        self.cond = threading.Condition()
        self.open = True
        self.deaths = 0  # processes that ended without closing their end
        self.unreported: Optional[Tuple[str, int]] = None
        self.threads: List[threading.Thread] = []
        # a backlog for many workers connecting at once
        self.listener = connection.Listener(authkey=authkey, backlog=64)
        self.address = self.listener.address
        self.accepter = threading.Thread(target=self._accept_loop, daemon=True,
                                         name="easycore-queue-accept")
        self.accepter.start()

    def put(self, payload: Any, block: bool, timeout: Optional[float]) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while self.maxsize and len(self.items) >= self.maxsize and self.open:
                remaining = None if deadline is None else deadline - time.monotonic()
                if not block or (remaining is not None and remaining <= 0):
                    raise Full(f"the queue is full ({self.maxsize} items)")
                self.cond.wait(_POLL if remaining is None else min(_POLL, remaining))
            if not self.open:
                raise QueueClosedError("the queue was closed")
            self.items.append(payload)
            self.cond.notify_all()

    def get(self, block: bool, timeout: Optional[float]) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            deaths = self.deaths
            while not self.items:
                if not self.open:
                    raise QueueClosedError("the queue was closed")
                if self.unreported is not None or self.deaths != deaths:
                    message, pid = self.unreported or ("a process using the queue died", 0)
                    self.unreported = None
                    raise QueuePeerDiedError(message, pid)
                remaining = None if deadline is None else deadline - time.monotonic()
                if not block or (remaining is not None and remaining <= 0):
                    raise Empty("the queue is empty")
                self.cond.wait(_POLL if remaining is None else min(_POLL, remaining))
            payload = self.items.popleft()
            self.cond.notify_all()
            return payload

    def qsize(self) -> int:
        with self.cond:
            return len(self.items)

    def _accept_loop(self) -> None:
        # Ends only when a connection, or a failed one, finds the queue closed:
        # close() always makes one (see _wake), so the loop never ends before
        # taking it, which would leave that connection waiting in the backlog.
        while True:
            try:
                conn = self.listener.accept()
            except (OSError, EOFError, AuthenticationError):
                if not self.open:  # close()'s wake-up, or the listener closed
                    return
                continue  # a failed handshake
            if not self.open:
                conn.close()
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True,
                                      name="easycore-queue-conn")
            with self.cond:
                self.threads = [t for t in self.threads if t.is_alive()]
                self.threads.append(thread)
            thread.start()

    def _serve(self, conn: Any) -> None:
        """One connection: requests in, replies out, until goodbye, EOF or close."""
        pid = 0
        try:
            while self.open:
                if not conn.poll(_POLL):
                    continue
                request = conn.recv()
                op = request[0]
                if op == "hello":
                    pid = request[1]
                    continue
                if op == "bye":
                    return
                if op == "stream":  # a put that wants no reply
                    try:
                        self.put(request[1], True, None)
                    except QueueClosedError:
                        _discard(request[1])
                    continue
                reply: Tuple[str, Any]
                try:
                    if op == "put":
                        self.put(request[1], request[2], request[3])
                        reply = ("ok", None)
                    elif op == "get":
                        reply = ("ok", self.get(request[1], request[2]))
                    elif op == "qsize":
                        reply = ("ok", self.qsize())
                    else:
                        reply = ("error", ValueError(f"unknown queue request {op!r}"))
                except (Empty, Full, QueueClosedError, QueuePeerDiedError) as exc:
                    if op == "put":
                        _discard(request[1])
                    reply = ("error", exc)
                try:
                    conn.send(reply)
                except OSError:
                    if op == "get" and reply[0] == "ok":
                        self.give_back(reply[1])  # its taker died: first in line again
                    raise
        except (EOFError, OSError):
            if self.open:  # not our own close: the peer ended without goodbye
                with self.cond:
                    self.deaths += 1
                    self.unreported = (
                        f"process {pid} ended without closing its end of the queue "
                        "(killed or crashed); items it would have put may never come", pid)
                    self.cond.notify_all()
        finally:
            conn.close()

    def _wake(self) -> None:
        """Connect to the listener once, so that the accept loop sees the queue closed.

        A bare socket, no handshake: the accept loop's handshake then fails
        (EOF) and it returns. A ``connection.Client`` would wait for the
        loop's challenge forever if the loop had already ended.
        """
        if isinstance(self.address, tuple):
            family = socket.AF_INET
        elif self.address.startswith("\\\\"):  # a Windows pipe: the handshake is the way
            with contextlib.suppress(OSError, EOFError, AuthenticationError):
                connection.Client(self.address, authkey=self.authkey).close()
            return
        else:
            family = socket.AF_UNIX
        with socket.socket(family) as sock, contextlib.suppress(OSError):
            sock.connect(self.address)

    def give_back(self, payload: Any) -> None:
        with self.cond:
            self.items.appendleft(payload)
            self.cond.notify_all()

    def close(self) -> None:
        """Wake everyone, stop the threads, free every segment left."""
        with self.cond:
            if not self.open:
                return
            self.open = False
            items, self.items = list(self.items), collections.deque()
            threads = list(self.threads)
            self.cond.notify_all()
        self._wake()
        self.accepter.join(10)
        self.listener.close()
        for thread in threads:  # each sees the close within _POLL seconds
            thread.join(10)
        for payload in items:
            _discard(payload)
        shm.sweep(self.prefix)  # segments of producers killed mid-put


class Queue:
    """A FIFO queue between processes; arrays through shared memory.

    Make it in one process (its owner, which must outlive the others' use of
    it) and hand it to others by pickling: as a task argument, in a
    ``BackgroundTask``'s ``args``, or as an argument of
    ``multiprocessing.Process``. Thread-safe in every process.

    Args:
        maxsize (int): items held at most; ``put`` then waits (or raises
            ``queue.Full``). 0: no bound.
        transport (SharedMemoryTransport or None): how items are pickled
            (which buffers go through shared memory); None: the runners'
            default. ``easycore.torch.parallel.Queue`` passes ``TensorTransport``.

    Examples:
        ```python
        import numpy as np
        from easycore.common.parallel import Pool, Queue


        def produce(q, n):
            for i in range(n):
                q.put(np.full(1 << 20, i, dtype=np.uint8))  # 1 MiB each
            return n


        if __name__ == "__main__":
            with Queue(maxsize=4) as q, Pool(2) as pool:
                done = pool.starmap_async(produce, [(q, 3)] * 2, chunksize=1)
                got = sorted(int(q.get(timeout=60)[0]) for _ in range(6))
                assert got == [0, 0, 1, 1, 2, 2] and done.get(60) == [3, 3]
        ```
    """

    def __init__(self, maxsize: int = 0, *,
                 transport: Optional[SharedMemoryTransport] = None) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 0:
            raise ValueError(f"maxsize must be an int >= 0, got {maxsize!r}")
        transport = transport if transport is not None else SharedMemoryTransport()
        transport.prepare()  # the resource tracker, before any worker starts
        prefix = shm.make_prefix("ecq")
        authkey = secrets.token_bytes(32)
        self._setup(secrets.token_hex(8), maxsize, transport, prefix, authkey, os.getpid())
        self._broker: Optional[_Broker] = _Broker(maxsize, authkey, prefix)
        self._address = self._broker.address
        _OWNED[self._token] = self
        self._finalizer = util.Finalize(self, self._broker.close, exitpriority=15)

    def _setup(self, token: str, maxsize: int, transport: SharedMemoryTransport, prefix: str,
               authkey: bytes, owner_pid: int) -> None:
        self._token = token
        self._maxsize = maxsize
        self._transport = transport
        self._prefix = prefix
        self._authkey = authkey
        self._owner_pid = owner_pid
        self._lock = threading.Lock()  # the open connections
        self._encoding = threading.Lock()  # the transport's pickler is one per process
        self._closed = False
        # Connections to the owner, one per thread (a thread's puts stay in
        # order; a get waiting in one thread never holds up another's put).
        self._conns: List[Any] = []
        self._mine = threading.local()
        self._pid = os.getpid()  # whose connections _conns holds

    # ------------------------------------------------------------ pickling
    def __reduce__(self) -> Any:
        return (_rebuild, (type(self), self._token, self._address, self._authkey,
                           self._prefix, self._owner_pid, self._maxsize, self._transport))

    @property
    def _local(self) -> Optional[_Broker]:
        """The broker, in the owner's process (a forked child has a copy: not its own)."""
        return self._broker if os.getpid() == self._owner_pid else None

    # ------------------------------------------------------------ public API
    def put(self, item: Any, block: bool = True, timeout: Optional[float] = None) -> None:
        """Add ``item`` at the end.

        Args:
            item (Any): anything picklable; large arrays (tensors with the torch
                variant) are copied once, into shared memory.
            block (bool): wait for room when the queue is full.
            timeout (float or None): the longest wait for room (None: as long as it takes).

        Raises:
            queue.Full: no room (``block=False``, or ``timeout`` passed).
            QueueClosedError: the queue was closed, or its owner died.
        """
        self._check_open()
        payload = self._encode(item)
        broker = self._local
        try:
            if broker is not None:
                broker.put(payload, block, timeout)
            elif block and timeout is None:
                # Nothing to wait for but room: no reply (the socket's buffer
                # is the back-pressure), so puts stream as fast as gets.
                self._request(("stream", payload), reply=False)
            else:
                self._request(("put", payload, block, timeout))
        except (Full, QueueClosedError):
            _discard(payload)  # never queued: its segment goes now
            raise

    def put_nowait(self, item: Any) -> None:
        """``put(item, block=False)``."""
        self.put(item, block=False)

    def get(self, block: bool = True, timeout: Optional[float] = None) -> Any:
        """Remove and return the first item.

        Args:
            block (bool): wait for an item when the queue is empty.
            timeout (float or None): the longest wait (None: as long as it takes).

        Returns:
            Any: the item; its arrays view shared memory, freed with the last of them.

        Raises:
            queue.Empty: no item (``block=False``, or ``timeout`` passed).
            QueuePeerDiedError: the queue is empty and a process using it
                ended without closing it (see the module docstring).
            QueueClosedError: the queue was closed, or its owner died.
        """
        self._check_open()
        broker = self._local
        if broker is not None:
            payload = broker.get(block, timeout)
        else:
            payload = self._request(("get", block, timeout))
        return self._decode(payload)

    def get_nowait(self) -> Any:
        """``get(block=False)``."""
        return self.get(block=False)

    def qsize(self) -> int:
        """Items in the queue now.

        Returns:
            int:
        """
        self._check_open()
        broker = self._local
        if broker is not None:
            return broker.qsize()
        return int(self._request(("qsize",)))

    def empty(self) -> bool:
        """Whether ``qsize() == 0``."""
        return self.qsize() == 0

    def close(self) -> None:
        """Close this process's end; the owner's close ends the queue for everyone.

        The owner's close wakes every waiting ``get`` and ``put`` (here and in
        other processes: ``QueueClosedError``), frees the items never taken
        and the shared memory of any producer killed mid-``put``. Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        broker = self._local
        if broker is not None:
            self._finalizer.cancel()
            broker.close()
            _OWNED.pop(self._token, None)
        else:
            _goodbye(self._conns, self._lock)

    @property
    def closed(self) -> bool:
        """bool: whether this end was closed."""
        return self._closed

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        role = "owner" if self._local is not None else f"client of pid {self._owner_pid}"
        return f"<Queue {self._prefix.rstrip('-')} {role}{' closed' if self._closed else ''}>"

    # ------------------------------------------------------------ data
    def _encode(self, item: Any) -> Any:
        def segment_for(nbytes: int) -> Tuple[str, int, Any]:
            # Numbered per process, not per end: each task handed the queue
            # unpickles an end of its own, and two of them in one worker
            # counting from 1 made the same names (FileExistsError).
            for _ in range(_NAME_TRIES):
                name = f"/{self._prefix}{os.getpid():x}-{next(_segment_numbers):x}"
                try:
                    return name, nbytes, shm.create(name, nbytes)
                except FileExistsError:
                    continue  # left by a dead process that had this pid
            raise FileExistsError(f"no free segment name after {name!r}")

        transport = self._transport
        with self._encoding:
            payload, _ = transport._pack(item, segment_for)
            if transport._full:  # /dev/shm full: it went in-band, the call goes on
                transport._full = False
                transport._warn_full()
        return payload

    def _decode(self, payload: Any) -> Any:
        if not isinstance(payload, _Packed):
            return pickle.loads(payload)
        name, size = payload[1], payload[2]
        try:
            mm = shm.open_existing(name, size)
        except FileNotFoundError:  # swept: the owner died or closed the queue meanwhile
            raise QueueClosedError(f"the queue's owner (pid {self._owner_pid}) closed the "
                                   "queue or died; this item's memory went with it") from None
        # The name goes now (the memory stays while anything views it): no
        # later crash can leak it.
        shm.release(name, registered=False)
        return self._transport._unpack(payload, mm, _FORGET, {})

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosedError(f"{self!r} is closed")

    # ------------------------------------------------------------ client side
    def _connect(self) -> Any:
        try:
            conn = connection.Client(self._address, authkey=self._authkey)
            conn.send(("hello", os.getpid()))
        except (OSError, EOFError, AuthenticationError) as exc:
            if isinstance(exc, (ConnectionRefusedError, FileNotFoundError)):
                shm.sweep(self._prefix)  # nobody listens: a dead owner's items are unreadable
            raise QueueClosedError(f"cannot reach the queue's owner (pid {self._owner_pid}): "
                                   f"it closed the queue or died ({exc})") from None
        return conn

    def _request(self, request: tuple, reply: bool = True) -> Any:
        if self._pid != os.getpid():  # inherited through fork: the parent's connections
            self._pid = os.getpid()
            self._conns = []
            self._mine = threading.local()
            self._lock = threading.Lock()
            util.Finalize(self, _goodbye, args=(self._conns, self._lock), exitpriority=15)
        conn = getattr(self._mine, "conn", None)
        if conn is None:
            conn = self._mine.conn = self._connect()
            with self._lock:
                self._conns.append(conn)
        try:
            if not reply and conn.poll(0):  # nothing is ever due here: the owner is gone
                raise EOFError
            conn.send(request)
            if not reply:
                return None
            status, value = conn.recv()
        except (EOFError, OSError):
            self._drop(conn)
            # A closed queue left nothing; a dead owner may have left the
            # segments of the items it held: nobody can read them now.
            shm.sweep(self._prefix)
            raise QueueClosedError(f"the queue's owner (pid {self._owner_pid}) closed the "
                                   "queue or died") from None
        except BaseException:  # e.g. Ctrl-C mid-call: the reply would be out of step
            self._drop(conn)
            raise
        if status == "error":
            raise value
        return value

    def _drop(self, conn: Any) -> None:
        self._mine.conn = None
        with self._lock:
            if conn in self._conns:
                self._conns.remove(conn)
        conn.close()


def _discard(payload: Any) -> None:
    """Free the segment of an item that will never be read."""
    if isinstance(payload, _Packed):
        shm.release(payload[1], free_now=True, registered=False)


def _rebuild(cls: Type[Queue], token: str, address: Any, authkey: bytes, prefix: str,
             owner_pid: int, maxsize: int, transport: SharedMemoryTransport) -> Queue:
    owned = _OWNED.get(token)
    if owned is not None and os.getpid() == owned._owner_pid:
        return owned
    q = cls.__new__(cls)
    q._setup(token, maxsize, transport, prefix, authkey, owner_pid)
    q._broker = None
    q._address = address
    # Goodbye when this end is collected or its process exits normally (the
    # exit of a multiprocessing child runs these, not atexit): only a process
    # that ends without it counts as dead for the owner.
    util.Finalize(q, _goodbye, args=(q._conns, q._lock), exitpriority=15)
    return q


def _goodbye(open_conns: List[Any], lock: threading.Lock) -> None:
    with lock:
        conns = list(open_conns)
        open_conns.clear()
    for conn in conns:
        with contextlib.suppress(OSError):  # the owner is gone: nobody to say it to
            conn.send(("bye",))
        conn.close()
