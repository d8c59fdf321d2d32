"""The owner's side of a ``Queue``: the items in order, the room, and every other process.

The [`Broker`][easycore.common.parallel.queue.broker.Broker] keeps the
items' payloads (a few hundred bytes each; the data is in shared memory) in
a deque, for the owner's own threads (``put``/``get`` wait on a condition)
and for the other processes, whose connections it serves as a handler of
the connection layer's server
([`connection.server`][easycore.common.parallel.connection.server]): one
serve loop for every client, no thread per connection. A request that has
to wait (a ``get`` on an empty queue, a reservation of room on a full one)
is *parked* with its deadline and answered by the loop's timer, when an item
or room comes, or when it times out; a streamed ``put`` that finds the
queue full *holds* its client (nothing more is read from it until there is
room: its socket buffer is the back-pressure).

The messages (pickled tuples, one per frame), client to owner:

* ``("put", payload, slot)``: no reply; ``slot``: room was reserved for it;
* ``("ask", rid, kind, block, timeout, arg)``, answered by a reply that
  carries ``rid``: ``kind`` ``"get"`` (``("item", rid, payload)``,
  ``("empty", rid)``, ``("died", rid, message, pid)``), ``"room"``
  (``("ok", rid, name or None)`` or ``("full", rid)``; ``arg``: whether a
  segment name is wanted), ``"names"`` (``("names", rid, [names])``;
  ``arg``: how many), ``"size"`` (``("size", rid, n)``);
* ``("cancel", rid)``: the client gave up waiting (its timeout passed,
  perhaps with the owner stopped); answered ``("cancelled", rid)`` after
  whatever reply went out before it; room it had reserved is freed;
* ``("taken", [names])``: segments of items it read (and unlinked): the
  owner's tracker forgets them;
* ``("giveback", payload)``: an item it got too late goes back, first in line;
* ``("bye",)``: this connection ends; not a death.

Every segment name is registered with the *owner's* resource tracker, from
before the segment exists until the owner removes it: the owner's own puts
register as they make one, and a client makes its segments only under
names the owner handed it (``names``, or with a reservation of room), so no
other process's tracker ever holds one, and none of them can delete an
item the owner still holds when its process leaves (``transport.shm``
registers, releases and removes names). Names handed out and never
used, items sent and never confirmed, and the segments of a client that
died go when its connection ends.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import pickle
import queue as _stdqueue
import threading
import time

from ..connection.server import HOLD, Handler, Outcome, Peer, Server
from ..errors import QueueClosedError, QueuePeerDiedError
from ..transport import shm
from ..transport.shared_memory import SharedMemoryTransport

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Deque, List, Optional, Set, Tuple

__all__ = ["Broker", "discard", "dumps", "loads", "segment_of"]

_PROTOCOL = pickle.HIGHEST_PROTOCOL
_POLL = 0.2  # seconds between checks of a closing queue in waiting threads
segment_of = SharedMemoryTransport.segment_of


def dumps(message: tuple) -> bytes:
    """One message, pickled."""
    return pickle.dumps(message, protocol=_PROTOCOL)


def loads(data: bytes) -> tuple:
    """One message back; ValueError for anything but a tuple."""
    message = pickle.loads(data)
    if type(message) is not tuple or not message:
        raise ValueError(f"not a queue message: {type(message).__name__}")
    return message


def discard(payload: Any) -> None:
    """Free the segment of an item that will never be read (its name is the owner's)."""
    segment = segment_of(payload)
    if segment is not None:
        with contextlib.suppress(OSError):  # gone already: nothing to free
            shm.release(segment[0], free_now=True)


class _Ask:
    """A parked request: a ``get`` or a reservation of room, waiting."""

    __slots__ = ("arg", "deadline", "peer", "rid")

    def __init__(self, peer: Peer, rid: int, deadline: Optional[float], arg: Any) -> None:
        self.peer = peer
        self.rid = rid
        self.deadline = deadline
        self.arg = arg


class _Client:
    """What the owner keeps on one connection."""

    __slots__ = ("granted", "names", "pid", "sent")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.names: Set[str] = set()  # handed out, not yet seen in a put
        self.granted: List[int] = []  # reservations of room not yet filled
        self.sent: Set[str] = set()  # items sent to it, not yet confirmed taken


class Broker(Handler):
    """The owner's queue; see the module docstring.

    Args:
        maxsize (int): items held at most, reservations of room included (0: no bound).
        prefix (str): the queue's segment-name prefix.
    """

    closing_frame = dumps(("closed", None))

    def __init__(self, maxsize: int, prefix: str) -> None:
        self.maxsize = maxsize
        self.prefix = prefix
        self.items: Deque[Any] = collections.deque()
        self.reserved = 0  # room reserved for items being made (here and elsewhere)
        self.cond = threading.Condition()
        self.open = True
        self.deaths = 0  # processes that ended without closing their end
        self.last_death: Tuple[str, int] = ("a process using the queue died", 0)
        # Deaths some get was told of: a get on the empty queue is told of the last death
        # while fewer were (a get waiting at a death is told too, once the queue is empty).
        self.reported = 0
        self.gets: Deque[_Ask] = collections.deque()
        self.rooms: Deque[_Ask] = collections.deque()
        self.held: Deque[Peer] = collections.deque()
        self.server: Optional[Server] = None
        self._numbers = itertools.count(1)

    # ------------------------------------------------------------- names
    def new_name(self) -> str:
        """A fresh segment name of this queue (not registered)."""
        return f"/{self.prefix}{next(self._numbers):x}"

    def _hand_out(self, client: _Client) -> str:
        name = self.new_name()
        shm.reserve(name)  # the owner's tracker knows it before the segment exists
        client.names.add(name)
        return name

    # ----------------------------------------- the owner's own threads
    def _room(self) -> bool:
        return not self.maxsize or len(self.items) + self.reserved < self.maxsize

    def reserve(self, block: bool, timeout: Optional[float]) -> None:
        """Wait for room, and take it for an item about to be made.

        Raises:
            queue.Full: no room (``block=False``, or ``timeout`` passed).
            QueueClosedError: closed meanwhile.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while self.open and not self._room():
                remaining = None if deadline is None else deadline - time.monotonic()
                if not block or (remaining is not None and remaining <= 0):
                    raise _stdqueue.Full(f"the queue is full ({self.maxsize} items)")
                self.cond.wait(_POLL if remaining is None else min(_POLL, remaining))
            if not self.open:
                raise QueueClosedError("the queue was closed")
            self.reserved += 1

    def commit(self, payload: Any) -> None:
        """Add an item made in the room ``reserve`` took.

        Raises:
            QueueClosedError: closed meanwhile (the item is freed).
        """
        with self.cond:
            self.reserved -= 1
            if self.open:
                self.items.append(payload)
                self.cond.notify_all()
                self._kick()
                return
        discard(payload)
        raise QueueClosedError("the queue was closed")

    def unreserve(self) -> None:
        """Give back room ``reserve`` took (making the item failed)."""
        with self.cond:
            self.reserved -= 1
            self.cond.notify_all()
            self._kick()

    def get(self, block: bool, timeout: Optional[float]) -> Any:
        """The first item's payload.

        Raises:
            queue.Empty, QueuePeerDiedError, QueueClosedError: see ``Queue.get``.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            deaths = self.deaths
            while not self.items:
                if not self.open:
                    raise QueueClosedError("the queue was closed")
                if self.reported < self.deaths or self.deaths != deaths:
                    self.reported = self.deaths
                    raise QueuePeerDiedError(*self.last_death)
                remaining = None if deadline is None else deadline - time.monotonic()
                if not block or (remaining is not None and remaining <= 0):
                    raise _stdqueue.Empty("the queue is empty")
                self.cond.wait(_POLL if remaining is None else min(_POLL, remaining))
            payload = self.items.popleft()
            self.cond.notify_all()
            self._kick()
            return payload

    def qsize(self) -> int:
        with self.cond:
            return len(self.items)

    def _kick(self) -> None:
        """The serve loop matches parked requests with what changed (the lock held)."""
        if self.server is not None and (self.gets or self.rooms or self.held):
            self.server.wake()

    def close(self) -> None:
        """Wake everyone, tell every client, free every segment left."""
        with self.cond:
            if not self.open:
                return
            self.open = False
            self.cond.notify_all()
        if self.server is not None:
            self.server.stop()  # every client hears "closed"; their names go (dropped)
        with self.cond:
            items, self.items = list(self.items), collections.deque()
        for payload in items:
            discard(payload)
        shm.sweep(self.prefix)  # segments of producers killed mid-put

    # ------------------------------------------------- the serve loop's side
    def greet(self, peer: Peer, hello: bytes) -> bytes:
        message = loads(hello)
        if message[0] != "hello" or not isinstance(message[1], int):
            raise ValueError("expected a hello")
        peer.data = _Client(message[1])
        return dumps(("welcome",))

    def serve(self, peer: Peer, data: bytes) -> Outcome:
        client: _Client = peer.data
        try:
            message = loads(data)
            op = message[0]
            if op == "put":
                return self._put(peer, client, message[1], bool(message[2]))
            if op == "ask":
                _, rid, kind, block, timeout, arg = message
                self._ask(peer, client, rid, kind, bool(block), timeout, arg)
                return True
            if op == "taken":
                for name in message[1]:
                    if name in client.sent:
                        client.sent.discard(name)
                        with contextlib.suppress(OSError):  # removed already
                            shm.release(name)
                return True
            if op == "cancel":
                self._cancel(peer, client, message[1])
                return True
            if op == "giveback":
                segment = segment_of(message[1])
                if segment is not None:
                    client.sent.discard(segment[0])  # ours again, not the client's
                self._give_back(message[1])
                return True
            if op == "bye":
                return None
        except Exception:  # noqa: BLE001 - garbage (unpickling it can raise anything): not ours
            return False
        return False

    def _put(self, peer: Peer, client: _Client, payload: Any, slot: bool) -> Outcome:
        segment = segment_of(payload)
        with self.cond:
            if not self.open:
                closed = True
            else:
                closed = False
                if slot and client.granted:
                    client.granted.pop(0)
                    self.reserved -= 1
                elif not self._room():
                    self.held.append(peer)
                    return HOLD  # read again once there is room
                if segment is not None:
                    client.names.discard(segment[0])
                self.items.append(payload)
                self.cond.notify_all()
        if closed:
            discard(payload)
        return True

    def _ask(self, peer: Peer, client: _Client, rid: int, kind: str, block: bool,
             timeout: Optional[float], arg: Any) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            if not self.open:
                peer.send(dumps(("closed", rid)))
            elif kind == "get":
                if self.items:
                    self._send_item(peer, rid)
                elif self.reported < self.deaths:
                    self.reported = self.deaths
                    peer.send(dumps(("died", rid, *self.last_death)))
                elif not block or (deadline is not None and deadline <= time.monotonic()):
                    peer.send(dumps(("empty", rid)))
                else:
                    self.gets.append(_Ask(peer, rid, deadline, arg))
            elif kind == "room":
                if self._room():
                    self._grant(peer, rid, arg)
                elif not block or (deadline is not None and deadline <= time.monotonic()):
                    peer.send(dumps(("full", rid)))
                else:
                    self.rooms.append(_Ask(peer, rid, deadline, arg))
            elif kind == "names":
                names = [self._hand_out(client) for _ in range(max(1, min(int(arg), 64)))]
                peer.send(dumps(("names", rid, names)))
            elif kind == "size":
                peer.send(dumps(("size", rid, len(self.items))))
            else:
                raise ValueError(f"unknown queue request {kind!r}")

    def _send_item(self, peer: Peer, rid: int) -> None:
        payload = self.items.popleft()
        segment = segment_of(payload)
        if segment is not None:
            peer.data.sent.add(segment[0])
        peer.send(dumps(("item", rid, payload)))
        self.cond.notify_all()  # room for the owner's own puts

    def _grant(self, peer: Peer, rid: int, want_name: Any) -> None:
        client: _Client = peer.data
        self.reserved += 1
        client.granted.append(rid)
        name = self._hand_out(client) if want_name else None
        peer.send(dumps(("ok", rid, name)))

    def _cancel(self, peer: Peer, client: _Client, rid: int) -> None:
        with self.cond:
            for parked in (self.gets, self.rooms):
                for ask in parked:
                    if ask.peer is peer and ask.rid == rid:
                        parked.remove(ask)
                        break
            if rid in client.granted:  # granted before the cancel came: room goes back
                client.granted.remove(rid)
                self.reserved -= 1
                self.cond.notify_all()
        peer.send(dumps(("cancelled", rid)))

    def _give_back(self, payload: Any) -> None:
        with self.cond:
            if self.open:
                self.items.appendleft(payload)
                self.cond.notify_all()
                return
        discard(payload)

    def tick(self, now: float) -> Optional[float]:
        """Items to parked gets, room to parked reservations and held puts; timeouts."""
        with self.cond:
            gets, rooms = self.gets, self.rooms
            while self.items and gets:
                ask = gets.popleft()
                self._send_item(ask.peer, ask.rid)
            while rooms and self._room():
                ask = rooms.popleft()
                self._grant(ask.peer, ask.rid, ask.arg)
            free = (self.maxsize - len(self.items) - self.reserved) if self.maxsize else 0
            while self.held and free > 0 and self.server is not None:
                self.server.resume(self.held.popleft())
                free -= 1
            for parked, answer in ((gets, "empty"), (rooms, "full")):
                for ask in [a for a in parked if a.deadline is not None and a.deadline <= now]:
                    parked.remove(ask)
                    ask.peer.send(dumps((answer, ask.rid)))
            return min((a.deadline for a in (*gets, *rooms) if a.deadline is not None),
                       default=None)

    def dropped(self, peer: Peer, died: bool) -> None:
        client: Optional[_Client] = peer.data
        if client is None:
            return
        # Its memory first: a get told of its death finds nothing of it left.
        for name in client.names:  # handed out and never used, or made by a producer killed mid-put
            with contextlib.suppress(OSError):
                shm.release(name, free_now=True)
        for name in client.sent:  # sent, and not confirmed read: nobody else will read them
            with contextlib.suppress(OSError):
                shm.release(name, free_now=died)
        for data in peer.frames:  # what it sent that will never be served
            with contextlib.suppress(Exception):
                message = loads(data)
                if message[0] in ("put", "giveback"):
                    discard(message[1])
        with self.cond:
            for parked in (self.gets, self.rooms):
                for ask in [a for a in parked if a.peer is peer]:
                    parked.remove(ask)
            with contextlib.suppress(ValueError):
                self.held.remove(peer)
            self.reserved -= len(client.granted)
            client.granted.clear()
            if died and self.open:
                self._died(client.pid)
            self.cond.notify_all()

    def _died(self, pid: int) -> None:
        """A client's process ended without closing its end (the lock held)."""
        self.deaths += 1
        self.last_death = (
            f"process {pid} ended without closing its end of the queue (killed or crashed); "
            "items it would have put may never come", pid)
        # Every get waiting on the empty queue now is told (one here waits on the condition
        # and sees ``deaths`` change); if none is, because none waits or the queue has items
        # that it takes, the next get on the empty queue is (``reported``).
        if not self.items and self.gets:
            while self.gets:
                ask = self.gets.popleft()
                ask.peer.send(dumps(("died", ask.rid, *self.last_death)))
            self.reported = self.deaths

    def crashed(self) -> None:
        """The server's loop crashed: the queue is closed for everyone."""
        with self.cond:
            self.open = False
            self.cond.notify_all()
