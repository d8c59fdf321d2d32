"""VersionedStore: the compare-and-set table, in-process and as a service,
copies, and two client processes racing on one key."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest
from _services_support import push_until_done

from easycore.common.parallel import WorkerError
from easycore.common.parallel.services import Service, VersionedStore

# (operation, arguments, expected result); run in order on a store of depth 2.
TABLE = [
    ("pull", ("k",), None),  # unknown key
    ("versions", ("k",), []),
    ("push", ("k", "a", 1, 0), False),  # a new key needs prev_version=None
    ("push", ("k", "a", 1, None), True),  # the first push
    ("push", ("k", "a2", 2, None), False),  # the key exists now
    ("push", ("k", "b", 2, 1), True),
    ("push", ("k", "x", 3, 1), False),  # stale: 2 is the newest
    ("pull", ("k",), ("b", 2)),  # a failed push changes nothing
    ("push", ("k", "c", 3, 2), True),
    ("versions", ("k",), [2, 3]),  # depth 2: version 1 is gone
    ("pull", ("k", 1), None),
    ("pull", ("k", 2), ("b", 2)),
    ("pull", ("k", 3), ("c", 3)),
    ("push", ("k", "d", "four", 3), True),  # any hashable version
    ("pull", ("k",), ("d", "four")),
    ("push", ("other", 0.5, 10, None), True),  # keys are independent
    ("versions", ("other",), [10]),
    ("keys", (), ["k", "other"]),
]


def run_table(call):
    for op, args, expected in TABLE:
        assert call(op, *args) == expected, (op, args)


def test_table_in_process():
    store = VersionedStore(depth=2)
    run_table(lambda op, *args: getattr(store, op)(*args))


def test_table_as_a_service(no_leaks):
    with Service.start(VersionedStore, depth=2) as store:
        run_table(store.call)


@pytest.mark.parametrize("bad", [
    ("k", "v", None, None),  # no version
    ("k", "v", 1, 1),  # version == prev_version
])
def test_bad_versions_raise(bad):
    with pytest.raises(ValueError, match="version"):
        VersionedStore().push(*bad)


def test_repeated_version_raises_and_changes_nothing():
    store = VersionedStore(depth=3)
    assert store.push("k", "a", 1, None) and store.push("k", "b", 2, 1)
    with pytest.raises(ValueError, match="already stored"):
        store.push("k", "c", 1, 2)
    assert store.versions("k") == [1, 2]


@pytest.mark.parametrize("depth", [0, -1, 1.5, True])
def test_depth_must_be_a_positive_int(depth):
    with pytest.raises(ValueError, match="depth"):
        VersionedStore(depth=depth)


def test_errors_through_a_service_carry_the_traceback(no_leaks):
    with Service.start(VersionedStore) as store:
        with pytest.raises(WorkerError, match="must differ from prev_version") as info:
            store.call("push", "k", 1, 5, 5)
        assert isinstance(info.value.__cause__, ValueError)
        assert "versioned_store.py" in info.value.remote_traceback
        assert store.call("versions", "k") == []  # and the service carries on


def test_values_are_copies_in_process():
    store = VersionedStore()
    value = np.zeros(4)
    store.push("k", value, 1, None)
    value[:] = 1  # after pushing
    pulled, _ = store.pull("k")
    pulled[:] = 2  # after pulling
    assert store.pull("k")[0].tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("n", [4, 1 << 20])  # in the pickle, and through shared memory
def test_values_are_copies_through_a_service(no_leaks, n):
    with Service.start(VersionedStore) as store:
        value = np.zeros(n)
        assert store.call("push", "k", value, 1, None)
        value[:] = 1
        pulled, version = store.call("pull", "k")
        assert version == 1 and not pulled.any()
        pulled[:] = 2
        again, _ = store.call("pull", "k")
        assert not again.any()
        del pulled, again


def test_two_clients_racing_get_strictly_increasing_versions(no_leaks):
    """Every acknowledged push is a distinct next version and stays visible."""
    per_client = 60
    ctx = multiprocessing.get_context("spawn")
    with Service.start(VersionedStore, depth=2 * per_client) as store:
        results = ctx.Queue()
        clients = [
            ctx.Process(target=push_until_done, args=(store, "w", who, per_client, results))
            for who in ("a", "b")
        ]
        for p in clients:
            p.start()
        acked = dict(results.get(timeout=120) for _ in clients)
        for p in clients:
            p.join(30)
            assert p.exitcode == 0
        for who, pushes in acked.items():
            versions = [v for v, _ in pushes]
            assert versions == sorted(versions) and len(set(versions)) == per_client, who
        everything = sorted(acked["a"] + acked["b"])
        assert [v for v, _ in everything] == list(range(1, 2 * per_client + 1))
        for version, value in everything:  # visible, with the winner's value
            assert store.call("pull", "w", version) == (value, version)
        results.close()
        results.join_thread()
