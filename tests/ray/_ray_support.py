"""Helpers of the Ray tests: the environment Ray starts in, and leak checks."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import psutil
import pytest

HERE = str(Path(__file__).resolve().parent)
LOOPBACK = "127.0.0.1"
#: ray.init arguments of every Ray these tests start
LOCAL_INIT = {
    "include_dashboard": False,
    "_node_ip_address": LOOPBACK,
    "object_store_memory": 300 << 20,
    "log_to_driver": False,
}


@contextlib.contextmanager
def ray_env():
    """The environment Ray's processes inherit while Ray starts: this folder
    on ``PYTHONPATH``, so that the actors import ``_ray_runners``."""
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, saved) if p)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def wait_gone(pids, timeout: float = 20.0) -> list:
    """Wait until none of ``pids`` is a live process; return those still alive."""
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if p is not None]
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _alive(pid)]
        if alive:
            time.sleep(0.1)
    return alive


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_actors_gone(ray, actors, pids) -> None:
    """Nothing left running: every actor refuses calls and its process has exited."""
    for actor in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.where.remote(), timeout=20)
    assert wait_gone(pids) == []
