"""Where local services live: a private directory, socket names and the name registry.

One directory per user holds every local service's Unix socket and the
registry that [`lookup`][easycore.common.parallel.services.lookup] reads:

* ``$EASYCORE_SERVICES_DIR`` if set, else ``$XDG_RUNTIME_DIR/easycore-services``,
  else ``<temp dir>/easycore-services-<uid>``;
* created with mode 0700 and refused (``PermissionError``) when it is a
  symbolic link, belongs to someone else or is open to others: a socket there
  is reachable by this user only, and each service also checks an auth key;
* sockets are ``s-<pid>-<token>`` (the pid of the owner that made it, so a
  dead owner's leftovers can be swept); registry entries are JSON files
  ``names/<namespace>/<name>.json`` of mode 0600, written atomically and
  claimed with a hard link, so two services can never hold one name.

Entries and sockets of services whose process is gone (a SIGKILLed owner
takes its services down with it, without cleaning up) are removed when
found stale, by ``lookup`` and by the next start.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
import tempfile
from typing import Any, Dict, List, Optional
from urllib.parse import quote, unquote

__all__ = [
    "ENV_DIR",
    "find",
    "live_records",
    "new_socket_address",
    "pid_alive",
    "pid_namespace",
    "register",
    "remove_quietly",
    "services_dir",
    "unregister",
]

#: environment variable naming the directory (tests and several users of one account)
ENV_DIR = "EASYCORE_SERVICES_DIR"
_MAX_NAME = 200  # file names stay well below NAME_MAX


def services_dir() -> str:
    """This user's private services directory, created if needed.

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
        base (str): the services directory.

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


def _entry_path(base: str, name: str, namespace: Optional[str], create: bool) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"a service name must be a non-empty str, got {name!r}")
    ns = "default" if namespace is None else namespace
    if not isinstance(ns, str) or not ns:
        raise ValueError(f"a namespace must be a non-empty str or None, got {namespace!r}")
    file_name, dir_name = quote(name, safe="") + ".json", quote(ns, safe="")
    if len(file_name) > _MAX_NAME or len(dir_name) > _MAX_NAME:
        raise ValueError(f"service name or namespace too long: {name!r} in {namespace!r}")
    names = os.path.join(base, "names")
    directory = os.path.join(names, dir_name)
    if create:
        for d in (names, directory):
            with contextlib.suppress(FileExistsError):
                os.mkdir(d, 0o700)
    return os.path.join(directory, file_name)


def register(base: str, name: str, namespace: Optional[str], record: Dict[str, Any]) -> str:
    """Claim ``name`` in ``namespace`` for ``record``.

    Args:
        base (str): the services directory.
        name (str):
        namespace (str or None): None is ``"default"``.
        record (dict): JSON-able; must hold ``"pid"`` and ``"address"`` (for
            staleness) and ``"token"`` (for unregistering only one's own).

    Returns:
        str: the entry's path.

    Raises:
        ValueError: a live service already holds the name.
    """
    final = _entry_path(base, name, namespace, create=True)
    tmp = os.path.join(os.path.dirname(final), f".{record['token']}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(record, f)
    try:
        for _ in range(5):
            try:
                os.link(tmp, final)  # atomic and exclusive: the name is ours or not
                return final
            except FileExistsError:
                existing = _read(final)
                if existing is not None and _live(existing):
                    where = "" if namespace is None else f" in namespace {namespace!r}"
                    raise ValueError(
                        f"a service named {name!r} is already running{where} (pid "
                        f"{existing.get('pid')}); close it, or choose another name"
                    ) from None
                _remove_if_unchanged(final)
        raise OSError(f"could not register service {name!r}: {final!r} keeps changing")
    finally:
        remove_quietly(tmp)


def unregister(path: str, token: str) -> None:
    """Remove the entry at ``path`` if it is still ours (``token``)."""
    record = _read(path)
    if record is not None and record.get("token") == token:
        remove_quietly(path)


def find(base: str, name: str, namespace: Optional[str]) -> Optional[Dict[str, Any]]:
    """The record of the live service ``name``, or None (a stale entry is removed).

    Args:
        base (str): the services directory.
        name (str):
        namespace (str or None):

    Returns:
        dict or None:
    """
    path = _entry_path(base, name, namespace, create=False)
    record = _read(path)
    if record is None:
        return None
    if not _live(record):
        _remove_if_unchanged(path)
        remove_quietly(record.get("address"))
        return None
    return record


def live_records(base: str, namespace: Optional[str]) -> List[Dict[str, Any]]:
    """The records of every live service named in ``namespace`` (stale entries are removed).

    Args:
        base (str): the services directory.
        namespace (str or None):

    Returns:
        list of dict: sorted by name.
    """
    directory = os.path.dirname(_entry_path(base, "x", namespace, create=False))
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return []
    records = []
    for entry in entries:
        if entry.startswith(".") or not entry.endswith(".json"):
            continue
        record = find(base, unquote(entry[: -len(".json")]), namespace)
        if record is not None:
            records.append(record)
    return records


def _read(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _live(record: Dict[str, Any]) -> bool:
    pid, address = record.get("pid"), record.get("address")
    return (isinstance(pid, int) and pid_alive(pid) and isinstance(address, str)
            and os.path.exists(address))


def _remove_if_unchanged(path: str) -> None:
    # A stale entry may be replaced by a live one between reading and removing
    # it: remove it only if the file is still the one that was read.
    try:
        before = os.lstat(path).st_ino
        record = _read(path)
        if record is not None and _live(record):
            return
        if os.lstat(path).st_ino == before:
            os.unlink(path)
    except OSError:
        pass


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
