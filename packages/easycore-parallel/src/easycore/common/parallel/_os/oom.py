"""Whether the out-of-memory killer may have ended a worker.

A worker ended by ``SIGKILL`` cannot say who sent it: the kernel's
out-of-memory killer, a user's ``kill -9``, a job scheduler, a test. Linux
counts the processes its out-of-memory killer ended (``oom_kill`` in
``/proc/vmstat``, cgroup kills included); a back-end reads the count when a
worker starts and again when it died, and only when the count grew does the
error mention the out-of-memory killer, as a possibility.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Optional

__all__ = ["kills", "since"]

_VMSTAT = "/proc/vmstat"
_KEY = b"\noom_kill "  # its line, as found in the file with a newline put first


def kills() -> Optional[int]:
    """The out-of-memory killer's count of processes it ended on this machine since boot.

    Returns:
        int or None: None where the system does not say (not Linux, an old
        kernel, ``/proc`` not mounted).
    """
    try:
        with open(_VMSTAT, "rb", buffering=0) as f:
            text = b"\n" + f.read() + b"\n"  # one read, one search: not a loop over ~180 lines
        at = text.find(_KEY)
        if at < 0:
            return None
        at += len(_KEY)
        return int(text[at:text.index(b"\n", at)])
    except (OSError, ValueError):
        return None


def since(base: Optional[int]) -> Optional[int]:
    """Out-of-memory kills since ``base`` (a count ``kills`` returned), or None if unknown."""
    if base is None:
        return None
    now = kills()
    return None if now is None else max(0, now - base)
