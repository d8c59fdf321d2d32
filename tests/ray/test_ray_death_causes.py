"""How a Ray actor died, read from what Ray reports: one test per kind, and the rule
that bounds the wait for room. Ray's own exception classes, built from the death
contexts its GCS sends (the texts are Ray 2.60's); no Ray is started here. The
same kinds, produced for real on a cluster, are in ``test_ray_node_loss``.
"""

from __future__ import annotations

import pickle

import pytest

ray = pytest.importorskip("ray")

from ray.core.generated.common_pb2 import ActorDiedErrorContext, NodeDeathInfo  # noqa: E402
from ray.exceptions import ActorDiedError, ActorUnavailableError  # noqa: E402

from easycore.common.parallel import NodesLostError  # noqa: E402
from easycore.common.parallel.backends.ray import (  # noqa: E402
    RayCapacityError,
    RayWorkerDiedError,
    death_cause,
)
from easycore.common.parallel.backends.ray_losses import out_of_room  # noqa: E402
from easycore.common.parallel.errors import DeathCause  # noqa: E402

NODE = "976f9d2b795dab1084deeb949d9b460c0373062fa54195debcd8521f"
NODE_DIED = f"The actor died because its node has died. Node Id: {NODE}\n\t"
PROCESS_DIED = "The actor is dead because its worker process has died. Worker exit type: "


def _died(message: str, preempted: bool = False) -> ActorDiedError:
    info = NodeDeathInfo(reason=NodeDeathInfo.AUTOSCALER_DRAIN_PREEMPTED if preempted
                         else NodeDeathInfo.UNEXPECTED_TERMINATION)
    return ActorDiedError(ActorDiedErrorContext(
        error_message=message, node_ip_address="10.0.0.7", pid=4242, class_name="RayWorker",
        actor_id=b"\x01" * 16, node_death_info=info))


@pytest.mark.parametrize("detail", [
    "the actor's node was terminated expectedly: received SIGTERM",
    "the actor's node was terminated unexpectedly: health check failed due to missing too "
    "many heartbeats",
])
def test_its_node_died(detail):
    cause = death_cause(_died(NODE_DIED + detail), "other-node", "127.0.0.1")
    assert cause == DeathCause("node lost", detail.replace("the actor's node was ", ""), NODE,
                               "10.0.0.7")  # what Ray says wins over what was known
    assert cause.infrastructure


def test_its_node_was_preempted():
    error = _died(NODE_DIED + "the actor's node was terminated expectedly: preempted", True)
    assert error.preempted
    cause = death_cause(error)
    assert (cause.kind, cause.detail, cause.node_id) == ("node lost", "preempted", NODE)
    assert cause.infrastructure


def test_its_node_cannot_be_reached():
    error = ActorUnavailableError("The actor is temporarily unavailable: RpcError: RPC error: "
                                  "Socket closed rpc_code: 14", b"\x01" * 16)
    cause = death_cause(error, NODE, "10.0.0.7")
    assert cause.kind == "node lost" and cause.node_id == NODE and cause.infrastructure


@pytest.mark.parametrize("message", [
    "The actor is dead because it was killed by `ray.kill`.",
    PROCESS_DIED + "INTENDED_SYSTEM_EXIT Worker exit detail: Worker exits because the actor "
    "is killed. The actor is dead because it was killed by `ray.kill`.",
])
def test_it_was_killed_from_outside(message):
    cause = death_cause(_died(message), NODE, "10.0.0.7")
    assert (cause.kind, cause.detail, cause.node_id) == ("killed", "ray.kill", NODE)
    assert cause.infrastructure


def test_its_own_process_died():
    # os._exit, a segfault, SIGKILL (the kernel's out-of-memory killer): all look alike.
    message = (PROCESS_DIED + "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits "
               "with a connection error code 2. End of file.")
    cause = death_cause(_died(message), NODE, "10.0.0.7")
    assert cause.kind == "worker died" and "SYSTEM_ERROR" in cause.detail
    assert not cause.infrastructure and cause.node_id == NODE


def test_rays_memory_monitor_killed_it():
    message = (PROCESS_DIED + "NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to "
               "the node running low on memory.")
    cause = death_cause(_died(message), NODE)
    assert cause.kind == "worker died" and "memory monitor" in cause.detail
    assert not cause.infrastructure


def test_the_errors_carry_the_cause_and_pickle():
    lost = DeathCause("node lost", "preempted", NODE, "10.0.0.7")
    err = RayWorkerDiedError("cpu", 1, 4242, NODE, "10.0.0.7", "Ray's text", None, lost)
    assert "was lost" in str(err) and NODE in str(err) and "No item is at fault" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert again.cause == lost and str(again) == str(err)
    own = DeathCause("worker died", "exit type SYSTEM_ERROR", NODE, "10.0.0.7")
    died = RayWorkerDiedError("cpu", 1, 4242, NODE, "10.0.0.7", "Ray's text", [5], own)
    assert "died unexpectedly" in str(died) and "No item is at fault" not in str(died)
    nodes = NodesLostError({NODE: lost, "n2": lost._replace(node_id="n2")}, 1)
    assert "2 nodes" in str(nodes) and "max_node_losses=1" in str(nodes) and NODE in str(nodes)
    assert pickle.loads(pickle.dumps(nodes)).nodes == nodes.nodes
    room = RayCapacityError([2], ["cpu"], 5, {"CPU": 0.0}, {"CPU": 2.0}, {NODE: lost})
    assert "worker 2 on device 'cpu'" in str(room) and "capacity_timeout=5" in str(room)
    assert str(pickle.loads(pickle.dumps(room))) == str(room)


def test_the_wait_for_room():
    # At start every actor must be placed in time, whether others run or not.
    assert out_of_room({1: 0.0}, True, 0.0, 0.0, 5.0, 4.0) == []
    assert out_of_room({1: 3.0, 0: 0.0}, True, 0.0, 0.0, 5.0, 6.0) == [0, 1]
    # Later, a replacement waits as long as another worker runs ...
    assert out_of_room({1: 0.0}, True, 100.0, None, 5.0, 100.0) == []
    # ... and once none runs, from the later of the last one running and the request.
    assert out_of_room({1: 0.0}, False, 10.0, None, 5.0, 14.0) == []
    assert out_of_room({1: 0.0}, False, 10.0, None, 5.0, 16.0) == [1]
    assert out_of_room({1: 12.0}, False, 10.0, None, 5.0, 16.0) == []
    # No limit, or nothing waiting: never.
    assert out_of_room({1: 0.0}, False, 0.0, None, None, 1e9) == []
    assert out_of_room({}, False, 0.0, None, 5.0, 1e9) == []
