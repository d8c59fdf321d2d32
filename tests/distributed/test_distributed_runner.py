"""``DistributedRunner``: the tutorial's predictor whose producers form one group."""

from __future__ import annotations

import psutil
import pytest
import torch
from _dist_helpers import (
    DyingInit,
    DyingWork,
    FailingInit,
    TutorialPredictor,
    batch_generator,
    listening_addresses,
    reference_outputs,
)
from processes import wait_gone

from easycore.common.config import CfgNode
from easycore.torch.distributed import WorkerDiedError, WorkerError
from easycore.torch.parallel import RunnerClosedError

pytestmark = pytest.mark.timeout(120)


def _rank_files(folder) -> list:
    return sorted(p.read_text() for p in folder.glob("rank-*.txt"))


def test_tutorial_predictor_with_collectives_in_init_and_end(tmp_path, no_leaks):
    cfg = CfgNode({"out_dir": str(tmp_path)})
    expected = reference_outputs(torch.arange(100.0).view(-1, 1), seed=0)
    with TutorialPredictor(devices=3, cfg=cfg) as predictor:
        assert predictor.dist_backend == "gloo"
        pids = predictor.worker_pids
        result = predictor(batch_generator(list(range(100)), 10))
    # rank 0's weights reached every rank (each seeded its own first)
    assert torch.allclose(result, expected)
    # producer_end ran on every rank and its all_reduce counted all 10 batches
    assert _rank_files(tmp_path) == [f"{r} 3 cpu 10" for r in range(3)]
    assert wait_gone(pids) == []


def test_runner_can_be_activated_again_with_a_new_group(tmp_path, no_leaks):
    predictor = TutorialPredictor(devices=2, cfg={"out_dir": str(tmp_path)})
    try:
        first = predictor(batch_generator(list(range(20)), 5))
        predictor.close()
        assert _rank_files(tmp_path) == ["0 2 cpu 4", "1 2 cpu 4"]
        predictor.activate()  # a fresh store, a fresh group
        second = predictor(batch_generator(list(range(20)), 5))
    finally:
        predictor.close()
    assert torch.equal(first, second)


def test_a_live_group_leaves_the_caller_no_store_to_fork(tmp_path, no_leaks):
    # Rank 0 hosts the store: a store in the caller (its server threads, its
    # sockets) would be inherited, half copied, by whatever the caller forks
    # while the group lives, and such children's ranks could not connect.
    caller = psutil.Process()
    threads, listening = caller.num_threads(), listening_addresses(caller.pid)
    with TutorialPredictor(devices=2, cfg={"out_dir": str(tmp_path)}) as predictor:
        predictor(batch_generator(list(range(10)), 5))
        assert listening_addresses(caller.pid) == listening
        assert caller.num_threads() <= threads
        assert any(listening_addresses(pid) for pid in predictor.worker_pids)  # rank 0's


def test_failing_producer_init_names_rank_and_hook(no_leaks):
    with pytest.raises(WorkerError) as info:
        FailingInit(devices=3, dist_timeout=120)
    err = info.value
    assert err.rank == 1 and err.hook == "producer_init" and err.device == "cpu"
    assert "no model for rank 1" in str(err)


def test_dying_producer_ends_the_call(no_leaks):
    runner = DyingWork(devices=2)
    pids = runner.worker_pids
    with pytest.raises(WorkerDiedError) as info:
        runner(range(10))
    assert info.value.exitcode == 5 and info.value.rank in (0, 1)
    assert not runner.is_activate
    with pytest.raises(RunnerClosedError):
        runner(range(3))
    assert wait_gone(pids) == []


def test_unknown_options_are_refused(no_leaks):
    with pytest.raises(TypeError, match=r"backend='process' got unexpected option\(s\) 'port'"):
        TutorialPredictor(devices=1, port=29500)
    with pytest.raises(ValueError, match="dist_timeout must be positive"):
        TutorialPredictor(devices=1, dist_timeout=0)


def test_a_rank_dying_in_producer_init_names_it(no_leaks):
    with pytest.raises(WorkerDiedError) as info:
        DyingInit(devices=3, dist_timeout=120)
    err = info.value
    # the death, not the "Connection closed by peer" it causes in the others' barrier
    assert err.rank == 1 and err.exitcode == 3 and "rank 1 of 3" in str(err)


def test_task_timeout_and_threads_are_refused(no_leaks):
    # a rank killed for overrunning could not be replaced in its group
    with pytest.raises(ValueError, match="does not take task_timeout"):
        TutorialPredictor(devices=1, task_timeout=5.0)
    with pytest.raises(ValueError, match="unknown backend 'thread'"):
        TutorialPredictor(devices=2, backend="thread")


def test_a_call_with_task_timeout_is_refused_and_the_runner_stays_usable(tmp_path, no_leaks):
    with TutorialPredictor(devices=2, cfg={"out_dir": str(tmp_path)}) as predictor:
        with pytest.raises(ValueError, match="does not take task_timeout"):
            predictor(batch_generator(list(range(10)), 5), task_timeout=1.0)
        assert predictor(batch_generator(list(range(10)), 5)).shape == (10, 3)
