"""The services wire: named messages, one module (issue 21, item 5).

Each message kind has a name (``wire.Call``, ``wire.Reply``, ...) instead of
a positional tuple tagged with a string; on the socket it stays a plain tuple
no larger than before. A connection that sends anything else after its hello
(an unknown kind, the old positional tuple, a message meant for clients) is
dropped, and the service goes on serving everyone else.
"""

from __future__ import annotations

import pickle
import time

import pytest
from _services_support import Tool

from easycore.common.parallel import ErrorReport, PickleTransport
from easycore.common.parallel.connection.client import connect
from easycore.common.parallel.services import Service, wire
from easycore.common.parallel.services.byvalue import encode, wrap_call
from easycore.common.parallel.services.dispatch import RUN, Dispatcher

pytestmark = pytest.mark.timeout(120)

_REPORT = ErrorReport("hook", "ValueError", "bad", "Traceback ...", None)

MESSAGES = [
    wire.Hello(PickleTransport(), (1, 2), 123),
    wire.Call(7, "echo", b"payload", [("segment", 1)]),
    wire.Bye(),
    wire.Welcome(PickleTransport(), wire.ServiceInfo(123, "service 'x'", "cpu")),
    wire.Reply(7, b"payload", None, None),
    wire.Reply(8, None, _REPORT, [("segment", 2)]),
    wire.Closed(),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_comes_back_as_its_own_kind(message):
    back = wire.loads(wire.dumps(message))
    assert type(back) is type(message)
    assert back._fields == message._fields
    assert [type(v) for v in back] == [type(v) for v in message]
    if not isinstance(message, (wire.Hello, wire.Welcome)):  # transports compare by identity
        assert back == message


@pytest.mark.parametrize("data", [
    pickle.dumps(5),
    pickle.dumps(()),
    pickle.dumps((99,)),  # no such kind
    pickle.dumps((-1,)),  # not an index from the end
    pickle.dumps((1, 7, "echo")),  # a Call missing fields
    pickle.dumps((5, "extra")),  # Closed with a field
    pickle.dumps(("call", 7, "echo", b"", None)),  # the positional tuple of before
    pickle.dumps([1, 7, "echo", b"", None]),  # a list, not a tuple
    pickle.dumps({0: None}),
], ids=["int", "empty", "unknown", "negative", "short", "long", "old", "list", "dict"])
def test_what_is_no_message_is_refused_by_name(data):
    with pytest.raises(ValueError, match="not a message"):
        wire.loads(data)


def test_a_named_message_costs_no_more_bytes_than_the_tuple_it_replaced():
    t = PickleTransport()
    payload, _ = encode(t, wrap_call((1,), {}))
    result, _ = encode(t, 1)
    old_call = pickle.dumps(("call", 17, "echo", payload, None), protocol=pickle.HIGHEST_PROTOCOL)
    old_reply = pickle.dumps(("ok", 17, result, None), protocol=pickle.HIGHEST_PROTOCOL)
    assert len(wire.dumps(wire.Call(17, "echo", payload, None))) <= len(old_call)
    assert len(wire.dumps(wire.Reply(17, result, None, None))) <= len(old_reply)


def test_the_dispatcher_says_what_a_call_came_to():
    dispatcher = Dispatcher(Tool(), "service 'tool'")
    returned = dispatcher.invoke("echo", (1,), {"k": 2})
    assert returned == wire.Outcome(((1,), {"k": 2}), None)
    raised = dispatcher.invoke("no_such_method", (), {})
    assert raised.value is None
    assert raised.report.exc_type == "AttributeError"
    assert "no_such_method" in raised.report.message
    ran = dispatcher.invoke(RUN, (len, False, [1, 2, 3]), {})
    assert ran == wire.Outcome(3, None)


class _Raw:
    """A connection layer's link, read and written a frame at a time, as in a test."""

    def __init__(self, link):
        self.link = link

    def send_bytes(self, data):
        assert self.link.send(data, time.monotonic() + 30)

    def recv_bytes(self):
        data = self.link.recv(time.monotonic() + 30)
        assert data is not None, "no answer within 30 s"
        return data

    def close(self):
        self.link.close()


def _raw_client(handle):
    """An authenticated connection that has said hello, as a handle's channel does."""
    target = handle._state.target
    transport = PickleTransport()
    transport.prepare()
    hello = wire.dumps(wire.Hello(transport, None, 0))
    link, data = connect(target.address, target.authkey, hello, time.monotonic() + 30)
    conn = _Raw(link)
    welcome = wire.loads(data)
    assert type(welcome) is wire.Welcome
    assert welcome.info.pid == target.pid
    request = welcome.transport
    request.bind_worker(0)
    return conn, request, transport


def test_a_raw_client_speaks_the_named_wire(no_leaks):
    with Service.start(Tool) as h:
        conn, request, transport = _raw_client(h)
        try:
            payload, _ = encode(request, wrap_call((1,), {}))
            conn.send_bytes(wire.dumps(wire.Call(41, "echo", payload, None)))
            payload, _ = encode(request, wrap_call((), {}))
            conn.send_bytes(wire.dumps(wire.Call(42, "no_such_method", payload, None)))
            returned = wire.loads(conn.recv_bytes())
            assert type(returned) is wire.Reply
            assert (returned.call_id, returned.report) == (41, None)
            assert transport.decode_results(0, returned.payload)[0] == ((1,), {})
            raised = wire.loads(conn.recv_bytes())
            assert type(raised) is wire.Reply
            assert (raised.call_id, raised.payload) == (42, None)
            assert raised.report.exc_type == "AttributeError"
            conn.send_bytes(wire.BYE)
        finally:
            conn.close()
            transport.cleanup()


@pytest.mark.parametrize("sent", [
    ("call", 0, "echo", None, None),  # the positional tuple of before
    wire.Welcome(None, wire.ServiceInfo(0, "me", "cpu")),  # a message meant for clients
    b"\x80\x05not a pickle",
], ids=["old-tuple", "wrong-kind", "garbage"])
def test_a_connection_that_sends_no_call_is_dropped_alone(no_leaks, sent):
    with Service.start(Tool) as h:
        conn, _, transport = _raw_client(h)
        try:
            if isinstance(sent, wire.Welcome):
                data = wire.dumps(sent)
            elif isinstance(sent, tuple):
                data = pickle.dumps(sent, protocol=pickle.HIGHEST_PROTOCOL)
            else:
                data = sent
            conn.send_bytes(data)
            with pytest.raises(EOFError):  # the assertion in _Raw: neither answer nor drop
                conn.recv_bytes()  # dropped: no reply, just the end of the stream
        finally:
            conn.close()
            transport.cleanup()
        assert h.call("echo", 1, timeout=30) == ((1,), {})  # everyone else is served
