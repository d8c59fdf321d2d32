"""The messages between a client and a service, named once.

Every message is a small named tuple, so both sides read words, not
positions. Between a client and a local service each one is one pickle
(`dumps`, `loads`), one frame on a connection over a Unix socket (the
[`connection`][easycore.common.parallel.connection] layer's, authenticated
with the service's key):

* client -> service: `Hello` first, then one `Call` per call, and `Bye`
  before a graceful disconnect;
* service -> client: `Welcome` once, then one `Reply` per call, in call
  order, and `Closed` when the service stops (or is stopping when a client
  says hello).

Inside a service, running something (a method, ``handle.run``, a remote
reference's operation, the factory, ``close()``) ends in an `Outcome`: the
value it returned, or the `ErrorReport` of what it raised. The Ray back-end
sends outcomes and `ServiceInfo` through Ray; the process back-end turns an
outcome into a `Reply`.

On the socket a message is a plain tuple, its kind's number first: a named
tuple pickled as itself carries a reference to its class, which costs about
45 more bytes and a few microseconds more to pickle and unpickle each way,
measurable on a small call (about 55 us in all). `dumps` and `loads` are the
only places that see the numbers.

Arguments and results travel as easycore-parallel
[`Transport`][easycore.common.parallel.Transport] payloads, one transport per
direction and connection: the receiving side makes it (the "caller" role:
decodes, unlinks, recycles), the sending side gets it pickled in the
handshake (the "worker" role: encodes). ``feedback`` is the transport's
channel back (segments the receiver is done with, and the names it
registered for the sender's next segments, as a runner's caller does for
its workers: whoever may be killed while making a segment never registers
its name). Large buffers go through shared memory only when both ends share
multiprocessing's resource tracker (one process family: the owner, its
services, its pool workers): a connection's first segment each way is made
before any name was handed over, under a name its maker registers, which
another tracker would not know; so otherwise everything travels in-band.
"""

from __future__ import annotations

import pickle
import sys

from .._named_tuples import NamedTuple
from ..errors import ErrorReport

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Dict, Optional, Tuple

__all__ = [
    "Bye",
    "Call",
    "Closed",
    "Hello",
    "Message",
    "Outcome",
    "Reply",
    "ServiceInfo",
    "Welcome",
    "dumps",
    "in_band",
    "loads",
]

_PROTOCOL = pickle.HIGHEST_PROTOCOL


# ------------------------------------------------------- client -> service
class Hello(NamedTuple):
    """A new connection's first message, after authentication."""

    #: the transport the service encodes its results with (worker role)
    transport: Any
    #: the client's resource tracker (see ``shm.tracker_identity``); shared memory
    #: is handed over only when it equals the service's
    tracker: Optional[Tuple[int, int]]
    pid: int  #: the client's process


class Call(NamedTuple):
    """Run ``method`` with the arguments in ``payload``."""

    call_id: int  #: the client's number for the call; its `Reply` carries it back
    method: str  #: a public method, or ``dispatch.RUN`` / ``dispatch.REF``
    payload: Any  #: the transport's payload of ``(args, kwargs)``
    feedback: Any  #: transport data for the service (results the client is done with)


class Bye(NamedTuple):
    """The client disconnects; the service drops the connection."""


# ------------------------------------------------------- service -> client
class ServiceInfo(NamedTuple):
    """Which service answered: its process, name and device."""

    pid: int
    label: str
    device: str


class Welcome(NamedTuple):
    """The service's answer to `Hello`: calls may follow."""

    #: the transport the client encodes its arguments with (worker role)
    transport: Any
    info: ServiceInfo


class Reply(NamedTuple):
    """The end of one `Call`: its result, or the report of what it raised."""

    call_id: int
    #: the transport's payload of the result; None when ``report`` is set
    payload: Any
    #: what the call raised; None when it returned
    report: Optional[ErrorReport]
    feedback: Any  #: transport data for the client (arguments the service is done with)


class Closed(NamedTuple):
    """The service stops (or is stopping): no reply to anything else comes."""


#: what travels on a local service's connection
Message = Hello | Call | Bye | Welcome | Reply | Closed


# --------------------------------------------------------- inside a service
class Outcome(NamedTuple):
    """What running something in a service came to: a value, or a report."""

    value: Any  #: what it returned (None when it raised)
    report: Optional[ErrorReport]  #: what it raised; None when it returned


#: the kinds of messages on a connection, numbered
_NUMBERS: Dict[Any, int] = {
    kind: number for number, kind in enumerate((Hello, Call, Bye, Welcome, Reply, Closed))
}
#: each kind by its shape on the wire: (its number, the tuple's length)
_SHAPES: Dict[Tuple[int, int], Any] = {
    (number, 1 + len(kind._fields)): kind for kind, number in _NUMBERS.items()
}
_new = tuple.__new__  # what ``_make`` does, without its Python-level call


def dumps(message: Message) -> bytes:
    """Pickle one message: a plain tuple, its kind's number first."""
    return pickle.dumps((_NUMBERS[type(message)], *message), protocol=_PROTOCOL)


def loads(data: bytes) -> Message:
    """Unpickle one message pickled by `dumps`.

    Raises:
        ValueError: ``data`` is no message (unpickling it may raise anything else).
    """
    fields = pickle.loads(data)
    try:
        kind = _SHAPES[fields[0], len(fields)]
    except (TypeError, IndexError, KeyError):
        kind = None
    if kind is None or type(fields) is not tuple:
        raise ValueError(f"not a message: {type(fields).__name__}")
    return _new(kind, fields[1:])


#: `Closed`, pickled once (sent to every client when a service stops)
CLOSED = dumps(Closed())
#: `Bye`, pickled once
BYE = dumps(Bye())


def in_band(transport: Any) -> Any:
    """Make ``transport`` keep every buffer in the pickle (no shared memory)."""
    if hasattr(transport, "threshold"):
        transport.threshold = sys.maxsize
    return transport
