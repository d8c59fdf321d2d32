"""The garbage collector around a fork (``_os.heap``, issue 32 item 1 and 37 item 3).

A collection writes to every object it visits; after a fork that copies the
pages both processes shared. So the caller collects its young objects just
before it forks workers (a collector turned off stays off), and every worker
freezes what it started with: its collections visit only what it made.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys

import pytest
from _parallel_helpers import HeapSeen
from _parallel_support import METHODS
from _pool_funcs import heap_seen_by_worker, square, worker_pid

from easycore.common.parallel import Pool

pytestmark = pytest.mark.timeout(120)

#: the generations a young collection empties (3.14's incremental collector has one)
YOUNG = (0,) if sys.version_info >= (3, 14) else (0, 1)


@contextlib.contextmanager
def _started(kind: str, method: str):
    """A pool, or a runner that has answered a call (so its workers run), of one worker."""
    if kind == "pool":
        with Pool(1, start_method=method) as pool:
            yield lambda: pool.apply(heap_seen_by_worker)
    else:
        with HeapSeen(1, start_method=method) as runner:
            runner([0])
            yield lambda: runner([0])[0]


@pytest.mark.parametrize("kind", ["pool", "runner"])
@pytest.mark.parametrize("method", METHODS)
def test_a_worker_leaves_what_it_started_with_out_of_its_collections(kind, method):
    with _started(kind, method) as ask:
        made_before_pool, loop_class, frozen = ask()
    # What the worker had before it ran anything (inherited from the caller or the
    # fork server, or imported by a spawned interpreter's start): no longer visited.
    assert not loop_class
    assert frozen > 0
    # A fork worker inherited the caller's objects too; elsewhere the task's import made
    # this one after the start, in the worker, and its collector visits it as usual.
    assert made_before_pool is (method != "fork")


def test_a_replacement_worker_leaves_what_it_started_with_out_of_its_collections():
    with Pool(1, start_method="fork") as pool:
        first = pool.worker_pids[0]
        os.kill(first, signal.SIGKILL)
        assert pool.map(square, range(4), 1) == [0, 1, 4, 9]
        pool.broadcast(worker_pid)  # reaches every slot's worker: the replacement runs
        assert pool.worker_pids[0] != first
        # Forked by the zygote (where it runs) or by the caller: frozen all the same.
        assert pool.apply(heap_seen_by_worker)[:2] == (False, False)


@pytest.mark.parametrize("kind", ["pool", "runner"])
def test_what_the_caller_made_before_a_fork_is_old_when_its_workers_are_forked(kind):
    gc.collect()
    made_before = [[] for _ in range(3)]  # young: nothing has collected them yet
    assert any(o is made_before for g in YOUNG for o in gc.get_objects(generation=g))
    with _started(kind, "fork") as ask:
        assert ask()[:2] == (False, False)
        young = [o for g in YOUNG for o in gc.get_objects(generation=g)]
        assert not any(o is made_before for o in young)
    del young


@pytest.mark.parametrize("kind", ["pool", "runner"])
def test_a_collector_you_turned_off_stays_off_and_collects_nothing(kind):
    collections = []

    def seen(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    gc.disable()
    gc.callbacks.append(seen)
    try:
        with _started(kind, "fork") as ask:
            made_before_pool, loop_class, _frozen = ask()
            assert not gc.isenabled()
        assert collections == []
        assert not made_before_pool and not loop_class  # (the workers froze them all the same)
    finally:
        gc.callbacks.remove(seen)
        gc.enable()
