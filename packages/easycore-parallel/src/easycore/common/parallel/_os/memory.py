"""How much memory a worker process holds, read from outside (Linux ``/proc``).

* **RSS** (resident set size): every page of the process in RAM, shared ones
  included, now and at its peak (``VmRSS`` and ``VmHWM`` of
  ``/proc/<pid>/status``: one short read).
* **USS** (unique set size): the pages only this process holds, what ending
  it would give back (``Private_*`` of ``/proc/<pid>/smaps_rollup``, Linux
  4.14+). It walks the process's page tables (milliseconds for a big
  process), so callers read it seldom.

Where ``/proc`` is not there (macOS, Windows) every reading is None.
"""

from __future__ import annotations

import os

from .._named_tuples import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Optional

__all__ = ["AVAILABLE", "Reading", "format_bytes", "read", "resident"]

#: whether this platform tells a process's memory (``/proc``)
AVAILABLE = os.path.exists("/proc/self/status")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident(pid: Optional[int]) -> Optional[int]:
    """Resident memory (RSS) of process ``pid`` now, in bytes, from the cheapest
    file (``statm``: what ``max_worker_memory`` reads after every chunk).

    Returns:
        int or None: None if it is gone or the platform cannot tell.
    """
    statm = _proc(pid, "statm")
    try:
        return None if statm is None else int(statm.split()[1]) * _PAGE
    except (ValueError, IndexError):
        return None


def _proc(pid: Optional[int], name: str) -> Optional[bytes]:
    """``/proc/PID/NAME``'s bytes; None if the process is gone or there is no /proc."""
    if pid is None or not AVAILABLE:
        return None
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return None


class Reading(NamedTuple):
    """One process's memory, in bytes."""

    rss: int  #: resident now
    peak_rss: int  #: resident at most, since the process started
    uss: Optional[int] = None  #: only its own (None: not read)


def read(pid: Optional[int], unique: bool = False) -> Optional[Reading]:
    """The memory of process ``pid``.

    Args:
        pid (int or None): the process.
        unique (bool): also read its USS (costly: see the module's docstring).

    Returns:
        Reading or None: None if it is gone or the platform cannot tell.
    """
    status = _proc(pid, "status")
    if status is None:
        return None
    rss = peak = None
    for line in status.splitlines():
        if line.startswith(b"VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith(b"VmHWM:"):
            peak = int(line.split()[1]) * 1024
    if rss is None:
        return None  # a zombie: its memory is gone
    uss = _unique(pid) if unique else None
    return Reading(rss, max(rss, peak or 0), uss)


def _unique(pid: Optional[int]) -> Optional[int]:
    text = _proc(pid, "smaps_rollup")
    if text is None:
        return None
    return sum(int(line.split()[1]) * 1024 for line in text.splitlines()
               if line.startswith((b"Private_Clean:", b"Private_Dirty:", b"Private_Hugetlb:")))


def format_bytes(n: Optional[float]) -> str:
    """``n`` bytes for a person: ``"1.5 GB"``, ``"12 MB"`` (decimal units)."""
    if n is None:
        return "?"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"
