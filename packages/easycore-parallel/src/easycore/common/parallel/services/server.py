"""The service side of the process back-end: a listener inside one runner worker.

[`Service.start`][easycore.common.parallel.services.Service.start] hosts a
service in a runner of one device,
[`ServiceHost`][easycore.common.parallel.services.server.ServiceHost]: its
``producer_init`` builds the object and starts a
[`ServiceServer`][easycore.common.parallel.services.server.ServiceServer];
its ``producer_end`` stops it. So the runner's process back-end gives the
service its process, its death detection (the owner's handle sees the exit),
its lifeline (the service dies with its owner) and its cleanup.

Threads in the service process (the worker's main thread stays the
runner's):

* the acceptor accepts connections and hands each to a short-lived
  handshake thread (below);
* the serve loop reads and writes every client through one selector, without ever blocking on one
  client: frames are assembled in a buffer per connection and replies queue
  until the socket takes them
  ([`frames`][easycore.common.parallel.services.frames]), so a client stalled
  in the middle of a frame (SIGSTOP, a slow sender, a header announcing
  100 MB then nothing) costs only its own buffer. It runs one call at a
  time: the object needs no locks, and a compare-and-set is atomic. Each
  client's calls run in the order it sent them; across clients, round robin.
  A client that dies (EOF) is dropped and the shared memory it was lent is
  swept; nothing else notices.
* one short-lived thread per new connection runs the authentication
  challenge and the hello under a deadline
  ([`handshake`][easycore.common.parallel.services.handshake]), so a
  connection that never answers holds nobody up, and a long call never
  delays a new client's handshake.

A crash of the loop itself (a bug, never a method's exception) ends the
process with exit code 70, so that clients see the death instead of waiting.

(Over 400 lines on purpose: one service's whole life on the server's side: the selector
loop, handshakes, calls and shutdown.)
"""

from __future__ import annotations

import contextlib
import os
import pickle
import selectors
import socket
import sys
import threading
import time
import traceback
from collections import deque
from multiprocessing import connection
from typing import Any, Deque, Dict, List, Optional, Set

from ..errors import ErrorReport
from ..runner import UnorderedRunner
from . import wire
from .byvalue import encode
from .dispatch import Dispatcher, build, close_object
from .frames import READ_CHUNK, FrameReader, FrameWriter
from .frames import frame as frame_pieces
from .handshake import connection_on, watchdog

__all__ = ["ServiceHost", "ServiceServer"]

EXIT_LOOP_CRASHED = 70


class _Peer:
    """One client connection: its socket, buffers and two transports (see wire)."""

    __slots__ = (
        "frames",
        "key",
        "pid",
        "reader",
        "reply",
        "request",
        "sock",
        "watching",
        "writer",
    )

    def __init__(self, sock: socket.socket, reply: Any, request: Any, pid: int) -> None:
        self.sock = sock
        self.reply = reply  # worker role: encodes results for this client
        self.request = request  # caller role: decodes this client's arguments
        self.pid = pid
        self.reader = FrameReader()
        self.writer = FrameWriter()
        self.frames: Deque[bytes] = deque()  # complete, not yet served
        self.key = id(self)
        self.watching = False  # registered for EVENT_WRITE (replies wait)


class ServiceServer:
    """Serves one object's public methods on a Unix socket.

    Args:
        obj (Any): the service object.
        label (str): the service, for messages.
        address (str): the socket path (in a private directory).
        authkey (bytes): clients must know it.
        device (str): where the service runs, for the clients' errors.
    """

    #: seconds a new connection may take to authenticate and say hello
    hello_timeout = 10.0
    #: connections authenticating at once; more are turned away
    max_handshakes = 64
    #: seconds ``stop`` lets clients take their last replies
    flush_timeout = 2.0
    #: bytes of replies a client may leave unread before its calls wait
    max_unread_bytes = 64 << 20

    def __init__(self, obj: Any, label: str, address: str, authkey: bytes, device: str) -> None:
        self.obj = obj
        self.label = label
        self.address = address
        self._authkey = authkey
        self.device = device
        self.dispatcher = Dispatcher(obj, label)
        self._stopping = False
        self._accepting = True
        self._lock = threading.Lock()  # _accepting, _incoming, _handshakes
        self._incoming: Deque[_Peer] = deque()
        self._handshakes: Set[socket.socket] = set()
        self._handshake_threads: List[threading.Thread] = []
        self._identity = wire.tracker_identity()
        self._listener: Optional[socket.socket] = None
        self._thread: Optional[threading.Thread] = None
        self._rbuf = bytearray(READ_CHUNK)  # the serve loop's receive buffer
        self._rview = memoryview(self._rbuf)

    def start(self) -> None:
        """Listen, then serve from the serve thread."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.address)
            os.chmod(self.address, 0o600)  # the directory is private already; belt and braces
            listener.listen(128)
        except BaseException:
            listener.close()
            raise
        self._listener = listener
        self._wake_r, self._wake_w = os.pipe()
        self._wake_fds_open = True
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._thread = threading.Thread(target=self._serve_loop, name="easycore-service-serve",
                                        daemon=True)
        self._thread.start()
        self._acceptor = threading.Thread(target=self._accept_loop,
                                          name="easycore-service-accept", daemon=True)
        self._acceptor.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Finish the call in progress, tell every client, close everything.

        Args:
            timeout (float): seconds to wait for handshakes in progress.
        """
        self._stopping = True
        self._wake()
        assert self._thread is not None
        self._thread.join()  # the call in progress finishes first
        with self._lock:
            pending = list(self._handshakes)
            threads = list(self._handshake_threads)
        for sock in pending:  # ends their blocked reads
            _shutdown(sock)
        for thread in threads:
            thread.join(timeout)
        with self._lock:  # a late handshake thread must not write to a reused fd number
            fds, self._wake_fds_open = (self._wake_r, self._wake_w), False
        for fd in fds:
            os.close(fd)

    def _wake(self) -> None:
        with self._lock:
            if not self._wake_fds_open:
                return
            with contextlib.suppress(OSError):  # full: a wake is pending anyway
                os.write(self._wake_w, b"\0")

    # ------------------------------------------------------------- handshakes
    def _accept_loop(self) -> None:
        assert self._listener is not None
        while self._accepting:
            try:
                sock, _ = self._listener.accept()
            except InterruptedError:
                continue
            except OSError:  # shut down by stop (or out of descriptors: try again)
                if not self._accepting:
                    return
                time.sleep(0.05)
                continue
            with self._lock:
                if len(self._handshakes) >= self.max_handshakes:
                    sock.close()  # too many at the door: this one is turned away
                    continue
                self._handshakes.add(sock)
                self._handshake_threads = [t for t in self._handshake_threads if t.is_alive()]
                thread = threading.Thread(target=self._handshake, args=(sock,),
                                          name="easycore-service-hello", daemon=True)
                self._handshake_threads.append(thread)
            thread.start()

    def _handshake(self, sock: socket.socket) -> None:
        """Authenticate and greet one client, within ``hello_timeout``."""
        peer = None
        conn = None
        try:
            sock.setblocking(True)
            conn = connection_on(sock)
            with watchdog(sock, time.monotonic() + self.hello_timeout):
                connection.deliver_challenge(conn, self._authkey)
                connection.answer_challenge(conn, self._authkey)
                peer = self._greet(conn, sock)
        except Exception:  # noqa: BLE001
            # A wrong key, a silent or dead client, garbage (unpickling it can
            # raise anything): that connection is turned away, nothing else.
            peer = None
        finally:
            if conn is not None:
                conn.close()  # the duplicate descriptor; the peer keeps ``sock``
        with self._lock:
            self._handshakes.discard(sock)
            if peer is not None and self._accepting:
                sock.setblocking(False)
                self._incoming.append(peer)
                peer = None
                accepted = True
            else:
                accepted = False
        if accepted:
            self._wake()
            return
        if peer is not None:  # greeted while the service stopped
            _send_quietly(sock, wire.CLOSED)
            _drop_transports(peer, client_died=False)
        sock.close()

    def _greet(self, conn: Any, sock: socket.socket) -> _Peer:
        if not conn.poll(self.hello_timeout):
            raise TimeoutError("no hello")
        hello = wire.loads(conn.recv_bytes())
        if type(hello) is not wire.Hello:
            raise ValueError(f"expected Hello, got {type(hello).__name__}")
        reply = hello.transport
        request = wire.own_names(type(reply)())
        request.prepare()
        if hello.tracker is None or hello.tracker != self._identity:
            # Different resource trackers: handing over shared memory would
            # leave their books inconsistent (see wire), so stay in-band.
            wire.in_band(reply)
            wire.in_band(request)
        reply.bind_worker(0)
        if self._stopping:
            conn.send_bytes(wire.CLOSED)
            raise ConnectionAbortedError("stopping")
        info = wire.ServiceInfo(os.getpid(), self.label, self.device)
        conn.send_bytes(wire.dumps(wire.Welcome(request, info)))
        return _Peer(sock, reply, request, hello.pid)

    # ------------------------------------------------------------ serve loop
    def _serve_loop(self) -> None:
        try:
            self._serve()
        except BaseException:  # noqa: BLE001 - a bug here must not leave clients waiting forever
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(EXIT_LOOP_CRASHED)

    def _serve(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        peers: Dict[int, _Peer] = {}
        turn: Deque[int] = deque()  # keys of peers with frames to serve, in order
        try:
            while not self._stopping:
                for key, events in sel.select(0 if turn else None):
                    if key.data == "wake":
                        _drain(self._wake_r)
                        self._adopt(sel, peers)
                    else:
                        peer = peers.get(key.data)
                        if peer is None:
                            continue
                        alive = True
                        if events & selectors.EVENT_WRITE:
                            alive = self._flush(sel, peer)
                        if alive and events & selectors.EVENT_READ:
                            alive = self._receive(peer)
                        if not alive:
                            self._drop(sel, peers, peer, client_died=True)
                            continue
                        if peer.frames and peer.key not in turn and not self._full(peer):
                            turn.append(peer.key)
                if turn:  # one frame of one client per round: round robin
                    peer_key = turn.popleft()
                    peer = peers.get(peer_key)
                    if peer is None or not peer.frames or self._full(peer):
                        continue  # a full one is served again once it reads
                    outcome = self._serve_one(peer, peer.frames.popleft())
                    if outcome is True and not self._flush(sel, peer):
                        outcome = False
                    if outcome is not True:  # None: a goodbye; False: gone
                        self._drop(sel, peers, peer, client_died=outcome is False)
                    elif peer.frames:
                        turn.append(peer_key)
        finally:
            self._finish(sel, peers)

    def _adopt(self, sel: selectors.BaseSelector, peers: Dict[int, _Peer]) -> None:
        with self._lock:
            incoming = list(self._incoming)
            self._incoming.clear()
        for peer in incoming:
            peers[peer.key] = peer
            sel.register(peer.sock, selectors.EVENT_READ, peer.key)

    def _receive(self, peer: _Peer) -> bool:
        """Read what ``peer`` sent (without blocking); False at EOF or garbage."""
        try:
            # Into one reused buffer: recv(n) would allocate n bytes per call.
            n = peer.sock.recv_into(self._rbuf)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        if not n:
            return False
        try:
            peer.frames.extend(peer.reader.feed(self._rview[:n]))
        except ValueError:
            return False
        return True

    def _full(self, peer: _Peer) -> bool:
        """Whether ``peer`` left too many replies unread (then it is not served)."""
        return peer.writer.nbytes > self.max_unread_bytes

    def _flush(self, sel: selectors.BaseSelector, peer: _Peer) -> bool:
        """Send ``peer``'s queued replies as far as its socket takes them.

        A client that leaves more than ``max_unread_bytes`` unread is not
        read from (nor served) until it catches up: its own sends block, no
        one else's.
        """
        try:
            done = peer.writer.flush(peer.sock)
        except OSError:
            return False
        if done and not peer.watching:
            return True  # the common case: sent at once, nothing to change
        events = 0 if self._full(peer) else selectors.EVENT_READ
        events |= 0 if done else selectors.EVENT_WRITE
        sel.modify(peer.sock, events, peer.key)
        peer.watching = not done
        return True

    def _drop(self, sel: selectors.BaseSelector, peers: Dict[int, _Peer], peer: _Peer,
              client_died: bool) -> None:
        peers.pop(peer.key, None)
        with contextlib.suppress(KeyError, ValueError):  # never registered, or closed
            sel.unregister(peer.sock)
        peer.sock.close()
        self.dispatcher.drop_client(peer.key)
        _drop_transports(peer, client_died)

    def _finish(self, sel: selectors.BaseSelector, peers: Dict[int, _Peer]) -> None:
        """Close the door, then tell every client (their last replies first)."""
        with self._lock:
            self._accepting = False
            incoming = list(self._incoming)
            self._incoming.clear()
        remove_socket_file(self.address)  # first: no new client finds a closing service
        assert self._listener is not None
        _shutdown(self._listener)  # ends the acceptor's accept()
        self._acceptor.join(5.0)
        self._listener.close()
        for peer in incoming:
            peers[peer.key] = peer
            sel.register(peer.sock, selectors.EVENT_READ, peer.key)
        for peer in peers.values():
            peer.writer.put(wire.CLOSED)
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
            self._drop(sel, peers, peer, client_died=False)
        sel.close()

    def _serve_one(self, peer: _Peer, data: bytes) -> Optional[bool]:
        """Answer one message from ``peer``: True, or None for its goodbye,
        False when it sent garbage."""
        try:
            call = wire.loads(data)
            if type(call) is not wire.Call:
                return None if type(call) is wire.Bye else False
            if call.feedback:
                peer.reply.on_feedback(call.feedback)
        except Exception:  # noqa: BLE001 - garbage (unpickling it can raise anything): not ours
            return False
        outcome = self._call(peer, call.method, call.payload)
        payload, report = None, outcome.report
        if report is None:
            try:
                payload, _ = encode(peer.reply, outcome.value)
            except BaseException as exc:  # noqa: BLE001 - any pickling error goes to the caller
                hook = f"sending the result of {call.method}() of {self.label}"
                report = ErrorReport.capture(hook, exc)
        del outcome  # the result may hold the arguments: freed before the feedback below
        # Computed last: the arguments were released above, so their
        # shared memory goes back to the client now, not one call later.
        back = peer.request.feedback(0)
        peer.writer.put(wire.dumps(wire.Reply(call.call_id, payload, report, back)))
        return True

    def _call(self, peer: _Peer, method: Any, payload: Any) -> wire.Outcome:
        try:
            args, kwargs = peer.request.decode_results(0, payload)[0]
        except BaseException as exc:  # noqa: BLE001 - any unpickling error goes to the caller
            hook = f"receiving the arguments of {method}() of {self.label}"
            return wire.Outcome(None, ErrorReport.capture(hook, exc))
        return self.dispatcher.invoke(method, args, kwargs, client=peer.key)


def _drop_transports(peer: _Peer, client_died: bool) -> None:
    _cleanup(peer.request)  # segments this client lent us, and any it left behind
    if client_died:
        # The client would have unlinked the segments we lent it; it
        # cannot now. A fresh instance with the same name prefix sweeps them.
        _cleanup(pickle.loads(pickle.dumps(peer.reply)))


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except (BlockingIOError, InterruptedError):
        pass


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # not connected (any more): nothing to end
        sock.shutdown(socket.SHUT_RDWR)


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):  # a client that left: it needs no news
        sock.settimeout(1.0)
        for piece in frame_pieces(data):
            sock.sendall(piece)


def remove_socket_file(path: str) -> None:
    """Unlink the socket file (ours: the directory is private)."""
    with contextlib.suppress(OSError):  # gone already
        os.unlink(path)


def _cleanup(transport: Any) -> None:
    try:  # noqa: SIM105 - the except below says why it is broad
        transport.cleanup()
    except Exception:  # noqa: BLE001
        # Any Transport class (the client's choice) cleans up here, in the
        # serve loop: its failure must not end the loop for every client, and
        # the connection is gone either way.
        pass


class ServiceHost(UnorderedRunner):
    """The runner that hosts one service (one device, one worker).

    ``cfg`` holds ``spec`` (the pickled factory and arguments), ``label``,
    ``address`` and ``authkey`` (hex). Subclass it together with another
    runner family to host services there, e.g. with
    ``easycore.torch.parallel.UnorderedRunner`` for CUDA devices.
    """

    @staticmethod
    def producer_init(device: str, cfg: Any) -> None:
        """Build the object, then listen (a factory error fails ``Service.start``)."""
        obj = build(cfg.spec)
        server = ServiceServer(obj, cfg.label, cfg.address, bytes.fromhex(cfg.authkey), device)
        server.start()
        cfg.server = server

    @staticmethod
    def producer_end(device: str, cfg: Any) -> None:
        """Stop serving, then call the object's ``close()`` if it has one."""
        server: Optional[ServiceServer] = cfg.get("server")
        if server is not None:
            server.stop()
            close_object(server.obj)
