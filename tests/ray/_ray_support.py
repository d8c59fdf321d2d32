"""Helpers of the Ray tests: the environment Ray starts in, and leak checks."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from processes import wait_gone

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


def assert_actors_gone(ray, actors, pids) -> None:
    """Nothing left running: every actor refuses calls and its process has exited."""
    for actor in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.where.remote(), timeout=20)
    assert wait_gone(pids) == []
