"""How much memory a device has free: `device_capacity`."""

from __future__ import annotations

import importlib
import os
from typing import Any, Union

import torch

__all__ = ["device_capacity", "host_available_memory"]


def host_available_memory() -> int:
    """Bytes of host memory available to new allocations without swapping.

    psutil's ``available`` when it is installed, else Linux's
    ``MemAvailable``, else the free physical pages ``os.sysconf`` reports.

    Returns:
        int:

    Raises:
        OSError: this platform reports none of them.
    """
    psutil: Any
    try:  # optional; imported by name, so its absence of type stubs does not matter
        psutil = importlib.import_module("psutil")
    except ImportError:
        psutil = None
    if psutil is not None:
        return int(psutil.virtual_memory().available)
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass  # no /proc/meminfo (not Linux): sysconf below
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError) as exc:
        raise OSError(
            "cannot tell how much host memory is available; install psutil, or pass "
            "capacity={'cpu': bytes}"
        ) from exc


def device_capacity(device: Union[str, torch.device]) -> int:
    """Free memory of a device, in bytes.

    Args:
        device (str or torch.device): "cpu", or "cuda:N" ("cuda" is the current GPU).

    Returns:
        int: for a GPU, the free memory the driver reports
        (``torch.cuda.mem_get_info``; this initialises CUDA in the calling
        process); for "cpu", the host memory available (`host_available_memory`).

    Raises:
        ValueError: an unknown device type, or a GPU torch does not see.

    Examples:
        ```python
        # requires: torch
        from easycore.torch.placement import device_capacity

        print(device_capacity("cpu") > 0)  # True
        ```
    """
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"invalid device {device!r}: {exc}") from None
    if parsed.type == "cpu":
        return host_available_memory()
    if parsed.type == "cuda":
        available = torch.backends.cuda.is_built() and torch.cuda.device_count()
        index = torch.cuda.current_device() if available and parsed.index is None else parsed.index
        if not available or index is None or index >= torch.cuda.device_count():
            raise ValueError(f"device {str(device)!r} is not a GPU torch sees here")
        free, _total = torch.cuda.mem_get_info(index)
        return int(free)
    raise ValueError(f"device_capacity knows 'cpu' and 'cuda:N' devices, not {str(device)!r}")
