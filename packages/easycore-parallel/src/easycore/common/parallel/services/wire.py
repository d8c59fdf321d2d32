"""The messages between a client and a local service, named once.

Every message is one pickled tuple on a ``multiprocessing.connection``
connection over a Unix socket (authenticated with the service's key):

* client -> service: ``(HELLO, reply_transport, tracker, pid)`` first, then
  ``(CALL, call_id, method, payload, feedback)`` per call, and ``(BYE,)``
  before a graceful disconnect;
* service -> client: ``(WELCOME, request_transport, info)`` once, then
  ``(OK, call_id, payload, feedback)`` or ``(ERROR, call_id, ErrorReport,
  feedback)`` per call, in call order, and ``(CLOSED,)`` when the service stops.

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
from typing import Any, Optional, Tuple

__all__ = [
    "HELLO", "WELCOME", "CALL", "OK", "ERROR", "CLOSED", "BYE",
    "dumps", "tracker_identity", "in_band",
]

HELLO = "hello"
WELCOME = "welcome"
CALL = "call"
OK = "ok"
ERROR = "error"
CLOSED = "closed"
BYE = "bye"

_PROTOCOL = pickle.HIGHEST_PROTOCOL


def dumps(message: tuple) -> bytes:
    """Pickle one message."""
    return pickle.dumps(message, protocol=_PROTOCOL)


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
    except Exception:
        return None
    return (st.st_dev, st.st_ino)


def in_band(transport: Any) -> Any:
    """Make ``transport`` keep every buffer in the pickle (no shared memory)."""
    if hasattr(transport, "threshold"):
        transport.threshold = sys.maxsize
    return transport
