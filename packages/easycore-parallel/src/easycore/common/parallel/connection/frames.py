"""Frames on a non-blocking socket, one buffer each way per connection.

A server reads every client from one selector thread: a client that sends
half a frame (stopped with SIGSTOP, a slow sender, a header announcing 100 MB
then nothing) must cost only its own buffer, never a blocking ``recv`` that
stops every other client. So frames are assembled here from whatever bytes
arrive, and what is to be sent waits in a per-connection queue until the
socket takes it. Clients use the same two buffers
([`Link`][easycore.common.parallel.connection.client.Link]), so a send cut
short by its deadline leaves the rest of its frame queued, never half of it
on the wire.

The format is ``multiprocessing.connection``'s (``Connection.send_bytes``):
a 4-byte big-endian signed length, or ``-1`` and an 8-byte length for frames
over 2 GiB, then the bytes.
"""

from __future__ import annotations

import struct
from collections import deque

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Deque, List, Optional, Union

__all__ = ["FrameReader", "FrameWriter", "frame"]

_SHORT = struct.Struct("!i")
_LONG = struct.Struct("!Q")
#: bytes read from a socket per readiness event (fairness between clients)
READ_CHUNK = 1 << 20


#: frames up to this size go out as one piece (one system call; no reader
#: woken by a lone header)
_JOIN_BELOW = 1 << 16


def frame(data: bytes) -> List[bytes]:
    """The pieces that send ``data`` as one frame (header, then body)."""
    n = len(data)
    if n > 0x7FFFFFFF:
        return [_SHORT.pack(-1) + _LONG.pack(n), data]
    if n < _JOIN_BELOW:
        return [_SHORT.pack(n) + data]
    return [_SHORT.pack(n), data]


class FrameReader:
    """Assembles frames from the bytes of one connection."""

    __slots__ = ("_buf", "_need")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._need: Optional[int] = None  # body size, once the header is read

    def feed(self, data: Union[bytes, memoryview]) -> List[bytes]:
        """Add received bytes; return the frames they complete (maybe none)."""
        if not self._buf and self._need is None and len(data) >= 4:
            (n,) = _SHORT.unpack_from(data)
            if n >= 0 and len(data) == n + 4:  # the common case: exactly one frame
                return [bytes(data[4:])]
        self._buf += data
        frames = []
        while True:
            if self._need is None:
                if len(self._buf) < 4:
                    break
                (n,) = _SHORT.unpack_from(self._buf)
                head = 4
                if n == -1:
                    if len(self._buf) < 12:
                        break
                    (n,) = _LONG.unpack_from(self._buf, 4)
                    head = 12
                elif n < 0:
                    raise ValueError(f"bad frame header ({n})")
                del self._buf[:head]
                self._need = n
            if len(self._buf) < self._need:
                break
            frames.append(bytes(self._buf[: self._need]))
            del self._buf[: self._need]
            self._need = None
        return frames

    @property
    def partial(self) -> bool:
        """bool: whether part of a frame is waiting for the rest."""
        return self._need is not None or bool(self._buf)


class FrameWriter:
    """Frames waiting for one connection's socket to take them."""

    __slots__ = ("_pending", "nbytes")

    def __init__(self) -> None:
        self._pending: Deque[memoryview] = deque()
        #: bytes waiting
        self.nbytes = 0

    def put(self, data: bytes) -> None:
        """Queue ``data`` as one frame."""
        pieces = [memoryview(piece) for piece in frame(data) if piece]
        # One extend (C code): a KeyboardInterrupt cannot land between a
        # frame's header and its body, which would leave half a frame queued.
        self._pending.extend(pieces)
        self.nbytes += sum(len(p) for p in pieces)

    def flush(self, sock: object) -> bool:
        """Send what the socket takes without blocking; True when all is sent.

        Raises:
            OSError: the connection broke.
        """
        send = sock.send  # type: ignore[attr-defined]
        pending = self._pending
        while pending:
            try:
                sent = send(pending[0])
            except (BlockingIOError, InterruptedError):
                return False
            self.nbytes -= sent
            if sent < len(pending[0]):
                pending[0] = pending[0][sent:]
                return False
            pending.popleft()
        return True

    @property
    def empty(self) -> bool:
        """bool: whether nothing waits."""
        return not self._pending
