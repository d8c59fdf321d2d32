"""Fixtures for the torch runner tests: leak checks, and the examples on the path.

Runners start real worker processes; nothing is mocked. ``no_leaks`` asserts
that a test left no worker process, no thread, no open file descriptor and no
shared memory behind: neither easycore's torch segments (``/dev/shm/ect-*``)
nor torch's own (``/dev/shm/torch_*``, from its file_system strategy).
multiprocessing's long-lived helpers (resource tracker, forkserver, resource
sharer) and easycore's launcher thread are allowed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "examples"

# `from network import Net`, as the tutorial writes it; spawned workers inherit sys.path.
if str(EXAMPLES) not in sys.path:
    sys.path.append(str(EXAMPLES))

from _torch_util import SHM_PATTERNS  # noqa: E402
from leaks import (  # noqa: E402
    check_leaks,
    resource_sharer_fds,
    resource_sharer_thread,
)


@pytest.fixture
def no_leaks():
    """Fail the test if it leaves processes, threads, descriptors or shared memory behind."""
    with check_leaks(shm=SHM_PATTERNS, allowed_thread=resource_sharer_thread, fds=True,
                     process_wide_fds=(resource_sharer_fds,), allowed_fd_target=_driver_owned):
        yield


def _driver_owned(target: str) -> bool:
    """Descriptors a GPU driver keeps for the life of the process once it is
    initialised (device nodes, its event and shared-memory handles): no leak."""
    return target.startswith(("/dev/nvidia", "/dev/dri/")) or target in (
        "anon_inode:[eventfd]", "anon_inode:[pidfd]",
    ) or (target.startswith("/dev/shm/cuda") and torch.cuda.is_initialized())
