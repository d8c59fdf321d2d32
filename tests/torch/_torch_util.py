"""Helpers shared by the torch tests (not in conftest: several test folders have one)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EXAMPLES = ROOT / "examples"
SCRIPTS = HERE / "scripts"
SHM_DIR = "/dev/shm"
SHM_PREFIXES = ("ect-", "torch_")


def gpu_count() -> int:
    """GPUs torch sees, without initialising CUDA here (NVML first)."""
    return torch.cuda.device_count() if torch.backends.cuda.is_built() else 0


def shm_segments() -> list:
    """Shared-memory names a torch runner could leave (Linux; empty elsewhere)."""
    if not os.path.isdir(SHM_DIR):
        return []
    return sorted(f for f in os.listdir(SHM_DIR) if f.startswith(SHM_PREFIXES))


def _is_mp_helper(proc: psutil.Process) -> bool:
    try:
        cmdline = " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return False
    return "resource_tracker" in cmdline or "forkserver" in cmdline


def stray_children(before: set) -> list:
    """Children of this process not in ``before`` and not multiprocessing helpers."""
    return [
        p for p in psutil.Process().children(recursive=True)
        if p.pid not in before and not _is_mp_helper(p)
    ]


def open_fds() -> set:
    """This process's open file descriptors (Linux), for leak checks."""
    try:
        return set(os.listdir("/proc/self/fd"))
    except OSError:
        return set()


def run_python(
    *args: str, timeout: float = 120.0, cwd=None, env=None
) -> subprocess.CompletedProcess:
    """Run this interpreter with ``args``; fail (not hang) after ``timeout`` seconds."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(EXAMPLES), str(HERE), full_env.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(cwd or HERE),
        env=full_env,
    )


def wait_gone(pids, timeout: float) -> list:
    """Wait until none of ``pids`` is a live process; return those still alive."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _alive(pid)]
        if alive:
            time.sleep(0.05)
    return alive


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
