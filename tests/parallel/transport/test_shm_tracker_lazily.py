"""The resource tracker starts with the first name the caller registers, not before.

A tracker is a whole interpreter to start (about 15 ms of a short script under
``fork``, where the standard library's pool starts none). The caller registers
every name its workers use, so a pool of small items never needs one; a
worker forked before its caller had a tracker registers nothing itself: its
big results travel in-band and it asks for names, which serve its next ones.
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from _parallel_support import METHODS, run_script, shm_segments

from easycore.common.parallel import Pool, SharedMemoryTransport
from easycore.common.parallel.transport import shm
from easycore.common.parallel.transport.shared_memory import Packed

pytestmark = [
    pytest.mark.skipif(not shm.AVAILABLE, reason="no POSIX shared memory"),
    pytest.mark.timeout(120),
]

fork_only = pytest.mark.skipif("fork" not in METHODS, reason="no fork on this platform")


def _report(mode: str) -> dict:
    out = run_script("tracker_lazily.py", mode, timeout=100)
    assert out.returncode == 0, out.stderr
    assert "resource_tracker" not in out.stderr and "leaked" not in out.stderr, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@fork_only
def test_a_fork_pool_of_small_items_starts_no_tracker_until_a_segment_is_needed():
    report = _report("small")
    assert report["sum"] == sum(x * x for x in range(200))
    assert report["tracker_after_small"] is False
    assert report["big_arg"] == 256 * 1024  # the big argument went through a segment...
    assert report["tracker_after_big"] is True  # ...whose name started the tracker
    assert shm_segments(report["pid"]) == []


@fork_only
def test_big_results_from_workers_forked_before_the_tracker_are_right_and_leave_nothing():
    report = _report("results")
    assert report["results_right"] == [True, True, True]
    # The first large result went in-band, and its worker asked for names; once
    # the caller has a tracker, every worker gets names (the other one may
    # have had them before its first large result)...
    assert report["asked"] and set(report["asked"]) <= {0, 1}
    assert report["in_segments"] == [0, 1]  # ...and then sent results in segments
    assert shm_segments(report["pid"]) == []


@pytest.fixture
def no_tracker_here(monkeypatch):
    """This process as a worker forked before its caller had a tracker."""
    monkeypatch.setattr(shm, "_tracker_here", False)


def test_a_worker_without_a_tracker_or_names_sends_in_band_and_asks(no_leaks, no_tracker_here):
    caller = SharedMemoryTransport(threshold=1024)
    caller.prepare()
    assert not shm.has_tracker()  # prepare starts none for the engine's transport
    worker = pickle.loads(pickle.dumps(caller))
    worker.bind_worker(0)
    assert caller.feedback(0) is None  # no names reserved: nobody needs one yet
    big = np.arange(4096, dtype=np.float64)
    payload, _ = worker.encode_results([big])
    assert not isinstance(payload, Packed)  # in-band: no segment, no registration
    assert not shm.has_tracker()
    asked = worker.worker_feedback()
    assert asked is not None and asked.wants_names and not asked.full
    try:
        caller.on_worker_feedback(0, pickle.loads(pickle.dumps(asked)))
        np.testing.assert_array_equal(caller.decode_results(0, payload)[0], big)
        names = caller.feedback(0)
        assert names is not None and len(names.reserved) == caller.grants_per_worker
        worker.on_feedback(pickle.loads(pickle.dumps(names)))
        payload, _ = worker.encode_results([big])
        assert isinstance(payload, Packed) and payload.name == names.reserved[0]
        got = caller.decode_results(0, payload)[0]
        np.testing.assert_array_equal(got, big)
        del got
    finally:
        caller.cleanup()


@pytest.mark.parametrize("method", [m for m in METHODS if m != "fork"])
def test_a_spawned_worker_knows_it_shares_its_callers_tracker(method):
    # spawn and forkserver hand each worker its caller's tracker: such a worker
    # registers a segment of its own when it runs out of reserved names.
    with Pool(1, start_method=method) as pool:
        assert pool.apply(shm.has_tracker) is True


def test_a_transport_whose_workers_register_starts_the_tracker_at_prepare(no_tracker_here):
    class Registering(SharedMemoryTransport):
        reserve_names = False  # as services: each side registers its own

    Registering().prepare()
    assert shm.has_tracker()
