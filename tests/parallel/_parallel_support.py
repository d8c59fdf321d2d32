"""Helpers of the parallel runner tests: leak probes and script runners."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "scripts"
SHM_DIR = "/dev/shm"
SHM_PREFIX = "ecp-"
METHODS = [
    m for m in ("fork", "forkserver", "spawn")
    if m in multiprocessing.get_all_start_methods()
]


def shm_segments(pid: int = None) -> list:
    """Shared-memory segments of runners created by process ``pid`` (default: this one).

    Names start with ``ecp-<pid in hex>-``; filtering by pid keeps other test
    sessions running on the same machine out of our leak checks.
    """
    if not os.path.isdir(SHM_DIR):
        return []
    prefix = f"{SHM_PREFIX}{os.getpid() if pid is None else pid:x}-"
    return sorted(f for f in os.listdir(SHM_DIR) if f.startswith(prefix))


def shm_named(prefix: str) -> list:
    """Shared-memory segments whose name starts with ``prefix``."""
    if not os.path.isdir(SHM_DIR):
        return []
    return sorted(f for f in os.listdir(SHM_DIR) if f.startswith(prefix))


def _is_mp_helper(proc: psutil.Process) -> bool:
    try:
        cmdline = " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return False
    return "resource_tracker" in cmdline or "forkserver" in cmdline


def stray_children(before: set) -> list:
    """Children of this process not in ``before`` and not multiprocessing helpers."""
    out = []
    for proc in psutil.Process().children(recursive=True):
        if proc.pid in before or _is_mp_helper(proc):
            continue
        out.append(proc)
    return out



def run_script(
    name: str, *args: str, timeout: float = 60.0, **kwargs
) -> subprocess.CompletedProcess:
    """Run ``scripts/<name>`` with this interpreter; fail (not hang) after ``timeout``."""
    return subprocess.run(
        [sys.executable, str(SCRIPTS / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(SCRIPTS),
        **kwargs,
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
