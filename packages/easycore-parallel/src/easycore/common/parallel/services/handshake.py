"""Opening a connection under a deadline, on both sides.

``multiprocessing.connection``'s authentication (``deliver_challenge`` /
``answer_challenge``) blocks until the other side answers, with no timeout:
a connection that never answers would hold a service's door, and a client
whose service stopped answering would wait forever before its call's
timeout even started. So each handshake runs under a
[`watchdog`][easycore.common.parallel.services.handshake.watchdog]: when the
deadline passes (or the other side's process is found gone), it shuts the
socket down, which ends every blocked read on it with EOF. The engine stays
multiprocessing's (HMAC challenge, frames); only the deadline is ours.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from multiprocessing import connection
from typing import Any, Callable, Iterator, Optional

__all__ = ["Watch", "connection_on", "open_socket", "watchdog"]


class Watch:
    """What a watchdog saw: ``reason`` is set when it shut the socket down."""

    __slots__ = ("reason",)

    def __init__(self) -> None:
        self.reason: Optional[str] = None


@contextlib.contextmanager
def watchdog(
    sock: socket.socket,
    deadline: Optional[float],
    check: Optional[Callable[[], Optional[str]]] = None,
    tick: float = 0.25,
) -> Iterator[Watch]:
    """Shut ``sock`` down if the block takes past ``deadline`` (``time.monotonic``).

    Args:
        sock (socket.socket): the connection's socket.
        deadline (float or None): None: no deadline.
        check (callable or None): called every ``tick`` seconds; a string
            it returns (why to give up, e.g. the peer died) ends the wait too.
        tick (float): seconds between checks.

    Yields:
        Watch: its ``reason`` says why the socket was shut down, if it was.
    """
    watch = Watch()
    done = threading.Event()
    lock = threading.Lock()

    def run() -> None:
        while True:
            wait = tick if check is not None else None
            if deadline is not None:
                left = deadline - time.monotonic()
                wait = left if wait is None else min(wait, left)
            if done.wait(None if wait is None else max(0.0, wait)):
                return
            reason = None
            if deadline is not None and time.monotonic() >= deadline:
                reason = "deadline"
            elif check is not None:
                reason = check()
            if reason is not None:
                with lock:
                    if done.is_set():
                        return
                    watch.reason = reason
                    with contextlib.suppress(OSError):  # closed meanwhile: nothing to end
                        sock.shutdown(socket.SHUT_RDWR)
                return

    thread = None
    if deadline is not None or check is not None:
        thread = threading.Thread(target=run, name="easycore-service-handshake", daemon=True)
        thread.start()
    try:
        yield watch
    finally:
        with lock:
            done.set()
        if thread is not None:
            thread.join()


def open_socket(address: str, deadline: Optional[float]) -> socket.socket:
    """Connect a blocking Unix socket to ``address`` within ``deadline``.

    Raises:
        OSError: refused, missing, or (``socket.timeout``) too slow.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if deadline is not None:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.connect(address)
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    return sock


def connection_on(sock: socket.socket) -> Any:
    """A ``multiprocessing`` Connection on a duplicate of ``sock``'s descriptor.

    Shutting ``sock`` down ends the Connection's blocked reads too (one
    socket, two descriptors); closing the Connection leaves ``sock`` open.
    """
    return connection.Connection(os.dup(sock.fileno()))
