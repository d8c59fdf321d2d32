"""Helpers of the Ray tests: the environment Ray starts in, and leak checks."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, ClassVar

import pytest
from _ray_elastic import wait_for
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


#: The head's health checks, quicker than Ray's defaults (a node killed outright is
#: then declared dead after about 2.5 s, not 15 s or more), yet loose enough for a
#: loaded 2-core machine.
FAST_HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 5,
}


class ElasticCluster:
    """A local cluster whose nodes come and go, on loopback only.

    The head has no CPUs (only the GCS and the driver), so every actor runs on a
    worker node: ``big`` (2 CPUs) and ``spare`` (1 CPU, and a resource ``"spare"``
    that pins an actor there), which tests remove (``lose_spare``) and add again
    (``add_spare``). Three one-CPU workers thus put exactly one actor on the spare node.
    """

    NODE: ClassVar[dict] = {"node_ip_address": LOOPBACK, "include_dashboard": False,
                            "object_store_memory": 80 << 20}
    SPARE: ClassVar[dict] = {**NODE, "num_cpus": 1, "resources": {"spare": 1}}

    def __init__(self) -> None:
        import ray
        from ray.cluster_utils import Cluster

        self.ray = ray
        with ray_env():
            self.cluster = Cluster(initialize_head=True, head_node_args={
                **self.NODE, "num_cpus": 0, "_system_config": FAST_HEALTH_CHECKS})
            try:
                self.big = self.cluster.add_node(**self.NODE, num_cpus=2)
                self.spare: Any = self.cluster.add_node(**self.SPARE)
                ray.init(address=self.cluster.address, _node_ip_address=LOOPBACK,
                         log_to_driver=False)
                self.cluster.wait_for_nodes(timeout=60)
            except BaseException:
                self.shutdown()
                raise

    @property
    def address(self) -> str:
        return self.cluster.address

    def lose(self, node: Any, graceful: bool = True) -> str:
        """Remove ``node`` (``graceful=False``: kill its processes outright); its id."""
        node_id = node.node_id
        self.cluster.remove_node(node, allow_graceful=graceful)
        if node is self.spare:
            self.spare = None
        if node is self.big:
            self.big = None
        return node_id

    def lose_spare(self, graceful: bool = True) -> str:
        return self.lose(self.spare, graceful)

    def add_spare(self) -> str:
        """A new 1-CPU node (the spare); its id once the cluster counts it."""
        with ray_env():
            self.spare = self.cluster.add_node(**self.SPARE)
        self.cluster.wait_for_nodes(timeout=60)
        return self.spare.node_id

    def ensure_nodes(self) -> None:
        """``big`` and ``spare`` are up (a test before may have removed them)."""
        if self.big is None:
            with ray_env():
                self.big = self.cluster.add_node(**self.NODE, num_cpus=2)
        if self.spare is None:
            with ray_env():
                self.spare = self.cluster.add_node(**self.SPARE)
        self.cluster.wait_for_nodes(timeout=60)
        try:
            wait_for(lambda: self.ray.available_resources().get("CPU", 0) >= 3,
                     "the cluster's 3 CPUs to be free")
        except TimeoutError as exc:
            # Say who holds them: a test before left an actor or a task running.
            raise TimeoutError(f"{exc}; free: {self.ray.available_resources()}, "
                               f"in all: {self.ray.cluster_resources()}, "
                               f"actors: {_live_actors(self.ray)}") from None

    def shutdown(self) -> None:
        self.ray.shutdown()
        self.cluster.shutdown()



def _live_actors(ray: Any) -> Any:
    """The cluster's actors that are not dead (class, node, state), or why not known."""
    try:
        from ray.util.state import list_actors

        return [(a.class_name, a.node_id, a.state) for a in list_actors(limit=100)
                if a.state != "DEAD"]
    except Exception as exc:  # noqa: BLE001 -- a diagnostic, never the failure itself
        return f"unknown ({exc!r})"
