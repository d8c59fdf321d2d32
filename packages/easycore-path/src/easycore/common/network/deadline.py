"""A deadline for a whole download, enforced on its sockets.

A per-read timeout cannot stop a server that sends a byte every few seconds: every read
succeeds. A `Deadline` can. When it passes, a timer shuts down the sockets the transfer
opened (they are registered by the connection classes in `.session`), so a read blocked
in the middle of the headers or the body returns at once and the transfer ends with a
[`DownloadError`][easycore.common.network.DownloadError].

Imported only when a transfer happens.
"""

import contextlib
import math
import socket
import threading
import time
from typing import List, Optional, Tuple, Union

from .errors import DownloadError
from .limits import DEADLINE_ENV

__all__ = ["Deadline", "current"]

_local = threading.local()


class Deadline:
    """The time left to one download, enforced on its sockets.

    Used as a context manager around the transfer. While it is entered, sockets that the
    transfer's connections open in this thread are registered with it; when the deadline
    passes, `expired` becomes true and they are shut down, which wakes any read blocked
    on them.

    Args:
        seconds (float): how long the transfer may take, `math.inf` for no limit.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._fired = False  # set (under the lock) when the timer shut the sockets down
        self._end = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._sockets: List[socket.socket] = []
        self._timer: Optional[threading.Timer] = None
        self._outer: Optional[Deadline] = None

    def __enter__(self) -> "Deadline":
        if math.isfinite(self.seconds):
            self._timer = threading.Timer(self.remaining(), self._expire)
            self._timer.daemon = True
            try:
                self._timer.start()
            except BaseException:
                # A Ctrl-C inside start (which waits for the thread) finds the timer
                # running, and no __exit__ follows to end it: end it here.
                self._timer.cancel()
                raise
        self._outer = getattr(_local, "deadline", None)
        _local.deadline = self
        return self

    def __exit__(self, *exc_info: object) -> None:
        _local.deadline = self._outer
        if self._timer is not None:
            self._timer.cancel()
            self._timer.join()
        with self._lock:
            self._sockets.clear()

    @property
    def expired(self) -> bool:
        """Whether the deadline has passed (even if its timer has not run yet)."""
        return self._fired or time.monotonic() >= self._end

    def remaining(self) -> float:
        """Seconds left (0 once passed; `math.inf` without a deadline)."""
        return max(0.0, self._end - time.monotonic())

    def cap(self, timeout: Union[float, Tuple[float, float]]) -> Tuple[float, float]:
        """`(connect, read)` timeouts, each no longer than the time left (but positive)."""
        connect, read = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        left = max(self.remaining(), 0.001)
        return min(connect, left), min(read, left)

    def error(self, url: str) -> DownloadError:
        """The error for a download this deadline ended, naming the URL and the knob."""
        return DownloadError(
            url,
            f"did not finish within its deadline of {self.seconds:g} s "
            f"(set deadline= or ${DEADLINE_ENV})",
            transient=True,
        )

    def watch(self, sock: socket.socket) -> None:
        """Register a socket of the transfer; shut it down now if the deadline passed."""
        with self._lock:
            if not self._fired:
                self._sockets.append(sock)
                return
        _shutdown(sock)

    def _expire(self) -> None:
        with self._lock:
            self._fired = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shutdown(sock)


def current() -> Optional[Deadline]:
    """The deadline entered in this thread, if any (for the connection classes)."""
    return getattr(_local, "deadline", None)


def _shutdown(sock: socket.socket) -> None:
    # shutdown, not close: it wakes a recv blocked in another thread, and leaves closing
    # the descriptor to its owner (closing it here could hand the number to a new file).
    with contextlib.suppress(OSError):  # already closed or never connected
        sock.shutdown(socket.SHUT_RDWR)
