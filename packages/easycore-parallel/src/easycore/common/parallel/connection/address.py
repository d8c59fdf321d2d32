"""Where sockets live: this user's private directory, fresh socket paths, live pids.

Every local service's Unix socket, every ``Queue``'s, and the services'
name registry live in one directory per user:

* ``$EASYCORE_SERVICES_DIR`` if set, else ``$XDG_RUNTIME_DIR/easycore-services``,
  else ``<temp dir>/easycore-services-<uid>``;
* created with mode 0700 and refused (``PermissionError``) when it is a
  symbolic link, belongs to someone else or is open to others: a socket there
  is reachable by this user only, and each server also checks a key
  ([`auth`][easycore.common.parallel.connection.auth]);
* sockets are ``s-<pid>-<token>`` (the pid of the process that listens, so
  a dead owner's leftovers are swept when the next socket is made).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import tempfile
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Optional

__all__ = [
    "ENV_DIR",
    "new_socket_address",
    "pid_alive",
    "pid_namespace",
    "process_alive",
    "remove_quietly",
    "services_dir",
    "wait_gone",
]

#: environment variable naming the directory (tests and several users of one account)
ENV_DIR = "EASYCORE_SERVICES_DIR"


def services_dir() -> str:
    """This user's private sockets directory (services, queues), created if needed.

    Returns:
        str:

    Raises:
        PermissionError: the directory is a link, someone else's, or open to others.
    """
    base = os.environ.get(ENV_DIR)
    if not base:
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        if runtime and os.path.isdir(runtime):
            base = os.path.join(runtime, "easycore-services")
        else:
            base = os.path.join(tempfile.gettempdir(), f"easycore-services-{os.getuid()}")
    _private_dir(base)
    return base


def _private_dir(path: str) -> None:
    with contextlib.suppress(FileExistsError):  # checked below, as a new one is
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise PermissionError(f"services directory {path!r} is not a directory (a link?)")
    if st.st_uid != os.getuid():
        raise PermissionError(
            f"services directory {path!r} belongs to uid {st.st_uid}, not to you "
            f"(uid {os.getuid()}); set ${ENV_DIR} to a directory of your own"
        )
    if st.st_mode & 0o077:
        raise PermissionError(
            f"services directory {path!r} is open to other users (mode "
            f"{stat.S_IMODE(st.st_mode):o}); run `chmod 700 {path}` or set ${ENV_DIR}"
        )


def new_socket_address(base: str) -> str:
    """A fresh socket path in ``base``; sweeps the sockets of dead owners first.

    Args:
        base (str): from `services_dir`.

    Returns:
        str:
    """
    _sweep_sockets(base)
    address = os.path.join(base, f"s-{os.getpid()}-{secrets.token_hex(8)}")
    if len(address.encode()) >= 100:  # sun_path holds 108 bytes (104 on macOS)
        raise OSError(
            f"socket path {address!r} is too long for a Unix socket; set ${ENV_DIR} "
            "to a shorter directory"
        )
    return address


def _sweep_sockets(base: str) -> None:
    try:
        entries = os.listdir(base)
    except OSError:
        return
    for entry in entries:
        parts = entry.split("-")
        if (entry.startswith("s-") and len(parts) == 3 and parts[1].isdigit()
                and not pid_alive(int(parts[1]))):
            remove_quietly(os.path.join(base, entry))


def remove_quietly(path: Optional[str]) -> None:
    """Unlink ``path`` if it exists; never raises."""
    if path:
        with contextlib.suppress(OSError):  # gone already
            os.unlink(path)


def pid_namespace() -> Optional[int]:
    """An id of this process's pid namespace (Linux), to know when pids compare."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not).

    Args:
        pid (int):

    Returns:
        bool:
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    try:  # Linux: a dead child stays a zombie until its parent reaps it
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def process_alive(pid: int, pidns: Optional[int]) -> bool:
    """Whether process ``pid`` of pid namespace ``pidns`` runs.

    Args:
        pid (int):
        pidns (int or None): from `pid_namespace` where the pid was taken.

    Returns:
        bool: True also when this process cannot tell (another pid namespace).
    """
    if pidns is not None and pidns != pid_namespace():
        return True  # another pid namespace: its pids mean nothing here
    return pid_alive(pid)


def wait_gone(pid: int, pidns: Optional[int], grace: float) -> bool:
    """Whether the process ends within ``grace`` seconds (it may be being killed).

    Its connections close as it dies, a moment before it is gone.
    """
    end = time.monotonic() + grace
    while process_alive(pid, pidns):
        if time.monotonic() >= end:
            return False
        time.sleep(0.02)  # another process's death: no event to wait on
    return True
