"""Errors and deaths behave as in easycore-parallel: raised promptly, naming the device, no leaks.

Results here are large tensors (4 MiB), so shared-memory segments are in
flight when things go wrong; ``no_leaks`` checks none is left behind.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest
import torch
from _torch_helpers import Die, Fail, Interrupt
from _torch_util import wait_gone

from easycore.common.config import CfgNode
from easycore.torch.parallel import RunnerClosedError, WorkerDiedError, WorkerError

pytestmark = pytest.mark.timeout(120)

#: a failure must be reported well before this many seconds (it takes ~0.1 s)
DEADLINE = 10.0
BIG = 1 << 20  # float32 elements: 4 MiB results


def cfg(**kw) -> CfgNode:
    return CfgNode({"fail": None, "item": None, "n": BIG, **kw})


def assert_worker_error(err: WorkerError, hook: str) -> None:
    assert err.hook == hook and hook in str(err)
    assert err.device in ("cpu", "cpu:0", "cpu:1") and repr(err.device) in str(err)
    assert "Worker traceback" in str(err) and "_torch_helpers.py" in str(err)
    assert isinstance(err.__cause__, ValueError)


def test_producer_work_error_is_raised_promptly_and_closes_the_runner(no_leaks):
    runner = Fail(["cpu", "cpu"], cfg=cfg(fail="producer_work", item=40))
    pids = runner.worker_pids
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        runner(range(200))
    assert time.monotonic() - start < DEADLINE
    assert_worker_error(info.value, "producer_work")
    assert "at 40" in str(info.value)
    assert not runner.is_activate and wait_gone(pids, 5.0) == []
    with pytest.raises(RunnerClosedError):
        runner(range(3))
    runner.activate()  # documented recovery: fresh workers
    runner._cfg.fail = None
    assert len(runner(range(5))) == 5
    runner.close()


def test_producer_init_error_is_raised_by_the_constructor(no_leaks):
    with pytest.raises(WorkerError) as info:
        Fail(["cpu:0", "cpu:1"], cfg=cfg(fail="producer_init"))
    assert_worker_error(info.value, "producer_init")


def test_producer_init_error_under_spawn(no_leaks):
    with pytest.raises(WorkerError) as info:
        Fail(["cpu"], cfg=cfg(fail="producer_init"), start_method="spawn")
    assert_worker_error(info.value, "producer_init")


def test_producer_end_error_is_raised_by_close(no_leaks):
    runner = Fail(["cpu", "cpu"], cfg=cfg(fail="producer_end"))
    assert len(runner(range(10))) == 10
    with pytest.raises(WorkerError) as info:
        runner.close()
    assert_worker_error(info.value, "producer_end")
    assert not runner.is_activate


def test_consumer_error_propagates_and_releases_everything(no_leaks):
    runner = Fail(["cpu", "cpu"], cfg=cfg(fail="consumer_work", item=30.0))
    with pytest.raises(ValueError, match=re.escape("boom in consumer_work at 30.0")):
        runner(range(200))
    assert not runner.is_activate


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_worker_death_is_raised_promptly(no_leaks, how):
    runner = Die(["cpu", "cpu"], cfg=cfg(how=how, item=25))
    pids = runner.worker_pids
    start = time.monotonic()
    with pytest.raises(WorkerDiedError) as info:
        runner(range(200))
    assert time.monotonic() - start < DEADLINE
    err = info.value
    assert err.device == "cpu" and err.pid in pids
    assert err.exitcode == (3 if how == "exit" else -signal.SIGKILL)
    assert ("exit code 3" if how == "exit" else "SIGKILL") in str(err)
    assert not runner.is_activate and wait_gone(pids, 5.0) == []


def test_worker_killed_from_outside_mid_call(no_leaks, tmp_path):
    pidfile = tmp_path / "hanging.pid"
    runner = Die(["cpu", "cpu"], cfg=cfg(how="hang", item=10, pidfile=str(pidfile)))
    pids = runner.worker_pids
    victim = []

    def kill_the_hanging_worker():
        deadline = time.monotonic() + 30
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        victim.append(int(pidfile.read_text()))
        victim.append(time.monotonic())
        os.kill(victim[0], signal.SIGKILL)  # as the OOM killer would

    killer = threading.Thread(target=kill_the_hanging_worker)
    killer.start()
    try:
        with pytest.raises(WorkerDiedError) as info:
            runner(range(100))
        raised_at = time.monotonic()
    finally:
        killer.join(35)
    assert raised_at - victim[1] < DEADLINE
    assert info.value.pid == victim[0] and info.value.exitcode == -signal.SIGKILL
    assert "SIGKILL" in str(info.value)
    assert wait_gone(pids, 5.0) == []


def test_results_held_by_the_consumer_survive_a_later_failure(no_leaks):
    ok = Fail(["cpu"], cfg=cfg())
    kept = ok(range(3))
    ok.close()
    failing = Die(["cpu", "cpu"], cfg=cfg(how="exit", item=5))
    with pytest.raises(WorkerDiedError):
        failing(range(50))
    assert sorted(float(t[0]) for t in kept) == [0.0, 1.0, 2.0]
    assert all(t.shape == (BIG,) for t in kept)
    assert torch.equal(kept[0], torch.full((BIG,), float(kept[0][0])))


def test_ctrl_c_in_the_consumer_closes_the_runner(no_leaks):
    with pytest.raises(KeyboardInterrupt), Interrupt(["cpu", "cpu"]) as runner:
        runner(range(10))
    assert not runner.is_activate
