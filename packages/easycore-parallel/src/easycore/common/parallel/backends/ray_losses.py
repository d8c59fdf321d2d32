"""What Ray says about a dead actor, as data: a lost node, a kill from outside, or its own process.

Ray reports an actor's end as a ``RayActorError`` whose message (the GCS's
``ActorDiedErrorContext``, rendered) says why; the exception keeps only that text
and a ``preempted`` flag. [`death_cause`][easycore.common.parallel.backends.ray_losses.death_cause]
reads it into a [`DeathCause`][easycore.common.parallel.errors.DeathCause]:

* the node was drained for preemption (``preempted``), or "The actor died because its
  node has died" (terminated, missed heartbeats), or ``ActorUnavailableError`` (Ray cannot
  reach it): ``"node lost"``, the item it ran is not at fault;
* "... it was killed by `ray.kill`" (easycore did not kill it): ``"killed"``, not at fault;
* "Worker exit type: NODE_OUT_OF_MEMORY" (Ray's memory monitor), or any other end of its
  process (a crash, ``os._exit``, SIGKILL, the kernel's OOM killer): ``"worker died"``, the
  item it ran is at fault.

The engine decides with the kind alone
([`DeathCause.infrastructure`][easycore.common.parallel.errors.DeathCause.infrastructure]).
The errors here carry it:
[`RayWorkerDiedError`][easycore.common.parallel.backends.ray_losses.RayWorkerDiedError]
(a runner's lost worker) and
[`RayCapacityError`][easycore.common.parallel.backends.ray_losses.RayCapacityError]
(no room for a worker within ``capacity_timeout``, the rule of
[`out_of_room`][easycore.common.parallel.backends.ray_losses.out_of_room]).
"""

from __future__ import annotations

import re

from ..errors import DeathCause, ParallelError, WorkerDiedError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, List, Mapping, Optional, Sequence

__all__ = ["RayCapacityError", "RayWorkerDiedError", "death_cause", "out_of_room"]

_NODE_DIED = re.compile(
    r"its node has died\. Node Id: (?P<node>[0-9a-fA-F]+)[ \t]*(?:\n[ \t]*(?P<detail>[^\n]+))?")
_IP = re.compile(r"^[ \t]*ip: (?P<ip>\S+)[ \t]*$", re.MULTILINE)
_EXIT_TYPE = re.compile(r"Worker exit type: (?P<type>[A-Z_]+)")
_RAY_KILL = "killed by `ray.kill`"


def death_cause(exc: BaseException, node_id: Optional[str] = None,
                node_ip: Optional[str] = None) -> DeathCause:
    """Why a Ray actor is gone, read from the error a call on it raised.

    Args:
        exc (BaseException): the ``RayActorError`` (``ActorDiedError``,
            ``ActorUnavailableError``) a call on the actor raised.
        node_id (str or None): where the actor ran, if known (Ray's message may say it
            better: a node's death names the node).
        node_ip (str or None): that node's address, if known.

    Returns:
        DeathCause: ``"node lost"``, ``"killed"`` or ``"worker died"``, with the node.
    """
    text = str(exc)
    ip = _IP.search(text)
    node_ip = ip["ip"] if ip else node_ip
    node = _NODE_DIED.search(text)
    if node:
        node_id = node["node"]
    if getattr(exc, "preempted", False):
        return DeathCause("node lost", "preempted", node_id, node_ip)
    if node:
        detail = (node["detail"] or "").strip()
        detail = detail.replace("the actor's node was ", "") or "the node died"
        return DeathCause("node lost", detail, node_id, node_ip)
    if type(exc).__name__ == "ActorUnavailableError":
        return DeathCause("node lost", "unreachable: Ray lost the connection to it",
                          node_id, node_ip)
    if _RAY_KILL in text:
        return DeathCause("killed", "ray.kill", node_id, node_ip)
    exit_type = _EXIT_TYPE.search(text)
    if exit_type and exit_type["type"] == "NODE_OUT_OF_MEMORY":
        return DeathCause("worker died", "killed by Ray's memory monitor: its node ran low on "
                          "memory", node_id, node_ip)
    how = f"exit type {exit_type['type']}" if exit_type else "its process ended"
    return DeathCause("worker died", f"{how}: a crash, os._exit, or a signal such as the "
                      f"out-of-memory killer's", node_id, node_ip)


def out_of_room(unplaced: Mapping[int, float], running: bool, running_at: float,
                starting_at: Optional[float], limit: Optional[float], now: float) -> List[int]:
    """The ``capacity_timeout`` rule: which workers waited too long for a node with room.

    At start, every actor must be placed within ``limit`` seconds of the start. Later, a
    replacement waits as long as another worker runs (a node may join meanwhile); once
    none runs, ``limit`` seconds from the later of the last moment one ran and the
    oldest request.

    Args:
        unplaced (Mapping[int, float]): worker slot -> when its actor was asked for
            (``time.monotonic()``), for the actors not placed yet.
        running (bool): whether some worker is placed and alive now.
        running_at (float): when one last was.
        starting_at (float or None): when the start began, while it runs.
        limit (float or None): ``capacity_timeout`` (None: no limit).
        now (float): ``time.monotonic()``.

    Returns:
        list[int]: the slots out of time (all the unplaced ones), or none.
    """
    if limit is None or not unplaced:
        return []
    if starting_at is not None:
        since = starting_at
    elif running:
        return []
    else:
        since = max(running_at, min(unplaced.values()))
    return sorted(unplaced) if now - since > limit else []


class RayWorkerDiedError(WorkerDiedError):
    """A worker actor died (its process or its node); names device, node and cause.

    Attributes:
        node_id (str or None): the Ray node the actor ran on.
        node_ip (str or None): that node's address.
        reason (str): what Ray said.
        cause (DeathCause or None): why it is gone, as data: ``cause.kind`` is
            ``"node lost"``, ``"killed"`` (from outside) or ``"worker died"``; see
            [`death_cause`][easycore.common.parallel.backends.ray_losses.death_cause].
    """

    def __init__(
        self, device: str, worker_index: int, pid: Optional[int], node_id: Optional[str],
        node_ip: Optional[str], reason: str, items: Optional[List[int]] = None,
        cause: Optional[DeathCause] = None,
    ) -> None:
        self.device, self.worker_index, self.pid, self.exitcode = device, worker_index, pid, None
        self.items, self.oom_kills = items, None
        self.node_id, self.node_ip, self.reason, self.cause = node_id, node_ip, reason, cause
        if cause is not None and cause.infrastructure:
            what = (f"was lost: {cause.describe()}. No item is at fault: a runner fails fast "
                    f"at a lost worker, where a Pool, BackgroundTask or JobQueue on Ray would "
                    f"have run its items again on the other workers and carried on")
            where = f"Ray actor, pid {pid}"
        else:
            what = "died unexpectedly" + (f" ({cause.detail})" if cause is not None else "")
            where = f"Ray actor, pid {pid}, node {node_id} at {node_ip}"
        ParallelError.__init__(
            self, f"worker {worker_index} on device {device!r} ({where}) {what}.\n\n"
                  f"Ray: {reason.strip()}",
        )

    def __reduce__(self):
        args = (self.device, self.worker_index, self.pid, self.node_id, self.node_ip,
                self.reason, self.items, self.cause)
        return (type(self), args)


class RayCapacityError(ParallelError):
    """No node of the Ray cluster had room for a worker within ``capacity_timeout``.

    At start, every worker must find room within that time; later, a replacement for
    a lost worker may wait longer while other workers run, and this error ends the
    pool (or runner) only when none has run for ``capacity_timeout`` seconds.

    Attributes:
        workers (list[int]): the worker slots that found no room.
        devices (list[str]): their devices.
        timeout (float): the ``capacity_timeout`` that passed.
        available (dict): what the cluster had free then (``ray.available_resources()``;
            empty if Ray did not answer).
        total (dict): what the cluster had in all (``ray.cluster_resources()``).
        lost (dict): node id -> [`DeathCause`][easycore.common.parallel.errors.DeathCause]
            of the nodes lost meanwhile.
        starting (bool): True at start (every worker needed room), False for
            replacements (none of the other workers was running).
    """

    def __init__(self, workers: Sequence[int], devices: Sequence[str], timeout: float,
                 available: Mapping[str, float], total: Mapping[str, float],
                 lost: Optional[Mapping[Any, DeathCause]] = None, starting: bool = False,
                 ) -> None:
        self.workers, self.devices, self.timeout = list(workers), list(devices), timeout
        self.available, self.total, self.lost = dict(available), dict(total), dict(lost or {})
        self.starting = starting
        names = ", ".join(f"worker {w} on device {d!r}" for w, d in zip(self.workers,
                                                                       self.devices))
        gone = "".join(f"; node {c.node_id} at {c.node_ip} was lost ({c.detail})"
                       for c in self.lost.values())

        def amount(res: Mapping[str, float]) -> str:
            return f"{res.get('CPU', 0):g} CPUs and {res.get('GPU', 0):g} GPUs"

        super().__init__(
            f"no node of the Ray cluster had room for {names} within capacity_timeout="
            f"{timeout:g} s{' of the start' if starting else ', and no other worker was running'}"
            f": the cluster has "
            f"{amount(self.total)}, of which {amount(self.available)} are free{gone}. Add "
            f"nodes or free their resources, or give capacity_timeout more time (None "
            f"waits for ever)"
        )

    def __reduce__(self):
        args = (self.workers, self.devices, self.timeout, self.available, self.total, self.lost,
                self.starting)
        return (type(self), args)
