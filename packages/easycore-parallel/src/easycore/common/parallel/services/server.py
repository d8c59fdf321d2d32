"""The service side of the process back-end: a server inside one runner worker.

[`Service.start`][easycore.common.parallel.services.Service.start] hosts a
service in a runner of one device,
[`ServiceHost`][easycore.common.parallel.services.server.ServiceHost]: its
``producer_init`` builds the object and starts a
[`ServiceServer`][easycore.common.parallel.services.server.ServiceServer];
its ``producer_end`` stops it. So the runner's process back-end gives the
service its process, its death detection (the owner's handle sees the exit),
its lifeline (the service dies with its owner) and its cleanup.

The connections are the connection layer's
([`connection.server`][easycore.common.parallel.connection.server]): a door
thread runs every handshake under its own deadline (a connection that
never answers holds nobody up, and a long call never delays a new client's
handshake), and one serve loop reads and writes every client from its own
buffers (a client stalled in the middle of a frame costs only that
buffer). ``ServiceServer`` is the handler: it answers the hello with the
transports, and runs each call in the serve loop, one at a time: the object
needs no locks, and a compare-and-set is atomic. Each client's calls run in
the order it sent them; across clients, round robin. A client that dies
(EOF) is dropped and the shared memory it was lent is swept; nothing else
notices. A crash of the loop itself (a bug, never a method's exception)
ends the process with exit code 70, so that clients see the death instead
of waiting.
"""

from __future__ import annotations

import os
import pickle

from ..connection.server import Handler, Peer, Server
from ..errors import ErrorReport
from ..runner import UnorderedRunner
from ..transport import shm
from . import wire
from .byvalue import encode
from .dispatch import Dispatcher, build, close_object

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Optional

__all__ = ["ServiceHost", "ServiceServer"]

EXIT_LOOP_CRASHED = 70


class _Client:
    """What the service keeps on one connection: its two transports (see wire)."""

    __slots__ = ("pid", "reply", "request")

    def __init__(self, reply: Any, request: Any, pid: int) -> None:
        self.reply = reply  # worker role: encodes results for this client
        self.request = request  # caller role: decodes this client's arguments
        self.pid = pid


class ServiceServer(Handler):
    """Serves one object's public methods on a Unix socket.

    Args:
        obj (Any): the service object.
        label (str): the service, for messages.
        address (str): the socket path (in a private directory).
        authkey (bytes): clients must know it.
        device (str): where the service runs, for the clients' errors.
    """

    closing_frame = wire.CLOSED

    def __init__(self, obj: Any, label: str, address: str, authkey: bytes, device: str) -> None:
        self.obj = obj
        self.label = label
        self.address = address
        self.device = device
        self.dispatcher = Dispatcher(obj, label)
        self._identity = shm.tracker_identity()
        self._server = Server(self, address, authkey, name="service")

    def start(self) -> None:
        """Listen, then serve from the server's threads."""
        self._server.start()

    def stop(self) -> None:
        """Finish the call in progress, tell every client, close everything."""
        self._server.stop()

    # ----------------------------------------------------------- the handler
    def greet(self, peer: Peer, hello_data: bytes) -> bytes:
        hello = wire.loads(hello_data)
        if type(hello) is not wire.Hello:
            raise ValueError(f"expected Hello, got {type(hello).__name__}")
        reply = hello.transport
        request = type(reply)()
        request.prepare()
        if hello.tracker is None or hello.tracker != self._identity:
            # Different resource trackers: the first segment of either side
            # is made under a name it registers itself (no name was handed
            # over yet), which the other side's tracker does not know (see
            # wire): stay in-band.
            wire.in_band(reply)
            wire.in_band(request)
        reply.bind_worker(0)
        peer.data = _Client(reply, request, hello.pid)
        info = wire.ServiceInfo(os.getpid(), self.label, self.device)
        return wire.dumps(wire.Welcome(request, info))

    def serve(self, peer: Peer, data: bytes) -> Optional[bool]:
        """Answer one message from ``peer``: True, None for its goodbye, False for garbage."""
        client: _Client = peer.data
        try:
            call = wire.loads(data)
            if type(call) is not wire.Call:
                return None if type(call) is wire.Bye else False
            if call.feedback:
                client.reply.on_feedback(call.feedback)
        except Exception:  # noqa: BLE001 - garbage (unpickling it can raise anything): not ours
            return False
        outcome = self._call(peer, client, call.method, call.payload)
        payload, report = None, outcome.report
        if report is None:
            try:
                payload, _ = encode(client.reply, outcome.value)
            except BaseException as exc:  # noqa: BLE001 - any pickling error goes to the caller
                hook = f"sending the result of {call.method}() of {self.label}"
                report = ErrorReport.capture(hook, exc)
        del outcome  # the result may hold the arguments: freed before the feedback below
        # Computed last: the arguments were released above, so their
        # shared memory goes back to the client now, not one call later.
        back = client.request.feedback(0)
        peer.send(wire.dumps(wire.Reply(call.call_id, payload, report, back)))
        return True

    def _call(self, peer: Peer, client: _Client, method: Any, payload: Any) -> wire.Outcome:
        try:
            args, kwargs = client.request.decode_results(0, payload)[0]
        except BaseException as exc:  # noqa: BLE001 - any unpickling error goes to the caller
            hook = f"receiving the arguments of {method}() of {self.label}"
            return wire.Outcome(None, ErrorReport.capture(hook, exc))
        return self.dispatcher.invoke(method, args, kwargs, client=peer.key)

    def dropped(self, peer: Peer, died: bool) -> None:
        self.dispatcher.drop_client(peer.key)
        client: Optional[_Client] = peer.data
        if client is None:
            return
        _cleanup(client.request)  # segments this client lent us, and any it left behind
        if died:
            # The client would have unlinked the segments we made for it; it
            # cannot now. A fresh instance with the same name prefix sweeps them.
            _cleanup(pickle.loads(pickle.dumps(client.reply)))
        elif getattr(client.reply, "prefix", None):
            # A reply made after the client cleaned up (it does not wait for
            # the replies of calls in flight as it says goodbye) went under a
            # name it had registered and has released by now: its file goes
            # here, the registration was the client's to remove.
            shm.remove_names(client.reply.prefix)

    def tick(self, now: float) -> Optional[float]:
        return self.dispatcher.expire(now)

    def crashed(self) -> None:
        os._exit(EXIT_LOOP_CRASHED)


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
