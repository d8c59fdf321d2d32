"""``backend="ray"``: the same Pool on Ray actors, against a local Ray the test starts.

One Ray (loopback only, 3 declared CPUs) serves the module, as in
``tests/ray``; the pools never shut it down. Ray's worker processes get this
folder on ``PYTHONPATH`` so that they import the tasks of ``_pool_funcs``.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
from _pool_funcs import (
    TaskError,
    add,
    context_info,
    exit_on,
    fail_on,
    identity,
    nap,
    remember,
    remembered,
    square,
    worker_pid,
)
from processes import wait_gone

from easycore.common.parallel import Pool, TaskTimeoutError, WorkerDiedError

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]

WAIT = 60
# This folder (the test module) and tests/parallel (its helper modules).
HERE = os.pathsep.join(str(d) for d in Path(__file__).resolve().parents[:2])
LOOPBACK = "127.0.0.1"


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray of 3 CPUs on 127.0.0.1, started and shut down by this module."""
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    # Read by Ray's processes when they start: loopback addresses, and our tasks.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, saved["PYTHONPATH"]) if p)
    try:
        ray = pytest.importorskip("ray")
        assert not ray.is_initialized()
        ray.init(address="local", num_cpus=3, include_dashboard=False,
                 _node_ip_address=LOOPBACK, object_store_memory=300 << 20, log_to_driver=False)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def pool(local_ray):
    p = Pool(2, backend="ray", initializer=remember, initargs=("ray",))
    pids = p.worker_pids
    try:
        yield p
    finally:
        p.close()
        p.join()
    assert local_ray.is_initialized()  # the test's Ray: left up
    assert wait_gone(pids) == []


def test_the_stdlib_calls_on_actors(pool):
    assert pool.map(square, range(100)) == [x * x for x in range(100)]
    assert pool.starmap(add, [(1, 2), (3, 4)], 1) == [3, 7]
    assert list(pool.imap(identity, (x for x in range(50)), 5)) == list(range(50))
    assert sorted(pool.imap_unordered(square, range(20))) == [x * x for x in range(20)]
    assert pool.apply(add, (1,), {"b": 2}) == 3
    assert pool.apply_async(square, (9,)).get(WAIT) == 81
    assert pool.submit(add, 2, b=5).result(WAIT) == 7


def test_lambdas_and_closures_travel_by_value(pool):
    offset = 7
    assert pool.map(lambda x: x + offset, range(3)) == [7, 8, 9]


def test_exceptions_keep_their_type(pool):
    with pytest.raises(TaskError, match="bad item 3"):
        pool.map(fail_on, range(6), 1)
    it = pool.imap(fail_on, range(5), 1)
    got = []
    for _ in range(5):
        try:
            got.append(it.next(timeout=WAIT))
        except TaskError:
            got.append("failed")
    assert got == [0, 1, 2, "failed", 4]


def test_broadcast_initializer_and_contexts(pool):
    pids = pool.broadcast(worker_pid)
    assert pids == pool.worker_pids and os.getpid() not in pids and len(set(pids)) == 2
    assert pool.broadcast(remembered) == [("ray", pid) for pid in pids]
    assert [c["index"] for c in pool.broadcast(context_info, pass_context=True)] == [0, 1]


def test_a_task_timeout_replaces_the_actor_and_the_pool_goes_on(pool):
    before = pool.worker_pids
    with pytest.raises(TaskTimeoutError) as info:
        pool.apply(nap, (60,), task_timeout=1.0)
    stuck = info.value.worker_index
    assert info.value.device == "cpu" and info.value.pid == before[stuck]
    # An actor's stack cannot be read from here (no signal handler of ours in
    # it): the error says less, and stacks() says so for every actor.
    assert info.value.stack is None
    assert all("ray stack" in text for text in pool.stacks().values())
    assert pool.map(square, range(10)) == [x * x for x in range(10)]
    after = pool.broadcast(worker_pid)
    assert after[stuck] != before[stuck] and after[1 - stuck] == before[1 - stuck]
    assert pool.broadcast(remembered)[stuck][0] == "ray"  # initializer ran again


def test_an_actor_that_dies_fails_its_items_and_is_replaced(pool):
    it = pool.imap(functools.partial(exit_on, bad=2), range(6), 1)
    got = []
    for _ in range(6):
        try:
            got.append(it.next(timeout=WAIT))
        except WorkerDiedError as exc:
            got.append(("died", exc.items))
    assert ("died", [2]) in got
    # Each item is delivered or named as lost; an item the actor finished just
    # before dying may be lost with it (Ray had not sent its result yet).
    for k, g in enumerate(got):
        assert g == k or g == ("died", [k]), got
    assert sum(1 for g in got if isinstance(g, tuple)) <= 3  # max_deaths
    assert pool.map(square, range(4)) == [0, 1, 4, 9]
    assert len(set(pool.broadcast(worker_pid))) == 2
