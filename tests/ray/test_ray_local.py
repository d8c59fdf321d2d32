"""The runners on ``backend="ray"`` against a local Ray that the test started.

The tutorial examples first, then order, arrays, errors, deaths and cleanup.
The Ray instance is shared by the whole module; runners never shut it down.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import types

import psutil
import pytest

ray = pytest.importorskip("ray")
np = pytest.importorskip("numpy")

from _ray_runners import (  # noqa: E402
    Arrays,
    Fragile,
    PowerSum,
    Runner,
    Slow,
    WhereOrdered,
    WhereUnordered,
)
from _ray_support import assert_actors_gone  # noqa: E402
from processes import stop_process  # noqa: E402

from easycore.common.config import CfgNode as CN  # noqa: E402
from easycore.common.parallel import (  # noqa: E402
    ParallelError,
    RunnerClosedError,
    WorkerDiedError,
    WorkerError,
)

pytestmark = [pytest.mark.ray, pytest.mark.timeout(120), pytest.mark.usefixtures("local_ray")]


# ---------------------------------------------------------------- tutorial
def test_example_1_sum_of_squares():
    runner = Runner(devices=2, backend="ray")
    try:
        assert runner(list(range(100))) == 328350
        assert runner(range(10)) == 285  # same actors, new call
    finally:
        runner.close()
    runner.close()  # already closed: does nothing
    assert ray.is_initialized()  # the test's Ray: left up


def test_example_4_parameters_through_cfg():
    cfg = CN()
    cfg.exponent = 3
    with PowerSum(devices=2, cfg=cfg, backend="ray") as runner:
        result = runner(range(100))
    assert result == 24502500 == sum(i**3 for i in range(100))


# ------------------------------------------------------------------- order
def test_ordered_runner_keeps_input_order():
    with WhereOrdered(devices=2, backend="ray") as runner:
        out = runner(iter(range(600)))  # a generator: read lazily
        assert [r[0] for r in out] == list(range(600))
        assert {r[1] for r in out} == {"cpu"}
        assert len({r[3] for r in out}) == 2  # both actors worked
        assert {r[3] for r in out} == set(runner.worker_pids)


def test_unordered_runner_delivers_everything():
    with WhereUnordered(devices=2, backend="ray") as runner:
        out = runner(range(600))
    assert sorted(r[0] for r in out) == list(range(600))


def test_empty_input_and_many_calls():
    with Runner(devices=2, backend="ray") as runner:
        assert runner([]) == 0
        for n in (1, 7, 1000):
            assert runner(range(n)) == sum(i * i for i in range(n))


def test_input_is_read_ahead_only_as_far_as_queue_scale_allows():
    pulled = [0]

    def items():
        for i in range(40):
            pulled[0] += 1
            yield i

    ahead = []

    class Watch(Slow):
        @staticmethod
        def consumer_work(cfg, data):
            ahead.append(pulled[0] - data)
            cfg.out.append(data)

    # A class local to a function travels to the actors by value (cloudpickle).
    with Watch(devices=2, queue_scale=2, backend="ray") as runner:
        assert runner(items()) == list(range(40))
    # 2 chunks per actor in flight (one item each: 20 ms items), plus the one
    # being consumed and one the feeder may hold while it waits for a credit.
    assert max(ahead) <= 2 * 2 + 2


# ------------------------------------------------------------------ arrays
def test_numpy_results_come_from_the_object_store_without_a_copy():
    with Arrays(devices=2, backend="ray") as runner:
        out = runner(range(20))
    assert [a[0] for a in out] == list(range(20))
    assert all(a.shape == (1 << 18,) and a.dtype == np.float64 for a in out)
    # Read-only views of Ray's shared object store, not copies in this process.
    assert not any(a.flags.writeable or a.flags.owndata for a in out)


# ----------------------------------------------------------------- devices
def test_cuda_device_gets_a_gpu_of_its_own_and_sees_it_as_cuda_0():
    # The fixture's Ray declares one GPU (there is none: hooks do not touch it).
    with WhereOrdered(devices=["cuda:1", "cpu"], backend="ray") as runner:
        out = runner(range(200))
    by_device = {r[1]: r for r in out}
    assert set(by_device) == {"cuda:0", "cpu"}  # "cuda:1" is "cuda:0" in its actor
    gpus, visible = by_device["cuda:0"][4:]
    assert len(gpus) == 1 and visible == gpus[0]  # Ray picked the GPU and exposed it alone
    assert by_device["cpu"][4] == []


def test_more_devices_than_the_cluster_holds_is_an_error_not_a_wait():
    start = time.monotonic()
    with pytest.raises(ParallelError, match=r"3 CPUs .* has 2 CPUs"):
        Runner(devices=3, backend="ray")
    with pytest.raises(ParallelError, match=r"2 GPUs .* 1 GPUs"):
        Runner(devices=["cuda:0", "cuda:1"], backend="ray")
    assert time.monotonic() - start < 30



@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="pauses the GCS with SIGSTOP")
def test_a_gcs_that_does_not_answer_is_an_error_not_a_hang(monkeypatch):
    # Ray's state queries wait in C++ without a deadline, where no signal (not
    # even pytest's timeout) reaches them: a stopped GCS once hung the caller.
    from easycore.common.parallel.backends.ray import RayBackend

    gcs = [p.pid for p in psutil.Process().children() if p.name().startswith("gcs_server")]
    assert len(gcs) == 1, "the test's Ray should have one GCS, started by this process"
    monkeypatch.setattr(RayBackend, "resources_timeout", 1.0)
    try:
        stop_process(gcs[0])
        with pytest.raises(ParallelError, match=r"did not answer ray.cluster_resources\(\)"):
            Runner(devices=1, backend="ray")
    finally:
        os.kill(gcs[0], signal.SIGCONT)
    monkeypatch.undo()
    with Runner(devices=1, backend="ray") as runner:  # the session is fine again
        assert runner(range(3)) == 5


def test_options_are_checked():
    with pytest.raises(TypeError):
        Runner(devices=1, backend="ray", adress="auto")
    with pytest.raises(ValueError, match="address"):
        Runner(devices=1, backend="ray", ray_init_kwargs={"address": "auto"})
    with pytest.raises(ValueError, match="unknown backend"):
        Runner(devices=1, backend="rey")


def test_torch_runner_on_ray_with_cpu_tensors():
    pytest.importorskip("easycore.torch.parallel")  # written alongside; skip until it imports
    torch = pytest.importorskip("torch")
    from _ray_torch_runners import Tensors

    with Tensors(devices=2, backend="ray") as runner:
        out = runner(range(40))
        budget = runner.cpu_threads  # max(1, cpus // workers): the thread budget
    assert {(device, threads) for device, threads, _ in out} == {("cpu", budget)}
    tensors = [t for _, _, t in out]
    assert all(isinstance(t, torch.Tensor) and t.shape == (1 << 16,) for t in tensors)
    assert [int(t[0]) for t in tensors] == list(range(40))  # in order
    assert float(torch.stack(tensors).sum()) == sum(range(40)) * (1 << 16)


# ------------------------------------------------------------------ errors
def test_hook_error_is_raised_with_worker_traceback_and_device():
    runner = Fragile(devices=2, cfg={"fail": "raise", "at": 13}, backend="ray")
    actors, pids = runner._engine.backend.actors, runner.worker_pids
    with pytest.raises(WorkerError) as info:
        runner(range(100))
    err = info.value
    assert (err.hook, err.device, err.exc_type) == ("producer_work", "cpu", "ValueError")
    assert err.pid in pids
    assert "bad item 13" in str(err)
    assert "_ray_runners.py" in err.remote_traceback and "raise ValueError" in err.remote_traceback
    assert isinstance(err.__cause__, ValueError)
    # The failed call closed the runner and killed its actors.
    assert not runner.is_activate
    with pytest.raises(RunnerClosedError):
        runner(range(3))
    assert_actors_gone(ray, actors, pids)
    runner.activate()  # and it starts again
    try:
        assert runner(range(5)) == list(range(5))
    finally:
        runner.close()


def test_results_ray_cannot_serialise_are_a_worker_error():
    with Fragile(devices=2, cfg={"fail": "unpicklable", "at": 5}, backend="ray") as runner:  # noqa: SIM117 (as one, the line would pass 100 columns)
        with pytest.raises(WorkerError) as info:
            runner(range(20))
    assert (info.value.hook, info.value.exc_type) == ("sending results", "TypeError")
    assert "lock" in str(info.value)


def test_a_runner_class_the_actors_cannot_import_is_a_worker_error():
    # As when the hooks' module exists on the caller's machine only.
    ghost = types.ModuleType("ghost_runners")
    exec("from _ray_runners import Runner\nclass Ghost(Runner):\n    pass\n", ghost.__dict__)
    ghost.Ghost.__module__ = "ghost_runners"
    sys.modules["ghost_runners"] = ghost  # pickled by reference, like any module's class
    try:
        with pytest.raises(WorkerError) as info:
            ghost.Ghost(devices=2, backend="ray")
    finally:
        del sys.modules["ghost_runners"]
    assert info.value.hook == "creating the actor"
    assert "runtime_env" in str(info.value) and "ghost_runners" in str(info.value)


def test_producer_init_error_is_raised_by_the_constructor():
    with pytest.raises(WorkerError) as info:
        Fragile(devices=2, cfg={"fail": "init"}, backend="ray")
    assert info.value.hook == "producer_init"
    assert "cannot load the model" in str(info.value)


def test_producer_end_error_is_raised_by_close():
    runner = Fragile(devices=2, cfg={"fail": "end"}, backend="ray")
    actors, pids = runner._engine.backend.actors, runner.worker_pids
    assert runner(range(10)) == list(range(10))
    with pytest.raises(WorkerError) as info:
        runner.close()
    assert info.value.hook == "producer_end"
    assert_actors_gone(ray, actors, pids)


def test_actor_death_is_a_worker_died_error_naming_device_and_node():
    runner = Fragile(devices=2, cfg={"fail": "exit", "at": 50}, backend="ray")
    actors, pids = runner._engine.backend.actors, runner.worker_pids
    node = ray.get_runtime_context().get_node_id()
    start = time.monotonic()
    with pytest.raises(WorkerDiedError) as info:
        runner(range(1000))
    assert time.monotonic() - start < 30  # an error, not a hang
    err = info.value
    assert err.device == "cpu" and err.pid in pids and err.node_id == node
    assert "'cpu'" in str(err) and node in str(err) and "died" in str(err)
    assert not runner.is_activate
    assert_actors_gone(ray, actors, pids)


def test_generator_error_propagates():
    def items():
        yield from range(10)
        raise OSError("input broke")

    with Runner(devices=2, backend="ray") as runner:  # noqa: SIM117 (as one, the line would pass 100 columns)
        with pytest.raises(OSError, match="input broke"):
            runner(items())


# ----------------------------------------------------------------- cleanup
def test_close_kills_every_actor_and_leaves_the_callers_ray_up():
    runner = Runner(devices=2, backend="ray")
    actors, pids = runner._engine.backend.actors, runner.worker_pids
    assert len(actors) == 2 and all(pids)
    assert runner(range(10)) == 285
    runner.close()
    assert runner.worker_pids == []
    assert_actors_gone(ray, actors, pids)
    assert ray.is_initialized()
    deadline = time.monotonic() + 20  # both CPUs go back to Ray
    while ray.available_resources().get("CPU") != 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray.available_resources().get("CPU") == 2
