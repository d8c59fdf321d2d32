"""A worker that is gone holds none of the caller's file descriptors.

Each worker's process object holds a descriptor or two (its sentinel) until it
is closed or collected. The back-end closes it once the worker is reaped: a
pool that replaces its workers for days (``maxtasksperchild``) must not run out
of descriptors, and an error whose traceback holds the back-end (kept in a
list, logged later) must hold no pipe. Under every start method, and for the
zygote that forks replacements under ``fork``.
"""

from __future__ import annotations

import multiprocessing

import pytest
from _engine_funcs import square
from _parallel_helpers import Fail
from leaks import check_leaks, open_fds

from easycore.common.config import CfgNode
from easycore.common.parallel import Pool, WorkerError

pytestmark = pytest.mark.timeout(180)

METHODS = ["fork", "forkserver", "spawn"]


@pytest.mark.parametrize("method", METHODS)
def test_replacing_workers_does_not_accumulate_descriptors(method):
    with Pool(2, maxtasksperchild=1, context=multiprocessing.get_context(method)) as pool:
        assert pool.map(square, range(4), chunksize=1) == [0, 1, 4, 9]
        before = len(open_fds())
        assert pool.map(square, range(40), chunksize=1) == [x * x for x in range(40)]
        after = len(open_fds())
    # 40 replacements held one or two descriptors each before (40 to 80 more). What
    # may differ now is each slot's replacement caught mid-way: the old worker not yet
    # reaped (its pipe ends, sentinel, stack file) beside the new one still starting
    # (both its pipes, and spawn's preparation pipe) -- up to 8 a slot, 16 for two.
    assert after <= before + 16, (before, after)


@pytest.mark.parametrize("method", METHODS)
def test_a_failed_start_whose_error_is_kept_holds_no_descriptor(method):
    cfg = CfgNode({"fail": "producer_init", "item": None, "device": "cpu:1"})
    kept = []
    with check_leaks(fds=True):
        with pytest.raises(WorkerError) as info:
            Fail(["cpu", "cpu:1"], cfg=cfg, start_method=method)
        kept.append(info.value)  # its traceback holds the runner, the back-end, the workers
    assert kept[0].hook == "producer_init"
