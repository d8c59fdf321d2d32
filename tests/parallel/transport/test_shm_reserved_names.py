"""Names of workers' segments, registered by the caller: a killed worker leaves no false alarm.

A segment's name is registered with the resource tracker before the segment
exists (a family killed between the two still leaves nothing). When the worker
registered it, a worker killed between the registration and ``shm_open`` left
a name that nobody knew: when the program ended the tracker reported "1 leaked
shared_memory objects" and failed to unlink it (seen in CI, under load, as a
runner closed after an error). The caller now registers the names its workers
make their own segments under and releases each, made or not.

The tracker's books are read through a spy on ``register``/``unregister``
that keeps them as the tracker does (a set per process family; unregistering
an unknown name is an error the tracker prints).
"""

from __future__ import annotations

import errno
import json
import pickle
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from _parallel_support import METHODS, SCRIPTS, run_script, shm_segments

from easycore.common.parallel import SharedMemoryTransport
from easycore.common.parallel.transport import shm

pytestmark = [
    pytest.mark.skipif(not shm.AVAILABLE, reason="no POSIX shared memory"),
    pytest.mark.timeout(120),
]


class Books:
    """The resource tracker's books, kept as it keeps them."""

    def __init__(self) -> None:
        self.names: set = set()
        self.errors: list = []

    def register(self, name: str, rtype: str) -> None:
        self.names.add(name)

    def unregister(self, name: str, rtype: str) -> None:
        if name not in self.names:
            self.errors.append(f"unregistered {name!r}, which is not registered")
        self.names.discard(name)


@pytest.fixture
def books(monkeypatch):
    """Every registration the transport makes, still sent to the real tracker."""
    kept = Books()
    tracker = shm.resource_tracker
    real_register, real_unregister = tracker.register, tracker.unregister

    def register(name, rtype):
        kept.register(name, rtype)
        real_register(name, rtype)

    def unregister(name, rtype):
        kept.unregister(name, rtype)
        real_unregister(name, rtype)

    monkeypatch.setattr(tracker, "register", register)
    monkeypatch.setattr(tracker, "unregister", unregister)
    return kept


@pytest.fixture
def halves(no_leaks, books):
    """A caller half and a worker half (as a worker unpickles it), after the first message."""
    caller = SharedMemoryTransport(threshold=1024)
    caller.prepare()
    # A caller with a tracker (one that registered a name before, or whose
    # workers spawn): names come with the first message. Without one, they come
    # once a worker asks (test_shm_tracker_lazily.py).
    shm.ensure_tracker()
    worker = pickle.loads(pickle.dumps(caller))
    worker.bind_worker(0)
    first = caller.feedback(0)
    worker.on_feedback(pickle.loads(pickle.dumps(first)))
    try:
        yield caller, worker, first.reserved
    finally:
        caller.cleanup()
    assert books.errors == []
    assert books.names == set()  # every name registered was released


def _name(payload):
    assert not isinstance(payload, (bytes, list)), "expected a payload in shared memory"
    return payload[1]


def test_the_first_message_carries_registered_names_for_the_workers_own_segments(halves, books):
    caller, worker, reserved = halves
    assert reserved and books.names == set(reserved)
    assert all(name.startswith("/" + caller.prefix) for name in reserved)
    payload, _ = worker.encode_results([np.ones(10_000)])
    assert _name(payload) == reserved[0]  # made under a name the caller registered
    assert caller.decode_results(0, payload)[0].sum() == 10_000
    again = caller.feedback(0)
    assert again is not None and len(again.reserved) == 1  # the one used, replaced
    assert again.reserved[0] not in reserved


def test_names_a_dead_worker_never_made_are_released_at_once(halves, books):
    caller, _worker, reserved = halves
    caller.worker_gone(0)
    assert books.names.isdisjoint(reserved)  # not left for cleanup: a pool lives long
    fresh = caller.feedback(0)  # its replacement gets names of its own
    assert fresh.reserved and set(fresh.reserved).isdisjoint(reserved)


def test_a_segment_a_dead_worker_made_but_never_reported_goes_at_cleanup(halves, books):
    caller, worker, _reserved = halves
    payload, _ = worker.encode_results([np.ones(10_000)])  # its message never arrives
    made = _name(payload)
    caller.worker_gone(0)
    assert made in books.names and shm.exists(made)
    caller.cleanup()  # the halves fixture checks the books; no_leaks the segment
    assert not shm.exists(made)


def test_a_result_read_after_its_worker_was_gone_is_still_read(halves, books):
    caller, worker, _reserved = halves
    payload, _ = worker.encode_results([np.full(10_000, 3.0)])
    caller.worker_gone(0)  # the death was seen before its last message was read
    results = caller.decode_results(0, payload)
    assert results[0][0] == 3.0
    del results
    # cleanup releases it once, as the segment it now is (no unregistering twice)


def test_a_reserved_name_with_no_room_behind_it_is_released_and_replaced(halves, books,
                                                                          monkeypatch):
    caller, worker, reserved = halves

    def full(fd, size):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(shm, "_reserve", full)
        payload, _ = worker.encode_results([np.ones(10_000)])
    assert isinstance(payload, bytes)  # in-band: the call goes on
    report = worker.worker_feedback()
    assert report.full and reserved[0] in report.unused
    with pytest.warns(ResourceWarning, match="/dev/shm is full"):
        caller.on_worker_feedback(0, report)
    assert reserved[0] not in books.names and not shm.exists(reserved[0])
    again = caller.feedback(0)
    assert again.reserved and reserved[0] not in again.reserved


def test_a_service_makes_its_replies_under_names_its_client_registered(no_leaks, books):
    # A service and its client follow the runner's rule too: whoever reads a
    # segment registers its name before the other side makes it, so a
    # service killed while making one leaves its client's tracker nothing
    # it does not release.
    from easycore.common.parallel.services import Service

    with Service.start(dict) as handle:
        assert handle.run(len, [1]) == 1  # connected: names handed over with the call
        channel = handle._state.channel
        reserved = {n for n in books.names if n.startswith("/" + channel._reply.prefix)}
        assert len(reserved) == channel._reply.grants_per_worker
        result = handle.run(np.ones, 100_000)
        made = set(channel._reply._caller.segs)
        assert made and made <= reserved  # made under a name this process registered
        del result
    assert books.errors == []
    assert books.names == set()  # every name released, used or not


def test_a_released_name_can_no_longer_be_made(no_leaks, books):
    # Every client of a reserved name (a runner's or pool's worker, a Queue's
    # producer, a service) makes its segment through create(register=False):
    # it sizes the segment the reserving process made, and makes none once
    # that process (or its tracker) released the name.
    name = "/" + shm.make_prefix("ect") + "w0-1"
    shm.reserve(name)
    assert shm.exists(name) and not shm.made(name)  # held, empty
    mm = shm.create(name, 4096, register=False)
    assert shm.made(name)
    mm.close()
    shm.unmake(name)  # not used after all: the memory goes, the name stays
    assert shm.exists(name) and not shm.made(name)
    shm.create(name, 4096, register=False).close()  # usable again
    shm.release(name)
    with pytest.raises(shm.SegmentVanished, match=rf"{name}.*released before process"):
        shm.create(name, 4096, register=False)
    assert not shm.exists(name)
    assert books.names == set() and books.errors == []


def test_a_name_registered_for_a_segment_that_could_not_be_opened_is_forgotten(books,
                                                                             monkeypatch):
    # Only a reserved name (no O_CREAT) turns a missing name into SegmentVanished;
    # a name create registered itself is unregistered whatever shm_open raised.
    def missing(name, flags, mode=0o777):
        raise FileNotFoundError(errno.ENOENT, "no /dev/shm")

    monkeypatch.setattr(shm._posixshmem, "shm_open", missing)
    name = "/" + shm.make_prefix("ect") + "c-1"
    with pytest.raises(FileNotFoundError) as info:
        shm.create(name, 4096)
    assert type(info.value) is FileNotFoundError
    assert books.names == set() and books.errors == []


KINDS = ["runner", "pool", "jobqueue", "background"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("method", METHODS)
def test_a_worker_killed_before_making_its_segment_leaves_no_false_alarm(method, kind, tmp_path):
    proc = run_script("killed_before_shm_open.py", method, kind, str(tmp_path / "died"),
                      timeout=100)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "died").exists()  # a worker did die there
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    if kind in ("pool", "jobqueue"):
        assert report["outcomes"][5] == "WorkerDiedError"  # that item only
        assert report["outcomes"][:5] == [0, 1, 2, 3, 4] and report["after"] == 1
    else:
        assert report["error"] == "WorkerDiedError"
    # The tracker writes its warnings as it exits, after the script: the
    # pipes close only then, so stderr holds them by now.
    assert "leaked" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert shm_segments(report["pid"]) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork and /dev/shm's files")
def test_a_worker_that_makes_its_segment_after_its_callers_death_leaves_none(tmp_path):
    # Under fork the workers may not hold the tracker's pipe: when the caller
    # is killed, the tracker removes its names while a worker may still be
    # in shm_open. The caller makes each reserved name's segment (empty);
    # the worker only sizes it, so one that comes after the removal makes
    # nothing. It used to create the segment, which nobody then removed.
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "parent_killed_as_worker_makes_segment.py"), str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(SCRIPTS))
    try:
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL, (out, err)
    caller = json.loads(out.splitlines()[0])["caller"]
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("outcome-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    outcomes = [p.read_text() for p in tmp_path.glob("outcome-*")]
    assert outcomes and all(o == "FileNotFoundError" for o in outcomes), outcomes
    assert shm_segments(caller) == []
