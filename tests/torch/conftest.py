"""Fixtures for the torch runner tests: leak checks, and the examples on the path.

Runners start real worker processes; nothing is mocked. ``no_leaks`` asserts
that a test left no worker process, no thread, no open file descriptor and no
shared memory behind: neither easycore's torch segments (``/dev/shm/ect-*``)
nor torch's own (``/dev/shm/torch_*``, from its file_system strategy).
multiprocessing's long-lived helpers (resource tracker, forkserver, resource
sharer) and easycore's launcher thread are allowed.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from multiprocessing import resource_tracker
from pathlib import Path

import psutil
import pytest
import torch

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "examples"

# `from network import Net`, as the tutorial writes it; spawned workers inherit sys.path.
if str(EXAMPLES) not in sys.path:
    sys.path.append(str(EXAMPLES))

from _torch_util import open_fds, shm_segments, stray_children  # noqa: E402


@pytest.fixture
def no_leaks():
    """Fail the test if it leaves processes, threads, descriptors or shared memory behind."""
    resource_tracker.ensure_running()  # started once per interpreter; its pipe is no leak
    threads_before = set(threading.enumerate())
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    shm_before = set(shm_segments())
    fds_before = open_fds()
    yield
    # close() and failed calls join everything before returning: the short grace
    # only absorbs psutil's view lagging behind.
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and stray_children(children_before):
        time.sleep(0.05)
    strays = stray_children(children_before)
    assert not strays, f"leaked processes: {[(p.pid, p.status()) for p in strays]}"
    new_threads = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()
                   and not _process_wide_helper(t)]
    assert not new_threads, f"leaked threads: {new_threads}"
    leaked_shm = sorted(set(shm_segments()) - shm_before)
    assert not leaked_shm, f"leaked shared memory: {leaked_shm}"
    # A worker's sentinel pipe closes when its Process object is collected; a
    # failed constructor's traceback keeps it in a reference cycle until then.
    gc.collect()
    leaked_fds = {fd for fd in open_fds() - fds_before - _process_wide_fds()
                  if not _driver_owned(fd)}
    assert not leaked_fds, f"leaked file descriptors: {_describe_fds(leaked_fds)}"


def _driver_owned(fd: str) -> bool:
    """Descriptors a GPU driver keeps for the life of the process once it is
    initialised (device nodes, its event and shared-memory handles): no leak."""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return False
    return target.startswith(("/dev/nvidia", "/dev/dri/")) or target in (
        "anon_inode:[eventfd]", "anon_inode:[pidfd]",
    ) or (target.startswith("/dev/shm/cuda") and torch.cuda.is_initialized())


def _process_wide_helper(thread: threading.Thread) -> bool:
    """Threads started once per process and kept by design: easycore's launcher
    (starts replacement workers for pools), and multiprocessing's resource
    sharer (hands file descriptors to other processes: torch's tensor sharing)."""
    from multiprocessing import resource_sharer

    sharer = getattr(resource_sharer, "_resource_sharer", None)
    return thread.name == "easycore-launcher" or thread is getattr(sharer, "_thread", None)


def _process_wide_fds() -> set:
    """The resource sharer's listening socket (kept with its thread, see above)."""
    from multiprocessing import resource_sharer

    listener = getattr(getattr(resource_sharer, "_resource_sharer", None), "_listener", None)
    try:
        return {str(listener._listener._socket.fileno())}
    except AttributeError:  # not started (or another Python's internals)
        return set()


def _describe_fds(fds: set) -> list:
    out = []
    for fd in sorted(fds, key=int):
        try:
            out.append((fd, os.readlink(f"/proc/self/fd/{fd}")))
        except OSError:
            out.append((fd, "?"))
    return out
