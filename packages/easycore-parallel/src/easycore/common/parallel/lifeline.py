"""Workers must not outlive the process that started them.

Two mechanisms, because each misses cases the other catches:

* Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills the worker the
  moment its parent dies, even if the worker is stuck in native code holding
  the GIL. Its parent is, however, the *thread* that forked it (so it is only
  armed when workers were started from the main thread) or the forkserver
  (which itself exits when the runner's process dies).
* :func:`parent_gone`, polled by the worker's inbox thread every fraction of
  a second: the parent process id changes when the parent dies and the
  worker is re-parented. Portable, and independent of the starting thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from typing import Optional

__all__ = ["arm_parent_death_signal", "parent_gone"]

_PR_SET_PDEATHSIG = 1


def arm_parent_death_signal(sig: Optional[int] = None) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies.

    Args:
        sig (int or None): the signal; None means SIGKILL.

    Returns:
        bool: whether it could be armed (Linux only).
    """
    if not sys.platform.startswith("linux"):
        return False
    if sig is None:
        sig = signal.SIGKILL  # looked up here: Windows has no SIGKILL to import
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def parent_gone(expected_ppid: int) -> bool:
    """Whether the process that started this one has died.

    Args:
        expected_ppid (int): ``os.getppid()`` as seen when the worker started.

    Returns:
        bool:
    """
    return os.getppid() != expected_ppid
