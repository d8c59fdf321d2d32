"""Where connections are accepted: one listener, two threads, no thread per client.

A [`Server`][easycore.common.parallel.connection.server.Server] listens on a
Unix socket for a [`Handler`][easycore.common.parallel.connection.server.Handler]
(a service's [`ServiceServer`][easycore.common.parallel.services.server.ServiceServer],
a ``Queue``'s broker), with two threads, whatever the number of clients:

* the **door** accepts connections and runs every handshake at once from
  one selector: the key's challenge each way
  ([`auth`][easycore.common.parallel.connection.auth]), then the protocol's
  hello, which the handler answers (``greet``). Each handshake has its own
  deadline (``hello_timeout``): a connection that never answers, or answers
  half a frame, costs only its buffer until then, and holds up no one;
  more than ``max_handshakes`` at once are turned away;
* the **serve loop** reads and writes every greeted client through one
  selector, without ever blocking on one: frames are assembled in a buffer
  per connection and what is sent waits in a queue per connection until the
  socket takes it ([`frames`][easycore.common.parallel.connection.frames]).
  It hands the handler one frame at a time (``serve``), round robin across
  clients, each client's in the order it sent them. A client that leaves
  more than ``max_unread_bytes`` unread is neither read nor served until
  it catches up; a handler may also *hold* a client (``HOLD``: a put on a
  full queue) until it calls ``resume``. The handler's timers (``tick``)
  run in the loop too, so a handler needs no thread and no lock of its own
  for what only the loop touches.

A client's frames that arrived before its end of the stream are still
served; then it is dropped (``dropped(peer, died=True)`` unless its
goodbye was served). ``stop`` closes the door, sends every client the
handler's ``closing_frame`` (their last replies first, for up to
``flush_timeout`` seconds) and drops them all. A crash of a loop itself (a
bug, never a handler's exception it reports) is printed and handed to the
handler (``crashed``): a service ends its process, so its clients see the
death instead of waiting.
"""

from __future__ import annotations

import contextlib
import functools
import os
import selectors
import socket
import sys
import threading
import time
import traceback
from collections import deque

from .._os import interrupts, spin
from .address import remove_quietly
from .auth import ServerProof
from .frames import READ_CHUNK, FrameReader, FrameWriter, frame

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Deque, Dict, List, Optional

__all__ = ["HOLD", "Handler", "Peer", "Server"]

#: ``Handler.serve``'s answer for "not now": the frame is served again after ``resume``
HOLD = "hold"
#: what ``Handler.serve`` returns: True (served), None (a goodbye: drop it),
#: False (garbage: drop it as dead), or ``HOLD``
Outcome = bool | None | str


class Peer:
    """One client connection: its socket, its buffers, and what the handler keeps on it."""

    __slots__ = (
        "_dirty",
        "data",
        "eof",
        "frames",
        "held",
        "key",
        "reader",
        "sock",
        "watching",
        "writer",
    )

    def __init__(self, sock: socket.socket, reader: FrameReader, writer: FrameWriter,
                 dirty: List[Peer]) -> None:
        self.sock = sock
        self.key = id(self)
        self.reader = reader
        self.writer = writer
        self.frames: Deque[bytes] = deque()  # complete, not yet served
        #: the handler's own state for this client (set by ``greet``)
        self.data: Any = None
        self.held = False  # the handler asked to serve nothing more until resumed
        self.eof = False  # the client closed its end; its frames are still served
        self.watching = 0  # the selector events registered
        self._dirty = dirty

    def send(self, data: bytes) -> None:
        """Queue ``data`` as one frame to this client (from the serve loop only)."""
        if self.writer.empty:
            self._dirty.append(self)
        self.writer.put(data)


class Handler:
    """What a [`Server`][easycore.common.parallel.connection.server.Server] asks of
    its owner; every method runs in one of the server's threads, never two at once
    for one client."""

    #: sent to every client when the server stops (and to one greeted as it stops)
    closing_frame: bytes = b""

    def greet(self, peer: Peer, hello: bytes) -> bytes:
        """Answer a client's first frame (its key was proven); runs in the door thread.

        Set ``peer.data`` here. Raise anything to turn the client away.

        Returns:
            bytes: the frame to send back.
        """
        raise NotImplementedError

    def serve(self, peer: Peer, data: bytes) -> Outcome:
        """Serve one frame of ``peer`` (in the serve loop); reply with ``peer.send``.

        Returns:
            True (served), None (a goodbye: the client is dropped), False
            (garbage: dropped as dead) or ``HOLD`` (serve it again after ``resume``).
        """
        raise NotImplementedError

    def dropped(self, peer: Peer, died: bool) -> None:
        """``peer`` is gone (in the serve loop); ``died``: without a served goodbye."""

    def tick(self, now: float) -> Optional[float]:
        """Timers, run by the serve loop every round and on ``Server.wake``.

        Returns:
            float or None: the ``time.monotonic()`` of the next timer, if any.
        """
        return None

    def crashed(self) -> None:
        """A loop of the server crashed (after printing the traceback)."""


class _Shake:
    """One handshake in progress at the door."""

    __slots__ = ("deadline", "proof", "proven", "reader", "sock", "writer")

    def __init__(self, sock: socket.socket, proof: ServerProof, deadline: float) -> None:
        self.sock = sock
        self.proof = proof
        self.proven = False
        self.deadline = deadline
        self.reader = FrameReader()
        self.writer = FrameWriter()


class Server:
    """A Unix-socket server for one handler; see the module docstring.

    Args:
        handler (Handler): what serves the clients.
        address (str): the socket path (in a private directory; mode 0600).
        authkey (bytes): clients must prove they hold it.
        name (str): for the threads' names, e.g. ``"service"``.
    """

    #: seconds a new connection may take to prove the key and say hello
    hello_timeout = 10.0
    #: handshakes in progress at once; more are turned away
    max_handshakes = 64
    #: seconds ``stop`` lets clients take their last frames
    flush_timeout = 2.0
    #: bytes a client may leave unread before it is neither read nor served
    max_unread_bytes = 64 << 20

    def __init__(self, handler: Handler, address: str, authkey: bytes,
                 name: str = "easycore") -> None:
        self.handler = handler
        self.address = address
        self._authkey = authkey
        self._name = name
        self._stopping = False
        self._accepting = True
        self._lock = threading.Lock()  # _incoming, _wake_open
        self._incoming: Deque[Peer] = deque()
        self._turn: Deque[Peer] = deque()  # peers with frames to serve, in order
        self._dirty: List[Peer] = []  # peers with frames queued to send
        self._sel: Optional[selectors.BaseSelector] = None
        self._rbuf = bytearray(READ_CHUNK)  # the serve loop's receive buffer
        self._rview = memoryview(self._rbuf)
        self._door_buf = bytearray(1 << 16)  # the door's: handshake frames are small
        self._listener: Optional[socket.socket] = None
        self._thread: Optional[threading.Thread] = None
        self._door: Optional[threading.Thread] = None
        self._wake_open = False
        self._spin = 0.0  # set by start

    # --------------------------------------------------------------- life
    def start(self) -> None:
        """Listen, then accept and serve from the server's two threads.

        A start that fails part way (no descriptor or thread to be had, a
        Ctrl-C: held until both threads run, then raised) leaves nothing
        behind: nothing listens, runs or stays open, and the address is gone.

        Raises:
            ValueError: ``EASYCORE_SPIN_US`` is no budget (see
                [`spin.budget`][easycore.common.parallel._os.spin.budget]).
            OSError: the address cannot be bound.
        """
        self._spin = spin.budget()  # a bad value: said before anything listens
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        bound = False
        fds: List[int] = []
        try:
            with interrupts.deferred():
                listener.bind(self.address)
                bound = True
                os.chmod(self.address, 0o600)  # the directory is private already; belt and braces
                listener.listen(128)
                listener.setblocking(False)
                self._listener = listener
                fds.extend(os.pipe())
                fds.extend(os.pipe())
                for fd in fds:
                    os.set_blocking(fd, False)
                self._wake_r, self._wake_w, self._door_r, self._door_w = fds
                self._wake_open = True
                self._thread = threading.Thread(target=self._run, args=(self._serve,),
                                                name=f"easycore-{self._name}-serve", daemon=True)
                self._door = threading.Thread(target=self._run, args=(self._door_loop,),
                                              name=f"easycore-{self._name}-door", daemon=True)
                self._thread.start()
                self._door.start()
        except BaseException:
            self._abandon(listener, bound, fds)
            raise

    def _abandon(self, listener: socket.socket, bound: bool, fds: List[int]) -> None:
        """Undo a ``start`` that failed part way (see ``start``)."""
        if self._door is not None and self._door.ident is None:
            self._door = None  # never started: nothing to wake or join
        if self._thread is not None and self._thread.ident is not None:
            self.stop()  # the serve loop's end closes the door, the listener and the address
            return
        # Never started (nor the door, which starts after it): ``stop`` has nothing to do.
        self._thread = None
        listener.close()
        if bound:  # (else the address is not ours)
            remove_quietly(self.address)
        self._wake_open = False
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def stop(self) -> None:
        """Close the door, send every client ``closing_frame``, drop them all; waits.

        Idempotent.
        """
        self._stopping = True
        if self._thread is None:
            return  # never started
        self.wake()
        if self._thread is not threading.current_thread():
            interrupts.join(self._thread)
        with self._lock:  # a late wake must not write to a reused descriptor number
            if not self._wake_open:
                return  # stopped already
            fds, self._wake_open = (self._wake_r, self._wake_w, self._door_r,
                                    self._door_w), False
        for fd in fds:
            os.close(fd)

    def wake(self) -> None:
        """Make the serve loop run its handler's ``tick`` now (from any thread)."""
        with self._lock:
            if self._wake_open:
                with contextlib.suppress(OSError):  # full: a wake is pending anyway
                    os.write(self._wake_w, b"\0")

    def resume(self, peer: Peer) -> None:
        """Serve ``peer`` again after its handler held it (from the serve loop only)."""
        if not peer.held:
            return
        peer.held = False
        self._watch(peer)
        if peer.frames and peer not in self._turn:
            self._turn.append(peer)

    def _run(self, loop: Any) -> None:
        try:
            loop()
        except BaseException:  # noqa: BLE001 - a bug here must not leave clients waiting forever
            traceback.print_exc()
            sys.stderr.flush()
            self.handler.crashed()

    # --------------------------------------------------------------- door
    def _door_loop(self) -> None:
        assert self._listener is not None
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, None)
        sel.register(self._door_r, selectors.EVENT_READ, "stop")
        shakes: Dict[int, _Shake] = {}
        try:
            while self._accepting:
                now = time.monotonic()
                for shake in [s for s in shakes.values() if s.deadline <= now]:
                    self._turn_away(sel, shakes, shake)  # silent, or too slow
                timeout = min((s.deadline for s in shakes.values()), default=None)
                for key, events in sel.select(None if timeout is None
                                              else max(0.0, timeout - now)):
                    if key.data is None:
                        self._accept(sel, shakes)
                    elif key.data != "stop":
                        self._shake(sel, shakes, key.data, events)
        finally:
            for shake in list(shakes.values()):
                self._turn_away(sel, shakes, shake)
            sel.close()

    def _accept(self, sel: selectors.BaseSelector, shakes: Dict[int, _Shake]) -> None:
        assert self._listener is not None
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors: the backlog keeps them for the next round
                return
            if len(shakes) >= self.max_handshakes:
                sock.close()  # too many at the door: this one is turned away
                continue
            sock.setblocking(False)
            proof = ServerProof(self._authkey)
            shake = _Shake(sock, proof, time.monotonic() + self.hello_timeout)
            shake.writer.put(proof.challenge())
            shakes[sock.fileno()] = shake
            sel.register(sock, selectors.EVENT_READ, shake)
            self._shake(sel, shakes, shake, selectors.EVENT_WRITE)

    def _shake(self, sel: selectors.BaseSelector, shakes: Dict[int, _Shake], shake: _Shake,
               events: int) -> None:
        """One step of a handshake: send what waits, read what came, answer it."""
        try:
            if events & selectors.EVENT_WRITE:
                done = shake.writer.flush(shake.sock)
                sel.modify(shake.sock, selectors.EVENT_READ
                           | (0 if done else selectors.EVENT_WRITE), shake)
            if not events & selectors.EVENT_READ:
                return
            n = shake.sock.recv_into(self._door_buf)
            if not n:
                raise EOFError
            for data in shake.reader.feed(memoryview(self._door_buf)[:n]):
                if not shake.proven:
                    shake.proven, answer = shake.proof.answer(data)
                    shake.writer.put(answer)
                    if not shake.proven:  # a wrong key: told so, then turned away
                        shake.writer.flush(shake.sock)
                        raise PermissionError
                    self._shake(sel, shakes, shake, selectors.EVENT_WRITE)
                else:
                    self._greet(sel, shakes, shake, data)
                    return
        except (BlockingIOError, InterruptedError):
            pass
        except Exception:  # noqa: BLE001
            # EOF, a broken or refused connection, garbage: that connection
            # is turned away, nothing else.
            self._turn_away(sel, shakes, shake)

    def _greet(self, sel: selectors.BaseSelector, shakes: Dict[int, _Shake], shake: _Shake,
               hello: bytes) -> None:
        sel.unregister(shake.sock)
        del shakes[shake.sock.fileno()]
        peer = Peer(shake.sock, shake.reader, shake.writer, self._dirty)
        try:
            welcome = self.handler.greet(peer, hello)
        except Exception:  # noqa: BLE001
            # Garbage (unpickling it can raise anything), or a hello the
            # handler refuses: that connection is turned away, nothing else.
            shake.sock.close()
            return
        with self._lock:
            accepted = not self._stopping
            if accepted:
                peer.writer.put(welcome)
                # Sent from here: the serve loop may be in a long call, and
                # the client waits for this. A welcome is small: the socket
                # takes it; what it does not, the loop sends.
                with contextlib.suppress(OSError):  # broken: the loop drops it
                    peer.writer.flush(peer.sock)
                self._incoming.append(peer)
        if accepted:
            self.wake()
            return
        _send_quietly(shake.sock, self.handler.closing_frame)  # greeted while stopping
        self.handler.dropped(peer, died=False)
        shake.sock.close()

    @staticmethod
    def _turn_away(sel: selectors.BaseSelector, shakes: Dict[int, _Shake],
                   shake: _Shake) -> None:
        with contextlib.suppress(KeyError, ValueError):  # never registered, or closed
            sel.unregister(shake.sock)
        shakes.pop(shake.sock.fileno(), None)
        shake.sock.close()

    # ---------------------------------------------------------- serve loop
    def _serve(self) -> None:
        sel = self._sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        peers: Dict[int, Peer] = {}
        turn = self._turn
        # A client calling in a loop sends its next frame microseconds after
        # its reply: look for it for a moment before sleeping (``_os.spin``).
        spinner = spin.Spinner(self._spin)
        select_now = functools.partial(sel.select, 0)
        next_timer: Optional[float] = None
        try:
            while not self._stopping:
                if turn:
                    timeout: Optional[float] = 0
                elif next_timer is not None:
                    timeout = max(0.0, next_timer - time.monotonic())
                else:
                    timeout = None
                for key, events in spinner.wait(select_now, sel.select, timeout):
                    if key.data is None:
                        _drain(self._wake_r)
                        self._adopt(peers)
                        continue
                    peer = peers.get(key.data)
                    if peer is None:
                        continue
                    if events & selectors.EVENT_WRITE and not self._flush(peer):
                        self._drop(peers, peer, died=True)
                        continue
                    if events & selectors.EVENT_READ:
                        self._receive(peer)
                    self._queue(peers, peer)
                if turn:  # one frame of one client per round: round robin
                    peer = turn.popleft()
                    if peer.key in peers and peer.frames and not peer.held \
                            and not self._full(peer):
                        data = peer.frames.popleft()
                        outcome = self.handler.serve(peer, data)
                        if outcome == HOLD:
                            peer.frames.appendleft(data)
                        self._after(peers, peer, outcome)
                # After serving: a frame served may have made work for timers
                # (an item for a waiting get), and their replies go out below.
                next_timer = self.handler.tick(time.monotonic())
                self._flush_dirty(peers)
        finally:
            self._finish(peers)

    def _queue(self, peers: Dict[int, Peer], peer: Peer) -> None:
        """Put ``peer`` in line if it has frames to serve; drop it once it has none after EOF."""
        if peer.held or self._full(peer):
            return
        if peer.frames:
            if peer not in self._turn:
                self._turn.append(peer)
        elif peer.eof:
            self._drop(peers, peer, died=True)

    def _after(self, peers: Dict[int, Peer], peer: Peer, outcome: Outcome) -> None:
        if outcome is None or outcome is False:  # a goodbye, or garbage
            self._drop(peers, peer, died=outcome is False)
            return
        if outcome == HOLD:
            peer.held = True
            self._watch(peer)
            return
        self._queue(peers, peer)

    def _adopt(self, peers: Dict[int, Peer]) -> None:
        with self._lock:
            incoming = list(self._incoming)
            self._incoming.clear()
        for peer in incoming:
            peers[peer.key] = peer
            self._watch(peer)
            if not peer.writer.empty:
                self._dirty.append(peer)
            if peer.frames:
                self._turn.append(peer)

    def _watch(self, peer: Peer) -> None:
        """Register what the serve loop waits for on ``peer``."""
        assert self._sel is not None
        read = not (peer.held or peer.eof or self._full(peer))
        events = (selectors.EVENT_READ if read else 0) | (
            0 if peer.writer.empty else selectors.EVENT_WRITE)
        if events == peer.watching:
            return
        with contextlib.suppress(KeyError, ValueError, OSError):  # closed: dropped next
            if not peer.watching:
                self._sel.register(peer.sock, events, peer.key)
            elif not events:
                self._sel.unregister(peer.sock)
            else:
                self._sel.modify(peer.sock, events, peer.key)
        peer.watching = events

    def _receive(self, peer: Peer) -> None:
        """Read what ``peer`` sent, without blocking; at EOF or garbage it reads no more."""
        try:
            # Into one reused buffer: recv(n) would allocate n bytes per call.
            n = peer.sock.recv_into(self._rbuf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            n = 0
        if n:
            try:
                peer.frames.extend(peer.reader.feed(self._rview[:n]))
                return
            except ValueError:
                pass  # garbage: what came before it is still served
        peer.eof = True
        self._watch(peer)

    def _full(self, peer: Peer) -> bool:
        """Whether ``peer`` left too many frames unread (then it is neither read nor served)."""
        return peer.writer.nbytes > self.max_unread_bytes

    def _flush(self, peer: Peer) -> bool:
        """Send ``peer``'s queued frames as far as its socket takes them; False: it broke."""
        try:
            peer.writer.flush(peer.sock)
        except OSError:
            return False
        self._watch(peer)
        return True

    def _flush_dirty(self, peers: Dict[int, Peer]) -> None:
        dirty, self._dirty[:] = list(self._dirty), []
        for peer in dirty:
            if peer.key not in peers:
                continue
            if not self._flush(peer):
                self._drop(peers, peer, died=True)
            elif not self._full(peer):
                self._queue(peers, peer)  # caught up: served again

    def _drop(self, peers: Dict[int, Peer], peer: Peer, died: bool) -> None:
        if peers.pop(peer.key, None) is None:
            return
        assert self._sel is not None
        with contextlib.suppress(KeyError, ValueError):  # never registered, or closed
            self._sel.unregister(peer.sock)
        peer.watching = 0
        peer.sock.close()
        with contextlib.suppress(ValueError):
            self._turn.remove(peer)
        self.handler.dropped(peer, died)

    def _finish(self, peers: Dict[int, Peer]) -> None:
        """Close the door, then tell every client (their last frames first)."""
        self._accepting = False
        remove_quietly(self.address)  # first: no new client finds a closing server
        with self._lock:
            if self._wake_open:
                with contextlib.suppress(OSError):
                    os.write(self._door_w, b"\0")
        if self._door is not None and self._door is not threading.current_thread():
            interrupts.join(self._door, 5.0)
        assert self._listener is not None
        self._listener.close()
        with self._lock:
            incoming = list(self._incoming)
            self._incoming.clear()
        for peer in incoming:
            peers[peer.key] = peer
        for peer in peers.values():
            peer.writer.put(self.handler.closing_frame)
        deadline = time.monotonic() + self.flush_timeout
        waiting = dict(peers)
        while waiting and time.monotonic() < deadline:
            for key in list(waiting):
                peer = waiting[key]
                try:
                    if peer.writer.flush(peer.sock):
                        del waiting[key]
                except OSError:
                    del waiting[key]
            if waiting:  # a client that does not read: wait for room, briefly
                writable = selectors.DefaultSelector()
                for peer in waiting.values():
                    writable.register(peer.sock, selectors.EVENT_WRITE)
                writable.select(max(0.0, deadline - time.monotonic()))
                writable.close()
        for peer in list(peers.values()):
            self._drop(peers, peer, died=False)
        assert self._sel is not None
        self._sel.close()


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except (BlockingIOError, InterruptedError):
        pass


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):  # a client that left: it needs no news
        sock.settimeout(1.0)
        for piece in frame(data):
            sock.sendall(piece)
