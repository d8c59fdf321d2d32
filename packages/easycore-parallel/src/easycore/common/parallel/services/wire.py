"""The messages between a client and a service, named once.

Every message is a small named tuple, so both sides read words, not
positions. Between a client and a local service each one is one pickle
(`dumps`, `loads`) on a ``multiprocessing.connection`` connection over a Unix
socket (authenticated with the service's key):

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
channel back (segments the receiver is done with). Large buffers go through
shared memory only when both ends share multiprocessing's resource tracker
(one process family: the owner, its services, its pool workers); otherwise
the tracker's books would disagree, so everything travels in-band.
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import Any, Dict, NamedTuple, Optional, Tuple, Union

from ..errors import ErrorReport

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
    "own_names",
    "tracker_identity",
]

_PROTOCOL = pickle.HIGHEST_PROTOCOL


# ------------------------------------------------------- client -> service
class Hello(NamedTuple):
    """A new connection's first message, after authentication."""

    #: the transport the service encodes its results with (worker role)
    transport: Any
    #: the client's resource tracker (see `tracker_identity`); shared memory
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
Message = Union[Hello, Call, Bye, Welcome, Reply, Closed]


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


def tracker_identity() -> Optional[Tuple[int, int]]:
    """Which resource tracker this process reports shared memory to.

    Processes of one family share the tracker's pipe (forked, spawned and
    forkserver children inherit it): equal identities mean shared memory may
    be handed over. None where there is no POSIX shared memory.

    Returns:
        tuple or None: ``(st_dev, st_ino)`` of the tracker's pipe.
    """
    if sys.platform == "win32":  # pragma: no cover
        return None
    try:
        from multiprocessing import resource_tracker

        fd = resource_tracker.getfd()
        if fd is None:
            return None
        st = os.fstat(fd)
    except (ImportError, OSError, RuntimeError):  # no tracker (it failed to start): in-band
        return None
    return (st.st_dev, st.st_ino)


def own_names(transport: Any) -> Any:
    """Make ``transport``'s peer register the names of the segments it makes.

    A service and its client may each outlive the other, so neither registers
    names for the other's segments (``SharedMemoryTransport.reserve_names``):
    a name released by a side that left could be made by the other after.
    """
    if hasattr(transport, "reserve_names"):
        transport.reserve_names = False
    return transport


def in_band(transport: Any) -> Any:
    """Make ``transport`` keep every buffer in the pickle (no shared memory)."""
    if hasattr(transport, "threshold"):
        transport.threshold = sys.maxsize
    return transport
