"""Helpers shared by the torch tests (not in conftest: several test folders have one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import leaks
import torch
from processes import stray_children, wait_gone  # noqa: F401  (re-exported)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EXAMPLES = ROOT / "examples"
SCRIPTS = HERE / "scripts"
# torch runners', plain runners', item slots', and torch's own (file_system strategy)
SHM_PATTERNS = ("ect-{pid:x}-", "ecp-{pid:x}-", "ecs-{pid:x}-", "torch_{pid}_")


def gpu_count() -> int:
    """GPUs torch sees, without initialising CUDA here (NVML first)."""
    return torch.cuda.device_count() if torch.backends.cuda.is_built() else 0


def shm_segments() -> list:
    """Shared-memory names a runner of this process could leave (Linux; empty elsewhere).

    Names carry the pid of the process that made them (``ect-<pid hex>-...``,
    torch's own ``torch_<pid>_...``): other test sessions on the same machine
    stay out of our leak checks.
    """
    return leaks.shm_segments(SHM_PATTERNS)


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
