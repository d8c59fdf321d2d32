"""Where the ranks meet: a ``torch.distributed.TCPStore`` on a free port.

Rank 0 hosts the store, for local processes as for Ray actors; the caller
hosts none, so nothing it forks later inherits a store's threads or sockets.
The store is opened on port 0: the kernel picks a free port while the
socket is bound, and the bound socket is handed to the store
(``master_listen_fd``), so no other program can take the port between
choosing and binding it, and two calls at once never collide. Nothing here
binds a fixed port.

Loopback by default: the store listens on ``127.0.0.1`` only and every rank
tells gloo (``GLOO_SOCKET_IFNAME``) and NCCL (``NCCL_SOCKET_IFNAME``) to use
the loopback interface, unless the caller names another host, or set those
variables itself.
"""

from __future__ import annotations

import datetime
import importlib
import ipaddress
import os
import socket
import sys
from typing import Any, Optional, Tuple

import torch.distributed as dist

__all__ = ["LOOPBACK", "connect_store", "is_loopback", "open_store", "use_loopback_interface"]

#: the default host of the store
LOOPBACK = "127.0.0.1"
#: seconds a store waits for a client when no timeout was given (torch's default)
DEFAULT_STORE_TIMEOUT = 300.0


def _timedelta(seconds: Optional[float]) -> datetime.timedelta:
    return datetime.timedelta(seconds=DEFAULT_STORE_TIMEOUT if seconds is None else seconds)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``).

    Args:
        host (str): an address or host name.

    Returns:
        bool:
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def open_store(host: str = LOOPBACK, timeout: Optional[float] = None) -> Tuple[Any, int]:
    """Host a store on ``host`` and a free port (in rank 0).

    Args:
        host (str): address to listen on (an IPv4 or IPv6 address or a name).
        timeout (float or None): seconds a store operation may wait.

    Returns:
        tuple: ``(store, port)``; the store stops listening when it is garbage-collected.

    Raises:
        OSError: ``host`` cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((host, 0))
        sock.listen(socket.SOMAXCONN)
        port = sock.getsockname()[1]
        store = dist.TCPStore(
            host, port, is_master=True, master_listen_fd=sock.fileno(),
            wait_for_workers=False, timeout=_timedelta(timeout),
        )
    except BaseException:
        sock.close()
        raise
    sock.detach()  # the store owns (and closes) the descriptor now
    return store, port


def connect_store(host: str, port: int, timeout: Optional[float] = None) -> Any:
    """Connect to a store opened by `open_store` (in a rank).

    Args:
        host (str):
        port (int):
        timeout (float or None): seconds to wait for the connection and for
            each store operation.

    Returns:
        torch.distributed.TCPStore:
    """
    return dist.TCPStore(host, port, is_master=False, timeout=_timedelta(timeout))


def loopback_interface() -> str:
    """The name of the network interface holding ``127.0.0.1``.

    Returns:
        str: e.g. "lo" (Linux) or "lo0" (macOS, BSD).
    """
    psutil: Any
    try:  # optional; imported by name, so its absence of type stubs does not matter
        psutil = importlib.import_module("psutil")
    except ImportError:
        psutil = None
    if psutil is not None:
        for name, addresses in psutil.net_if_addrs().items():
            if any(a.family == socket.AF_INET and a.address == LOOPBACK for a in addresses):
                return name
    return "lo" if sys.platform.startswith("linux") else "lo0"


def use_loopback_interface() -> None:
    """In a rank: keep gloo's and NCCL's own connections on the loopback interface.

    Left alone where the environment already names an interface. Ranks are
    processes of their own, so setting their environment touches nobody else.
    """
    name = loopback_interface()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", name)
    os.environ.setdefault("NCCL_SOCKET_IFNAME", name)
