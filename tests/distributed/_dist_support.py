"""Helpers of the distributed tests that run in the test process only."""

from __future__ import annotations

import ipaddress

import leaks
import torch


def gpu_count() -> int:
    """GPUs torch sees, without initialising CUDA here."""
    return torch.cuda.device_count() if torch.backends.cuda.is_built() else 0


def shm_segments() -> list:
    """Shared-memory segments of this process's transports (other processes' are
    theirs: /dev/shm is shared with whatever else runs on the machine)."""
    return leaks.shm_segments(("ect-{pid:x}-", "ecp-{pid:x}-"))


open_fds = leaks.open_fds


def read_pids(folder) -> list:
    """The pids the ranks wrote with ``_dist_helpers.note_pid``."""
    return sorted(int(p.read_text()) for p in folder.glob("rank-*.pid"))


def is_loopback(address: str) -> bool:
    """127.0.0.1, ::1, or 127.0.0.1 mapped into IPv6 (a dual-stack listener)."""
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback
