"""The name registry of local services, in the private sockets directory.

[`lookup`][easycore.common.parallel.services.lookup] reads it; it lives in
the directory that holds every local service's (and ``Queue``'s) Unix
socket ([`address`][easycore.common.parallel.connection.address]: private
to this user, created with mode 0700):

* registry entries are JSON files
  ``names/<namespace>/<name>.json`` of mode 0600, written atomically and
  claimed with a hard link, so two services can never hold one name. Both
  parts are percent-encoded, a leading dot included (`path_component`): a
  name like ``".hidden"`` is an entry like any other, and a namespace ``"."``
  or ``".."`` is a folder of its own inside ``names/``, never the folder
  above. The temporary file of a registration ends in ``.tmp``, never in
  ``.json``, which is how the registry's scan tells the two apart.

Entries and sockets of services whose process is gone (a SIGKILLed owner
takes its services down with it, without cleaning up) are removed when
found stale, by ``lookup`` and by the next start.
"""

from __future__ import annotations

import contextlib
import json
import os
from urllib.parse import quote, unquote

from ..connection.address import pid_alive, remove_quietly

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Dict, List, Optional

__all__ = [
    "find",
    "live_records",
    "path_component",
    "register",
    "unregister",
]

_MAX_NAME = 200  # file names stay well below NAME_MAX


def path_component(text: str) -> str:
    """``text`` as one file name: percent-encoded, a leading dot too.

    ``quote`` leaves dots alone: ``"."`` and ``".."`` would name the folder
    itself or the one above, and ``".x"`` a hidden file. ``unquote`` gives
    ``text`` back.

    Args:
        text (str): a service name or a namespace.

    Returns:
        str:
    """
    encoded = quote(text, safe="")
    return "%2E" + encoded[1:] if encoded.startswith(".") else encoded


def _entry_path(base: str, name: str, namespace: Optional[str], create: bool) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"a service name must be a non-empty str, got {name!r}")
    ns = "default" if namespace is None else namespace
    if not isinstance(ns, str) or not ns:
        raise ValueError(f"a namespace must be a non-empty str or None, got {namespace!r}")
    file_name, dir_name = path_component(name) + ".json", path_component(ns)
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
    # Never ``.json``: the scan (``live_records``) takes only those.
    tmp = os.path.join(os.path.dirname(final), f"{record['token']}.tmp")
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
        if not entry.endswith(".json"):  # a registration's temporary file (.tmp)
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
