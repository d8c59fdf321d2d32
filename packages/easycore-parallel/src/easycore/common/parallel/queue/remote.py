"""The other processes' side of a ``Queue``: connections to the owner, each call bounded.

A [`ClientEnd`][easycore.common.parallel.queue.remote.ClientEnd] is one
process's end of a queue it did not make. It talks to the owner's
[`Broker`][easycore.common.parallel.queue.broker.Broker] over the
connection layer's links
([`connection.client`][easycore.common.parallel.connection.client]):

* **One connection per thread while it uses the queue**, taken back into a
  small pool when the thread ends (a thread's puts stay in order; a ``get``
  waiting in one thread never holds up another's ``put``), so a process that
  puts from hundreds of short-lived threads holds a few connections, not
  hundreds; beyond ``max_idle`` idle ones, a connection says goodbye.
* **Every timeout bounds the whole call**, connecting, sending and the
  owner's answer included, also with the owner stopped (SIGSTOP): the call
  raises ``queue.Empty`` / ``queue.Full`` at its deadline and the
  connection remembers the request it gave up on. The next call on it first
  cancels that request and reads up to the owner's ``cancelled``: an item
  that was sent meanwhile is kept for this process's next ``get`` (or given
  back, first in line, when the end closes); room that was granted goes
  back. Nothing is lost, and no reply is read as another's.
* **Room before memory**: on a bounded queue a ``put`` that makes a segment
  reserves room first, and makes it under a name the owner registered (see
  the broker); a ``put`` with a timeout reserves first too, so that giving
  up can be undone. A blocking ``put`` of a small item streams: the owner
  stops reading this connection while the queue is full.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue as _stdqueue
import threading
import time
import weakref
from collections import deque

from ..connection.address import process_alive, wait_gone
from ..connection.client import Link, connect
from ..errors import QueueClosedError, QueuePeerDiedError
from ..transport import shm
from ..transport.shared_memory import SharedMemoryTransport
from .broker import dumps, loads, segment_of

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Deque, Iterator, List, Optional, Set, Tuple

__all__ = ["ClientEnd"]

_NAMES_PER_ASK = 8  # segment names asked for at once (unbounded queues)


class _Conn:
    """One connection to the owner and what this side keeps on it."""

    __slots__ = ("cancelled", "deadline", "doubts", "link", "names", "stash")

    def __init__(self, link: Link) -> None:
        self.link = link
        self.names: List[str] = []  # segment names the owner handed us, unused
        self.doubts: List[int] = []  # requests given up on, not yet cancelled
        self.cancelled: Set[int] = set()  # of those, the ones whose cancel is queued
        self.stash: Deque[Any] = deque()  # items that came after their get gave up
        self.deadline: Optional[float] = None  # the call's, while one runs

    @property
    def busy(self) -> bool:
        """bool: whether it has business left (its next user, or its goodbye, settles it)."""
        return bool(self.doubts or self.stash or self.link.unsent)


class _Holder:
    """A thread's connection; returned to the pool when the thread ends."""

    __slots__ = ("__weakref__", "conn")

    def __init__(self, conn: _Conn) -> None:
        self.conn: Optional[_Conn] = conn


class _Late(Exception):
    """The owner did not answer by the call's deadline."""


class ClientEnd:
    """This process's connections to a queue's owner.

    Args:
        address (str): the owner's socket.
        authkey (bytes): the queue's key.
        owner_pid (int): the owner's process, for messages.
        owner_ns (int or None): its pid namespace.
        prefix (str): the queue's segment-name prefix.
        transport (SharedMemoryTransport): how items are pickled.
        maxsize (int): the queue's bound (0: none).
        shared_tracker (bool): whether this process shares the owner's
            resource tracker (then it may remove a dead owner's segments).
    """

    #: idle connections kept for the next thread that uses the queue
    max_idle = 4
    #: seconds closing an end may wait for the owner, per connection
    bye_timeout = 1.0

    def __init__(self, address: str, authkey: bytes, owner_pid: int, owner_ns: Optional[int],
                 prefix: str, transport: SharedMemoryTransport, maxsize: int,
                 shared_tracker: bool) -> None:
        self.address = address
        self.authkey = authkey
        self.owner_pid = owner_pid
        self.owner_ns = owner_ns
        self.prefix = prefix
        self.transport = transport
        self.maxsize = maxsize
        self.shared_tracker = shared_tracker
        self.lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.pid = os.getpid()  # whose connections these are (a forked child has copies)
        self.conns: List[_Conn] = []
        self.idle: List[_Conn] = []
        self.mine = threading.local()
        self.rids = itertools.count(1)

    # ----------------------------------------------------------- the calls
    @contextlib.contextmanager
    def _call(self, timeout: Optional[float], late: type) -> Iterator[_Conn]:
        """This thread's connection for one call; the owner's silence past the
        deadline raises ``late``, a connection that ended ``QueueClosedError``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        conn: Optional[_Conn] = None
        try:
            conn = self._conn(deadline)
            self._cancel_doubts(conn)  # their answers are read by whoever asks next
            conn.deadline = deadline
            yield conn
        except _Late:
            raise late(f"the queue's owner (pid {self.owner_pid}) did not answer within "
                       f"{timeout} s") from None
        except (EOFError, OSError) as exc:
            raise self._lost(conn, exc) from None
        finally:
            if conn is not None and conn.link.eof:  # a connection that broke is dropped
                self._drop(conn)

    def put(self, item: Any, block: bool, timeout: Optional[float]) -> None:
        with self._call(timeout, _stdqueue.Full) as conn:
            self._put(conn, item, block, timeout, conn.deadline)

    def _put(self, conn: _Conn, item: Any, block: bool, timeout: Optional[float],
             deadline: Optional[float]) -> None:
        # A put that may give up reserves room first (a reservation can be
        # cancelled; an item sent cannot); a blocking one reserves only if it
        # makes a segment, and streams a small item (the owner holds it).
        room = self._reserve(conn, block, deadline) if (
            self.maxsize and not (block and timeout is None)) else None
        made: List[str] = []

        def segment_for(nbytes: int) -> Tuple[str, int, Any]:
            nonlocal room
            if self.maxsize and room is None:  # room first, then memory
                room = self._reserve(conn, True, None)
            name = self._name(conn, deadline)
            try:
                mm = shm.create(name, nbytes, register=False)
            except shm.SharedMemoryFull:
                conn.names.append(name)  # not made: still ours to use
                raise
            made.append(name)
            return name, nbytes, mm

        try:
            payload, _ = self.transport.pack(item, segment_for)
        except BaseException:
            for name in made:  # the owner's name: its memory goes, the name stays ours
                shm.unmake(name)
                conn.names.append(name)
            if room is not None:
                conn.doubts.append(room)  # the room goes back with the next call
            raise
        # What the socket does not take by the deadline goes with the next
        # call: the item is on its way (room was reserved, or none is needed).
        conn.link.send(dumps(("put", payload, room is not None)), deadline, self._owner_check)

    def get(self, block: bool, timeout: Optional[float]) -> Any:
        with self._call(timeout, _stdqueue.Empty) as conn:
            if not conn.stash:  # else: an item that came after an earlier get gave up
                try:
                    reply = self._ask(conn, "get", block, timeout, None, conn.deadline)
                except _Late:
                    if not conn.stash:  # what came meanwhile is the answer, if anything
                        raise
                    reply = ("stashed",)
                if reply[0] == "item":
                    conn.stash.append(reply[2])  # after any that came before it
                elif not conn.stash:
                    if reply[0] == "died":
                        raise QueuePeerDiedError(reply[2], reply[3])
                    raise _stdqueue.Empty("the queue is empty")
            return self._decode(conn, conn.stash.popleft())

    def qsize(self) -> int:
        with self._call(None, _stdqueue.Empty) as conn:
            return int(self._ask(conn, "size", True, None, None, None)[2])

    # ------------------------------------------------------------ requests
    def _ask(self, conn: _Conn, kind: str, block: bool, timeout: Optional[float], arg: Any,
             deadline: Optional[float]) -> tuple:
        """Send one request and wait for its reply; ``_Late`` at the deadline.

        The answers to requests given up on earlier come first, in order:
        they are taken in on the way (see ``_absorb``).
        """
        rid = next(self.rids)
        if timeout is not None and deadline is not None:  # what is left of it, for the owner
            timeout = max(0.0, deadline - time.monotonic())
        if conn.link.send(dumps(("ask", rid, kind, block, timeout, arg)), deadline,
                          self._owner_check):
            while True:
                reply = self._reply(conn, deadline)
                if reply is None:
                    break
                if reply[1] == rid:
                    return reply
                self._absorb(conn, reply)
        conn.doubts.append(rid)  # cancelled by the next call on this connection
        raise _Late

    def _reply(self, conn: _Conn, deadline: Optional[float]) -> Optional[tuple]:
        data = conn.link.recv(deadline, self._owner_check)
        if data is None:
            return None
        reply = loads(data)
        if reply[0] == "closed":
            raise EOFError("the queue was closed")
        return reply

    def _cancel_doubts(self, conn: _Conn) -> None:
        """Queue a cancel for each request a call gave up on (sent with what follows)."""
        for rid in conn.doubts:
            if rid not in conn.cancelled:
                conn.cancelled.add(rid)  # queued whole from here on
                conn.link.send(dumps(("cancel", rid)), 0)

    def _absorb(self, conn: _Conn, reply: tuple) -> None:
        """An answer to a request given up on, or its ``cancelled``: nothing is lost."""
        kind = reply[0]
        if kind == "cancelled":
            with contextlib.suppress(ValueError):
                conn.doubts.remove(reply[1])
            conn.cancelled.discard(reply[1])
        elif kind == "item":
            conn.stash.append(reply[2])  # for this connection's next get
        elif kind == "ok" and reply[2]:
            conn.names.append(reply[2])  # the room goes back on cancel; the name stays ours
        elif kind == "names":
            conn.names.extend(reply[2])

    def _settle(self, conn: _Conn, deadline: Optional[float]) -> bool:
        """Cancel what calls gave up on and read up to each ``cancelled``;
        False when the deadline came first."""
        self._cancel_doubts(conn)
        if not conn.link.flush(deadline, self._owner_check):
            return False
        while conn.doubts:
            reply = self._reply(conn, deadline)
            if reply is None:
                return False
            self._absorb(conn, reply)
        return True

    def _reserve(self, conn: _Conn, block: bool, deadline: Optional[float]) -> int:
        """Room for one item (and a segment name with it, if we hold none); its request id."""
        reply = self._ask(conn, "room", block, None if deadline is None else 0.0,
                          not conn.names, deadline)
        if reply[0] == "full":
            raise _stdqueue.Full(f"the queue is full ({self.maxsize} items)")
        if reply[2]:
            conn.names.append(reply[2])
        return int(reply[1])

    def _name(self, conn: _Conn, deadline: Optional[float]) -> str:
        if not conn.names:
            conn.names.extend(self._ask(conn, "names", True, None, _NAMES_PER_ASK, deadline)[2])
        return conn.names.pop()

    def _decode(self, conn: _Conn, payload: Any) -> Any:
        segment = segment_of(payload)
        if segment is None:
            return self.transport.unpack(payload)
        name, size = segment
        try:
            mm = shm.open_existing(name, size)
        except FileNotFoundError:  # removed: the owner died or closed the queue meanwhile
            raise QueueClosedError(f"the queue's owner (pid {self.owner_pid}) closed the "
                                   "queue or died; this item's memory went with it") from None
        # Mapped: the name goes now (the memory stays while anything views
        # it), and the owner, whose tracker holds the name, forgets it (sent
        # without waiting; the rest goes with the next message). Killed in
        # between, this process leaves the owner a name it forgets all the same.
        shm.remove(name)
        with contextlib.suppress(OSError):
            conn.link.send(dumps(("taken", [name])), 0)
        return self.transport.unpack(payload, mm)

    # --------------------------------------------------------- connections
    def _conn(self, deadline: Optional[float]) -> _Conn:
        """This thread's connection: its own, an idle one, or a new one."""
        if self.pid != os.getpid():  # inherited through fork: the parent's connections
            self._reset()
        holder: Optional[_Holder] = getattr(self.mine, "holder", None)
        if holder is not None and holder.conn is not None:
            return holder.conn
        with self.lock:
            conn = self.idle.pop() if self.idle else None
        if conn is None:
            conn = self._connect(deadline)
            with self.lock:
                self.conns.append(conn)
        holder = _Holder(conn)
        # At the thread's end (its locals go); at exit, the queue's own
        # finalizer says every goodbye.
        weakref.finalize(holder, self._release, conn, os.getpid()).atexit = False
        self.mine.holder = holder
        return conn

    def _connect(self, deadline: Optional[float]) -> _Conn:
        try:
            link, welcome = connect(self.address, self.authkey, dumps(("hello", os.getpid())),
                                    deadline, self._owner_check)
        except TimeoutError:
            raise _Late from None
        except PermissionError as exc:
            raise QueueClosedError(
                f"cannot reach the queue's owner (pid {self.owner_pid}) at {self.address!r}: "
                f"{exc}; a queue is reachable from processes of its owner's user, on its "
                "machine") from None
        except (OSError, EOFError) as exc:
            if isinstance(exc, (ConnectionRefusedError, FileNotFoundError)):
                self._sweep_if_dead()  # nobody listens: a dead owner's items are unreadable
            raise QueueClosedError(f"cannot reach the queue's owner (pid {self.owner_pid}): "
                                   f"it closed the queue or died ({exc})") from None
        if loads(welcome)[0] != "welcome":
            link.close()
            raise QueueClosedError(f"the queue's owner (pid {self.owner_pid}) is closing")
        return _Conn(link)

    def _release(self, conn: _Conn, pid: int) -> None:
        """A thread that used ``conn`` ended: it goes back to the pool, or says goodbye."""
        if pid != os.getpid():
            return
        with self.lock:
            if conn not in self.conns:
                return  # dropped, or the end closed
            if len(self.idle) < self.max_idle or conn.busy:
                self.idle.append(conn)  # one with business left is kept for it
                return
            self.conns.remove(conn)
        self._goodbye(conn)

    def _drop(self, conn: _Conn) -> None:
        with self.lock:
            if conn in self.conns:
                self.conns.remove(conn)
            if conn in self.idle:
                self.idle.remove(conn)
        holder = getattr(self.mine, "holder", None)
        if holder is not None and holder.conn is conn:
            holder.conn = None
        conn.link.close()

    def _lost(self, conn: Optional[_Conn], exc: BaseException) -> QueueClosedError:
        """The connection ended: the owner closed the queue or died."""
        if conn is not None:
            self._drop(conn)
        self._sweep_if_dead()
        return QueueClosedError(f"the queue's owner (pid {self.owner_pid}) closed the queue "
                                f"or died ({type(exc).__name__}: {exc})")

    def _owner_check(self) -> None:
        """Called while a call waits: the owner's death ends the wait, even where no
        end of stream comes (a child it forked holds its end of the connection).

        Raises:
            EOFError: the owner is gone.
        """
        if not process_alive(self.owner_pid, self.owner_ns):
            raise EOFError(f"process {self.owner_pid} is gone")

    def _sweep_if_dead(self) -> None:
        """A dead owner's items can never be read: remove their segments.

        Only in its process family (one resource tracker): another family's
        tracker removes them itself, and would find them gone.
        """
        if self.shared_tracker and wait_gone(self.owner_pid, self.owner_ns, 2.0):
            shm.sweep(self.prefix)

    def _goodbye(self, conn: _Conn) -> None:
        """End one connection: cancel what is in doubt, give back late items, say bye."""
        deadline = time.monotonic() + self.bye_timeout
        try:
            self._settle(conn, deadline)
            while conn.stash:
                conn.link.send(dumps(("giveback", conn.stash.popleft())), deadline)
            conn.link.send(dumps(("bye",)), deadline)
        except (OSError, EOFError, ValueError):
            pass  # the owner is gone: nobody to say it to
        finally:
            conn.link.close()

    def close(self) -> None:
        """Say goodbye on every connection (items that came too late go back first)."""
        if self.pid != os.getpid():
            return  # a forked copy: the connections are the parent's
        with self.lock:
            conns, self.conns, self.idle = list(self.conns), [], []
        for conn in conns:
            self._goodbye(conn)
