"""The client's side: connect under a deadline, then frames both ways, each wait bounded.

[`connect`][easycore.common.parallel.connection.client.connect] opens a Unix
socket, proves the key ([`auth`][easycore.common.parallel.connection.auth])
and exchanges the protocol's hello and welcome, all before one deadline,
so a server that accepts and then says nothing (stopped with SIGSTOP, or
not a server of ours) costs the caller its timeout and no more.

A [`Link`][easycore.common.parallel.connection.client.Link] is the
connection after that: a non-blocking socket with a buffer each way
([`frames`][easycore.common.parallel.connection.frames]). ``send`` queues
a whole frame and sends what the socket takes before the deadline; what it
does not take stays queued, whole, and goes out with the next ``send`` or
``flush``, so a call that runs out of time never leaves half a frame that
the next one would corrupt. ``recv`` returns the next frame or None at the
deadline. Every wait is a ``poll`` on the socket with the time left,
after a short spin while the answers come quickly
([`spin`][easycore.common.parallel._os.spin]).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import select
import socket
import time
from collections import deque
from collections.abc import Callable

from .._os.spin import Spinner, budget
from .auth import ClientProof
from .frames import READ_CHUNK, FrameReader, FrameWriter

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Deque, List, Optional, Tuple

__all__ = ["Link", "connect"]

#: called while a wait lasts, every ``tick`` seconds; raises to end the wait
Check = Callable[[], None] | None


def _left(deadline: Optional[float]) -> Optional[float]:
    return None if deadline is None else deadline - time.monotonic()


class Link:
    """One connection's socket and its two buffers; one user at a time.

    Args:
        sock (socket.socket): a connected stream socket (made non-blocking here).
        spin (float): the longest spin before a blocking wait (seconds; 0: never).
    """

    #: seconds between calls of a wait's ``check``
    tick = 0.25

    def __init__(self, sock: socket.socket, spin: float = 0.0) -> None:
        sock.setblocking(False)
        self.sock = sock
        self._reader = FrameReader()
        self._writer = FrameWriter()
        self._frames: Deque[bytes] = deque()
        self._buf = bytearray(READ_CHUNK)
        self._view = memoryview(self._buf)
        self._poll = select.poll()
        self._poll.register(sock.fileno(), select.POLLIN)
        self._events = select.POLLIN
        self._spinner = Spinner(spin)
        self._poll_now = functools.partial(self._poll.poll, 0)
        self.eof = False

    def fileno(self) -> int:
        """int: the socket's descriptor."""
        return self.sock.fileno()

    @property
    def unsent(self) -> bool:
        """bool: whether queued bytes wait for the socket."""
        return not self._writer.empty

    # ------------------------------------------------------------- sending
    def send(self, data: bytes, deadline: Optional[float] = None, check: Check = None) -> bool:
        """Queue ``data`` as one frame; send what the socket takes by ``deadline``.

        Returns:
            bool: True when everything queued went out; False when the
            deadline came first (the rest stays queued, whole).

        Raises:
            OSError: the connection broke.
        """
        self._writer.put(data)
        return self.flush(deadline, check)

    def flush(self, deadline: Optional[float] = None, check: Check = None) -> bool:
        """Send what is queued, waiting for room until ``deadline`` (0: no wait).

        Returns:
            bool: whether everything went out.

        Raises:
            OSError: the connection broke.
        """
        while not self._writer.flush(self.sock):
            if not self._wait(select.POLLOUT, deadline, check):
                return False
        return True

    # ----------------------------------------------------------- receiving
    def recv(self, deadline: Optional[float] = None, check: Check = None) -> Optional[bytes]:
        """The next frame; None when ``deadline`` comes first.

        Queued frames are sent meanwhile (a reply may wait for them).

        Raises:
            EOFError: the other side closed the connection.
            OSError: the connection broke.
        """
        while not self._frames:
            self.read_ready()
            if self._frames:
                break
            if self.eof:
                raise EOFError("the connection closed")
            events = select.POLLIN | (0 if self._writer.empty else select.POLLOUT)
            if not self._wait(events, deadline, check):
                return None
            if not self._writer.empty:
                self._writer.flush(self.sock)
        return self._frames.popleft()

    def read_ready(self) -> int:
        """Read what arrived, without waiting; the frames it completed wait for ``recv``/``take``.

        Returns:
            int: how many frames it completed.

        Raises:
            ValueError: the bytes are no frames.
            OSError: the connection broke.
        """
        before = len(self._frames)
        while not self.eof:
            try:
                n = self.sock.recv_into(self._buf)
            except (BlockingIOError, InterruptedError):
                break
            if not n:
                self.eof = True
                break
            self._frames.extend(self._reader.feed(self._view[:n]))
            if n < len(self._buf):
                break
        return len(self._frames) - before

    def take(self) -> Optional[bytes]:
        """A frame already read (``read_ready``), or None."""
        return self._frames.popleft() if self._frames else None

    # --------------------------------------------------------------- waits
    def _wait(self, events: int, deadline: Optional[float], check: Check) -> bool:
        """Whether the socket became ready for ``events`` before ``deadline``."""
        if events != self._events:
            self._poll.modify(self.sock.fileno(), events)
            self._events = events
        while True:
            left = _left(deadline)
            if left is not None and left <= 0:
                return False
            wait = left
            if check is not None:
                wait = self.tick if wait is None else min(wait, self.tick)
            if self._spinner.wait(self._poll_now, self._poll_for, wait):
                return True
            if check is not None:
                check()

    def _poll_for(self, seconds: Optional[float]) -> List[Tuple[int, int]]:
        return self._poll.poll(None if seconds is None else max(0, int(seconds * 1000) + 1))

    def shutdown(self) -> None:
        """End the connection for both sides now (the other side reads EOF)."""
        with contextlib.suppress(OSError):  # not connected any more: nothing to end
            self.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Close the socket (what is still queued is dropped)."""
        self.sock.close()


def connect(address: str, authkey: bytes, hello: bytes, deadline: Optional[float],
            check: Check = None) -> Tuple[Link, bytes]:
    """Connect to a server of this layer, prove the key, say ``hello``.

    Args:
        address (str): the server's Unix socket.
        authkey (bytes): the key it holds.
        hello (bytes): the protocol's first frame.
        deadline (float or None): ``time.monotonic()`` by which it is all done.
        check (callable or None): called every ``Link.tick`` seconds while
            waiting; raises to give up (e.g. the server's process is gone).

    Returns:
        tuple: ``(link, welcome)``: the connection and the server's answer to ``hello``.

    Raises:
        TimeoutError: ``deadline`` passed first.
        multiprocessing.AuthenticationError: a wrong key on either side.
        EOFError: the server closed the connection during the handshake.
        OSError: nobody listens (``ConnectionRefusedError``, ``FileNotFoundError``).
        ValueError: ``EASYCORE_SPIN_US`` is no budget (see
            [`spin.budget`][easycore.common.parallel._os.spin.budget]).
    """
    spin = budget()  # a bad EASYCORE_SPIN_US: said before the socket opens
    sock = _open(address, deadline)
    link = Link(sock, spin)
    try:
        proof = ClientProof(authkey)
        link.send(proof.answer(_expect(link, deadline, check)), deadline, check)
        proof.check(_expect(link, deadline, check))
        link.send(hello, deadline, check)
        welcome = _expect(link, deadline, check)
    except BaseException:
        link.close()
        raise
    return link, welcome


def _expect(link: Link, deadline: Optional[float], check: Check) -> bytes:
    frame = link.recv(deadline, check)
    if frame is None:
        raise TimeoutError("the handshake did not finish in time")
    return frame


def _open(address: str, deadline: Optional[float]) -> socket.socket:
    """A connected Unix socket; a full backlog is tried again until ``deadline``."""
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.connect(address)
            return sock
        except (BlockingIOError, InterruptedError) as exc:
            sock.close()
            if isinstance(exc, BlockingIOError) and exc.errno not in (errno.EAGAIN,
                                                                       errno.EWOULDBLOCK):
                raise
        except BaseException:
            sock.close()
            raise
        left = _left(deadline)
        if left is not None and left <= 0:
            raise TimeoutError("the server's backlog stayed full")
        time.sleep(0.01 if left is None else min(0.01, left))  # no event to wait on
