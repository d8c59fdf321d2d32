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

* the acceptor accepts connections on the Unix socket (authenticated by
  ``multiprocessing.connection`` with the service's key) and answers each
  client's hello, so a long call never delays a new client's handshake;
* the server loop waits on every client connection at once and runs one call
  at a time: the object needs no locks, and a compare-and-set is atomic.
  Each client's calls run in the order it sent them; across clients, in the
  order the loop sees them arrive. A client that dies (EOF) is dropped and
  the shared memory it was lent is swept; nothing else notices.

A crash of the loop itself (a bug, never a method's exception) ends the
process with exit code 70, so that clients see the death instead of waiting.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
import threading
import traceback
from collections import deque
from multiprocessing import Pipe, connection
from typing import Any, Deque, Dict, List, Optional

from ..errors import ErrorReport
from ..runner import UnorderedRunner
from . import wire
from .dispatch import build, close_object, invoke

__all__ = ["ServiceServer", "ServiceHost"]

EXIT_LOOP_CRASHED = 70


class _Peer:
    """One client connection and its two transports (see the wire module)."""

    __slots__ = ("conn", "reply", "request", "pid")

    def __init__(self, conn: Any, reply: Any, request: Any, pid: int) -> None:
        self.conn = conn
        self.reply = reply  # worker role: encodes results for this client
        self.request = request  # caller role: decodes this client's arguments
        self.pid = pid


class ServiceServer:
    """Serves one object's public methods on a Unix socket.

    Args:
        obj (Any): the service object.
        label (str): the service, for messages.
        address (str): the socket path (in a private directory).
        authkey (bytes): clients must know it.
        device (str): where the service runs, for the clients' errors.
    """

    #: seconds a new connection may take to say hello
    hello_timeout = 10.0

    def __init__(self, obj: Any, label: str, address: str, authkey: bytes, device: str) -> None:
        self.obj = obj
        self.label = label
        self.address = address
        self._authkey = authkey
        self.device = device
        self._stopping = False
        self._incoming: Deque[_Peer] = deque()
        self._wake_lock = threading.Lock()
        self._identity = wire.tracker_identity()
        self._listener: Any = None
        self._threads: List[threading.Thread] = []

    def start(self) -> None:
        """Listen, then serve from two threads."""
        self._listener = connection.Listener(
            self.address, family="AF_UNIX", backlog=128, authkey=self._authkey
        )
        os.chmod(self.address, 0o600)  # the directory is private already; belt and braces
        self._wake_r, self._wake_w = Pipe(duplex=False)
        for target, name in ((self._serve_loop, "serve"), (self._accept_loop, "accept")):
            thread = threading.Thread(target=target, name=f"easycore-service-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        """Finish the call in progress, tell every client, close everything.

        Args:
            timeout (float): seconds to wait for the acceptor.
        """
        self._stopping = True
        self._wake()
        self._threads[0].join()  # the serve loop: the call in progress finishes first
        try:  # wake the acceptor out of accept(); it sees _stopping and leaves
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(timeout)
                s.connect(self.address)
        except OSError:
            pass
        self._threads[1].join(timeout)
        self._listener.close()  # also unlinks the socket file
        while self._incoming:  # accepted while the loop was ending
            self._close_peer(self._incoming.popleft(), notify=True)
        self._wake_r.close()
        self._wake_w.close()

    def _wake(self) -> None:
        with self._wake_lock:
            try:
                self._wake_w.send_bytes(b"")
            except OSError:
                pass

    # -------------------------------------------------------------- acceptor
    def _accept_loop(self) -> None:
        while not self._stopping:
            try:
                conn = self._listener.accept()
            except Exception:  # a failed handshake, a client that died in it, or the end
                continue
            if self._stopping:
                conn.close()
                return
            try:
                peer = self._handshake(conn)
            except Exception:
                conn.close()
                continue
            self._incoming.append(peer)
            self._wake()

    def _handshake(self, conn: Any) -> _Peer:
        if not conn.poll(self.hello_timeout):
            raise TimeoutError("no hello")
        kind, reply, tracker, pid = pickle.loads(conn.recv_bytes())
        if kind != wire.HELLO:
            raise ValueError(f"expected hello, got {kind!r}")
        request = type(reply)()
        request.prepare()
        if tracker is None or tracker != self._identity:
            # Different resource trackers: handing over shared memory would
            # leave their books inconsistent (see wire), so stay in-band.
            wire.in_band(reply)
            wire.in_band(request)
        reply.bind_worker(0)
        info = {"pid": os.getpid(), "label": self.label, "device": self.device}
        conn.send_bytes(wire.dumps((wire.WELCOME, request, info)))
        return _Peer(conn, reply, request, pid)

    # ------------------------------------------------------------ serve loop
    def _serve_loop(self) -> None:
        try:
            self._serve()
        except BaseException:  # a bug here must not leave clients waiting forever
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(EXIT_LOOP_CRASHED)

    def _serve(self) -> None:
        peers: Dict[int, _Peer] = {}
        while not self._stopping:
            waitables = [self._wake_r] + [p.conn for p in peers.values()]
            for ready in connection.wait(waitables):
                if ready is self._wake_r:
                    while self._wake_r.poll():
                        self._wake_r.recv_bytes()
                    while self._incoming:
                        peer = self._incoming.popleft()
                        peers[id(peer.conn)] = peer
                    continue
                peer = peers[id(ready)]
                if not self._serve_one(peer):
                    del peers[id(ready)]
        for peer in peers.values():
            self._close_peer(peer, notify=True)

    def _serve_one(self, peer: _Peer) -> bool:
        """Read one message from ``peer`` and answer it; False when the peer is gone."""
        try:
            message = pickle.loads(peer.conn.recv_bytes())
            if message[0] == wire.BYE:
                self._close_peer(peer, notify=False)
                return False
            _, call_id, method, payload, feedback = message
            if feedback:
                peer.reply.on_feedback(feedback)
        except Exception:  # EOF: the client died (or sent garbage)
            self._close_peer(peer, notify=False, client_died=True)
            return False
        reply = self._call(peer, method, payload)
        try:
            if reply[0] == "ok":
                try:
                    encoded, _ = peer.reply.encode_results([reply[1]])
                    reply = (wire.OK, encoded)
                except BaseException as exc:
                    hook = f"sending the result of {method}() of {self.label}"
                    reply = (wire.ERROR, ErrorReport.capture(hook, exc))
            # Computed last: the arguments were released above, so their
            # shared memory goes back to the client now, not one call later.
            back = peer.request.feedback(0)
            peer.conn.send_bytes(wire.dumps((reply[0], call_id, reply[1], back)))
        except OSError:
            self._close_peer(peer, notify=False, client_died=True)
            return False
        return True

    def _call(self, peer: _Peer, method: Any, payload: Any) -> tuple:
        try:
            args, kwargs = peer.request.decode_results(0, payload)[0]
        except BaseException as exc:
            hook = f"receiving the arguments of {method}() of {self.label}"
            return ("error", ErrorReport.capture(hook, exc))
        return invoke(self.obj, self.label, method, args, kwargs)

    def _close_peer(self, peer: _Peer, notify: bool, client_died: bool = False) -> None:
        if notify:
            try:
                peer.conn.send_bytes(wire.dumps((wire.CLOSED,)))
            except OSError:
                pass
        try:
            peer.conn.close()
        except OSError:
            pass
        _cleanup(peer.request)  # segments this client lent us, and any it left behind
        if client_died:
            # The client would have unlinked the segments we lent it; it
            # cannot now. A fresh instance with the same name prefix sweeps them.
            _cleanup(pickle.loads(pickle.dumps(peer.reply)))


def _cleanup(transport: Any) -> None:
    try:
        transport.cleanup()
    except Exception:
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
