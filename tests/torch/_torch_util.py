"""Helpers shared by the torch tests (not in conftest: several test folders have one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch
from processes import stray_children, wait_gone  # noqa: F401  (re-exported)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EXAMPLES = ROOT / "examples"
SCRIPTS = HERE / "scripts"
SHM_DIR = "/dev/shm"
SHM_TAGS = ("ect", "ecp", "ecs")  # torch runners', plain runners', progress slots


def gpu_count() -> int:
    """GPUs torch sees, without initialising CUDA here (NVML first)."""
    return torch.cuda.device_count() if torch.backends.cuda.is_built() else 0


def shm_segments() -> list:
    """Shared-memory names a runner of this process could leave (Linux; empty elsewhere).

    Names carry the pid of the process that made them (``ect-<pid hex>-...``,
    torch's own ``torch_<pid>_...``): other test sessions on the same machine
    stay out of our leak checks.
    """
    if not os.path.isdir(SHM_DIR):
        return []
    pid = os.getpid()
    prefixes = tuple(f"{tag}-{pid:x}-" for tag in SHM_TAGS) + (f"torch_{pid}_",)
    return sorted(f for f in os.listdir(SHM_DIR) if f.startswith(prefixes))


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
