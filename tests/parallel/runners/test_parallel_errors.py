"""Never hang: hook errors and dead workers surface fast, name the device, and close the runner."""

from __future__ import annotations

import pickle
import time

import pytest
from _parallel_helpers import Die, Fail, SumSquares

from easycore.common.config import CfgNode
from easycore.common.parallel import (
    ParallelError,
    RunnerClosedError,
    WorkerDiedError,
    WorkerError,
)

pytestmark = pytest.mark.timeout(120)

#: a failure must be reported well before this many seconds (it takes ~0.1 s)
DEADLINE = 10.0


def cfg(**kw) -> CfgNode:
    return CfgNode({"fail": None, "item": None, **kw})


def assert_names_device_and_traceback(err: WorkerError, hook: str, device: str) -> None:
    text = str(err)
    assert err.hook == hook and hook in text
    assert err.device == device and repr(device) in text
    assert "Worker traceback" in text and "Traceback (most recent call last)" in text
    assert "_parallel_helpers.py" in text  # the frame that raised, from the worker
    assert "ValueError: boom" in text
    assert isinstance(err.__cause__, ValueError)  # the original, unpickled
    assert err.exc_type == "ValueError"


def test_producer_init_error_is_raised_by_the_constructor(no_leaks):
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        Fail(["cpu", "cpu:1"], cfg=cfg(fail="producer_init", device="cpu:1"))
    assert time.monotonic() - start < DEADLINE
    assert_names_device_and_traceback(info.value, "producer_init", "cpu:1")
    assert info.value.worker_index == 1


def test_producer_init_error_is_raised_by_activate(no_leaks):
    c = cfg()
    runner = Fail(2, cfg=c)
    runner.close()
    runner._cfg.fail = "producer_init"  # what a later activation would see
    with pytest.raises(WorkerError, match="producer_init"):
        runner.activate()
    assert not runner.is_activate


def test_producer_work_error_is_raised_by_the_call_and_closes_the_runner(no_leaks):
    runner = Fail(["cpu:a", "cpu:b"], cfg=cfg(fail="producer_work", item=500))
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        runner(range(10_000))
    assert time.monotonic() - start < DEADLINE
    assert_names_device_and_traceback(info.value, "producer_work", info.value.device)
    assert info.value.device in ("cpu:a", "cpu:b")
    assert "at 500" in str(info.value)
    assert not runner.is_activate
    assert runner.worker_pids == []
    with pytest.raises(RunnerClosedError):
        runner(range(3))
    # documented recovery: activate() starts fresh workers
    runner.activate()
    runner._cfg.fail = None
    assert runner(range(5)) is not None
    runner.close()


def test_producer_end_error_is_raised_by_close(no_leaks):
    runner = Fail(2, cfg=cfg(fail="producer_end"))
    assert sorted(runner(range(10))) == list(range(10))
    with pytest.raises(WorkerError) as info:
        runner.close()
    assert_names_device_and_traceback(info.value, "producer_end", "cpu")
    assert not runner.is_activate
    runner.close()  # idempotent, even after a failed close


def test_producer_end_error_does_not_mask_an_error_in_a_with_block(no_leaks):
    with pytest.raises(KeyError), Fail(1, cfg=cfg(fail="producer_end")):
        raise KeyError("mine")


@pytest.mark.parametrize("hook", ["consumer_init", "consumer_work", "consumer_end"])
def test_consumer_hook_errors_propagate_and_close_the_runner(no_leaks, hook):
    runner = Fail(2, cfg=cfg(fail=hook, item=300))
    start = time.monotonic()
    with pytest.raises(ValueError, match=f"boom in {hook}") as info:
        runner(range(5000))
    assert time.monotonic() - start < DEADLINE
    assert info.traceback[-1].name == hook  # the consumer's own frame, not a copy
    assert not runner.is_activate


def test_error_in_the_input_iterable_propagates(no_leaks):
    def items():
        yield from range(100)
        raise KeyError("input broke")

    runner = SumSquares(2)
    with pytest.raises(KeyError, match="input broke"):
        runner(items())
    assert not runner.is_activate


def test_unpicklable_input_and_result(no_leaks):
    runner = SumSquares(2)
    with pytest.raises((TypeError, AttributeError, pickle.PicklingError)):
        runner([1, 2, lambda: 3])
    assert not runner.is_activate

    runner = Weird(["cpu:7"], cfg=CfgNode({"kind": "unpicklable"}))
    with pytest.raises(WorkerError, match="sending results") as info:
        runner([1, 2, 3])
    assert info.value.device == "cpu:7"
    assert not runner.is_activate


@pytest.mark.parametrize(
    "how, code",
    [("exit", 3), ("sigkill", -9), ("segfault", -11)],
)
def test_dead_worker_is_reported_with_device_and_exit_code(no_leaks, how, code):
    runner = Die(["cpu:0", "cpu:1"], cfg=CfgNode({"item": 700, "how": how}))
    start = time.monotonic()
    with pytest.raises(WorkerDiedError) as info:
        runner(range(20_000))
    assert time.monotonic() - start < DEADLINE
    err = info.value
    assert err.exitcode == code
    assert err.device in ("cpu:0", "cpu:1") and repr(err.device) in str(err)
    assert f"exit code {code}" in str(err)
    if how == "segfault":
        assert "SIGSEGV" in str(err)
    assert not runner.is_activate
    runner.activate()  # and it can start again
    runner._cfg.item = None
    assert sorted(runner(range(100))) == list(range(100))
    runner.close()


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_worker_killed_while_idle_fails_the_next_call_naming_no_item(method, no_leaks):
    # Dead before the call: the call's items never reached it (its item slot
    # says so). The error said it died "while running item k" all the same.
    import multiprocessing.connection
    import os
    import signal

    runner = SumSquares(["cpu:0", "cpu:1"], start_method=method)
    try:
        assert runner(range(10)) == sum(x * x for x in range(10))
        victim = runner._engine.state.backend._by_slot[1]
        os.kill(victim.pid, signal.SIGKILL)
        assert multiprocessing.connection.wait([victim.process.sentinel], DEADLINE)
        with pytest.raises(WorkerDiedError) as info:
            runner(range(10))
        assert info.value.exitcode == -9 and info.value.device == "cpu:1"
        assert not info.value.items and "while running" not in str(info.value)
        assert not runner.is_activate
        runner.activate()  # and it can start again
        assert runner(range(10)) == sum(x * x for x in range(10))
    finally:
        runner.close()


def test_worker_dying_in_producer_init_is_raised_by_the_constructor(no_leaks):
    start = time.monotonic()
    with pytest.raises(WorkerDiedError) as info:
        Die(["cpu:0", "cpu:1"], cfg=CfgNode({"item": None, "how": "exit", "where": "init"}))
    assert time.monotonic() - start < DEADLINE
    assert info.value.device == "cpu:1" and info.value.exitcode == 3


def test_worker_dying_in_producer_end_is_raised_by_close(no_leaks):
    runner = Die(2, cfg=CfgNode({"item": None, "how": "sigkill", "where": "end"}))
    assert sorted(runner(range(10))) == list(range(10))
    with pytest.raises(WorkerDiedError, match="SIGKILL"):
        runner.close()
    assert not runner.is_activate


def test_errors_pickle_and_subclass_parallel_error():
    err = WorkerError("cuda:1", "producer_work", 1, 42, "ValueError", "bad", "Traceback...")
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) and back.device == "cuda:1"
    died = WorkerDiedError("cpu", 0, 7, -9)
    assert pickle.loads(pickle.dumps(died)).exitcode == -9
    # Who sent a SIGKILL is unknown: the out-of-memory killer is named only
    # when it killed something while the worker ran (issue 34 item 28).
    assert "SIGKILL" in str(died) and "out-of-memory" not in str(died)
    oom = WorkerDiedError("cpu", 0, 7, -9, [3], oom_kills=1)
    assert "out-of-memory killer ended 1 process" in str(oom) and "perhaps" in str(oom)
    assert str(pickle.loads(pickle.dumps(oom))) == str(oom)
    assert "out-of-memory" not in str(WorkerDiedError("cpu", 0, 7, -11, oom_kills=2))
    assert issubclass(WorkerError, ParallelError) and issubclass(ParallelError, RuntimeError)


def test_unpicklable_exception_still_carries_the_traceback(no_leaks):
    runner = Weird(1)
    with pytest.raises(WorkerError) as info:
        runner([1])
    assert "WeirdError" in str(info.value) and "Worker traceback" in str(info.value)
    assert info.value.__cause__ is None  # could not travel; the text did


class WeirdError(Exception):
    def __init__(self, a, b):  # unpicklable: pickle re-calls __init__ with one arg
        super().__init__(f"{a}-{b}")


from easycore.common.parallel import UnorderedRunner  # noqa: E402


class Weird(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        if cfg.get("kind") == "unpicklable":
            return (x for x in [data])  # a generator cannot be pickled back
        raise WeirdError(1, 2)


def test_worker_traceback_names_this_module_for_local_hooks(no_leaks):
    # a sanity check that the remote traceback really is the worker's
    runner = Weird(1)
    with pytest.raises(WorkerError) as info:
        runner([1])
    assert __file__.rsplit("/", 1)[-1] in info.value.remote_traceback
