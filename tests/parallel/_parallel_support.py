"""Helpers of the parallel runner tests: leak probes and script runners."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

import leaks
import pytest
from processes import descendants, kill_quietly, stray_children, wait_gone  # noqa: F401  (re-exported)

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "scripts"
SHM_DIR = "/dev/shm"
SHM_PREFIX = "ecp-"
SHM_PATTERN = SHM_PREFIX + "{pid:x}-"
METHODS = [
    m for m in ("fork", "forkserver", "spawn")
    if m in multiprocessing.get_all_start_methods()
]


def shm_segments(pid: Optional[int] = None) -> list:
    """Shared-memory segments of runners created by process ``pid`` (default: this one).

    Names start with ``ecp-<pid in hex>-``; filtering by pid keeps other test
    sessions running on the same machine out of our leak checks.
    """
    return leaks.shm_segments((SHM_PATTERN,), None if pid is None else [pid])


def shm_named(prefix: str) -> list:
    """Shared-memory segments whose name starts with ``prefix``."""
    if not os.path.isdir(SHM_DIR):
        return []
    return sorted(f for f in os.listdir(SHM_DIR) if f.startswith(prefix))


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


def namespace_prefix() -> list:
    """A command prefix giving a private mount namespace where tmpfs can be mounted."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        pytest.skip("no unshare/mount")
    probe = "mount -t tmpfs -o size=1m tmpfs /dev/shm"
    for prefix in (["unshare", "--mount", "--propagation", "private"],
                   ["unshare", "--user", "--map-root-user", "--mount", "--propagation",
                    "private"]):
        try:
            done = subprocess.run([*prefix, "sh", "-c", probe], capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return prefix
    pytest.skip("mount namespaces are not permitted here")
