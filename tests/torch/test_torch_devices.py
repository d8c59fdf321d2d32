"""Devices checked in the caller, the start method, and what each worker sets up.

This machine may have no GPU: CUDA devices are then checked for their errors,
and the choice of ``spawn`` is tested on the selection logic and on a runner
whose device check is bypassed (its workers fail in ``setup_worker``, cleanly).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from typing import ClassVar

import _torch_helpers
import psutil
import pytest
import torch
from _torch_helpers import HeavyCompute, Predictor, Probe, ThreadedProbe, TwoThreadProbe
from _torch_util import gpu_count

from easycore.torch.parallel import (
    WorkerError,
    canonical_device,
    check_device,
    select_start_method,
)

pytestmark = pytest.mark.timeout(120)

PLATFORM_DEFAULT = (
    multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
)


# ------------------------------------------------------------------ parsing
@pytest.mark.parametrize(
    "device, canonical",
    [
        ("cpu", "cpu"),
        (" cpu ", "cpu"),
        ("cpu:0", "cpu:0"),
        ("cuda", "cuda:0"),  # documented: "cuda" means the first visible GPU
        ("cuda:0", "cuda:0"),
        ("cuda:3", "cuda:3"),
        (torch.device("cpu"), "cpu"),
        (torch.device("cuda"), "cuda:0"),
        (torch.device("cuda", 1), "cuda:1"),
    ],
)
def test_canonical_device(device, canonical):
    assert canonical_device(device) == canonical


@pytest.mark.parametrize(
    "device, words",
    [
        ("gpu:0", "invalid device 'gpu:0'"),
        ("cuda:x", "invalid device 'cuda:x'"),
        ("cuda:-1", "invalid device 'cuda:-1'"),
        ("CPU", "invalid device 'CPU'"),
        ("cuda:0:1", "invalid device 'cuda:0:1'"),
        ("", "non-empty"),
        ("   ", "non-empty"),
        (None, "non-empty"),
        (0, "non-empty"),
        ("mps", "unsupported device 'mps'"),
        ("meta", "unsupported device 'meta'"),
    ],
)
def test_invalid_devices_are_value_errors_naming_them(device, words):
    with pytest.raises(ValueError, match=words):
        canonical_device(device)
    with pytest.raises(ValueError, match=words):
        check_device(device)


def test_cpu_devices_never_touch_cuda():
    # A CPU-only runner must not initialise CUDA in the caller (it would poison forks).
    assert check_device("cpu") == "cpu"
    assert not torch.cuda.is_initialized()


@pytest.mark.skipif(gpu_count() > 0, reason="this machine has a GPU")
@pytest.mark.parametrize("device", ["cuda:0", "cuda", "cuda:7", torch.device("cuda:1")])
def test_cuda_without_a_gpu_is_a_clear_error(device):
    with pytest.raises(ValueError, match=r"is not available: .*(no CUDA support|no CUDA GPU)"):
        check_device(device)


@pytest.mark.cuda
@pytest.mark.skipif(gpu_count() == 0, reason="needs a GPU to count past")
def test_cuda_index_past_the_last_gpu_is_a_clear_error():
    missing = f"cuda:{gpu_count()}"
    with pytest.raises(ValueError, match=rf"device '{missing}' does not exist: torch sees"):
        check_device(missing)
    assert check_device("cuda") == "cuda:0"


def test_runner_refuses_bad_devices_before_starting_anything(no_leaks):
    for devices in (["cpu", "gpu:0"], ["cpu", "cuda:x"], ["cpu", "cuda:7"], ["mps"]):
        children = psutil.Process().children(recursive=True)
        with pytest.raises(ValueError) as info:
            Predictor(devices=devices)
        assert repr(devices[-1]) in str(info.value)
        # Refused in the caller: not one worker was started for the good devices.
        assert psutil.Process().children(recursive=True) == children


def test_devices_are_normalised(no_leaks):
    with Probe([torch.device("cpu"), " cpu"]) as runner:
        assert runner.devices == ["cpu", "cpu"]
        assert [r["device"] for r in runner(range(2))] == ["cpu", "cpu"]
    with pytest.raises(ValueError, match="empty"):
        Probe([])


# ----------------------------------------------------------- start method
@pytest.mark.parametrize(
    "devices, requested, threads, method",
    [
        (["cpu", "cpu"], None, 1, PLATFORM_DEFAULT),
        (["cpu"], "spawn", 1, "spawn"),
        (["cpu"], "forkserver", 1, "forkserver"),
        (["cpu"], "fork", 1, "fork"),
        (["cuda:0"], None, 1, "spawn"),
        (["cuda:0", "cuda:0"], None, None, "spawn"),
        (["cpu", "cuda:1"], None, 1, "spawn"),
        (["cuda:0"], "spawn", 1, "spawn"),
        (["cuda:0"], "forkserver", 1, "forkserver"),
        (["cpu"], None, None, "spawn"),  # torch's default threads: not forkable
        (["cpu"], None, 4, "spawn"),
        (["cuda:0"], None, 4, "spawn"),
    ],
)
def test_start_method_selection(devices, requested, threads, method):
    assert select_start_method(devices, requested, threads) == method


@pytest.mark.parametrize(
    "devices, threads, words",
    [
        (["cuda:0"], 1, r"cannot run CUDA devices \['cuda:0'\]"),
        (["cpu", "cuda:1"], 1, r"CUDA devices \['cuda:1'\]"),
        (["cpu"], None, "cpu_threads=None"),
        (["cpu"], 3, "cpu_threads=3"),
    ],
)
def test_fork_is_refused_where_unsafe(devices, threads, words):
    with pytest.raises(ValueError, match=words):
        select_start_method(devices, "fork", threads)


def test_unknown_start_method():
    with pytest.raises(ValueError, match="unknown start_method 'thread'"):
        select_start_method(["cpu"], "thread", 1)


class _RecordingPolicy(type(Probe.device_policy)):
    """The runner's device policy, recording the start method it is asked for."""

    def mp_context(self, method):
        SpawnRecorder.chosen.append(method)
        return super().mp_context(method)


class SpawnRecorder(Probe):
    """Skips the GPU check, and records the start method the runner chose."""

    chosen: ClassVar[list] = []  # shared by the instances, read by the test
    device_policy = _RecordingPolicy()

    @classmethod
    def check_available(cls, device):
        pass


@pytest.mark.skipif(gpu_count() > 0, reason="on a GPU machine the worker would succeed")
def test_cuda_device_starts_workers_with_spawn_and_fails_cleanly_without_gpu(no_leaks):
    SpawnRecorder.chosen.clear()
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        SpawnRecorder(["cpu", "cuda:0"])
    assert SpawnRecorder.chosen == ["spawn"]
    err = info.value
    # The worker got as far as selecting its GPU (torch.cuda.set_device), in setup_worker.
    assert err.hook == "setup_worker" and err.device == "cuda:0" and err.worker_index == 1
    assert "set_device" in str(err)
    assert time.monotonic() - start < 60


def test_explicit_fork_with_cuda_is_refused_before_starting(no_leaks):
    SpawnRecorder.chosen.clear()
    with pytest.raises(ValueError, match="start_method='fork' cannot run CUDA"):
        SpawnRecorder(["cuda:0"], start_method="fork")


# ------------------------------------------------------------ in the worker
def test_cpu_workers_run_their_thread_budget(no_leaks, monkeypatch):
    monkeypatch.setattr(_torch_helpers, "MARKER", "changed")  # visible to forked workers only
    budget = max(1, len(os.sched_getaffinity(0)) // 2)  # two workers share this process's CPUs
    with Probe(["cpu", "cpu"]) as runner:
        infos = runner(range(4))
        method = runner.get_mp_context().get_start_method()
        assert runner.cpu_threads == budget
    assert {i["threads"] for i in infos} == {budget}
    # One thread each: forking is safe (OpenMP is never entered), more: spawned.
    assert method == (PLATFORM_DEFAULT if budget == 1 else "spawn")
    if method == "fork":
        assert {i["marker"] for i in infos} == {"changed"}


def test_one_thread_per_cpu_worker_is_forked(no_leaks, monkeypatch):
    monkeypatch.setattr(_torch_helpers, "MARKER", "changed")
    with Probe(["cpu", "cpu"], cpu_threads=1) as runner:
        infos = runner(range(4))
        assert runner.get_mp_context().get_start_method() == PLATFORM_DEFAULT
    assert {i["threads"] for i in infos} == {1}
    if PLATFORM_DEFAULT == "fork":
        assert {i["marker"] for i in infos} == {"changed"}


def test_cpu_threads_none_keeps_torch_default_and_spawns(no_leaks, monkeypatch):
    monkeypatch.setattr(_torch_helpers, "MARKER", "changed")
    with ThreadedProbe(["cpu"]) as runner:
        (info,) = runner([0])
    assert info["marker"] == "module"  # a fresh interpreter: spawned
    assert info["threads"] == torch.get_num_threads()  # torch's default, untouched
    assert info["pid"] != os.getpid()


def test_cpu_threads_two(no_leaks):
    with TwoThreadProbe(["cpu"]) as runner:
        (info,) = runner([0])
    assert info["threads"] == 2
    with pytest.raises(ValueError, match="cpu_threads=2"):
        TwoThreadProbe(["cpu"], start_method="fork")


@pytest.mark.timeout(90)
def test_forked_workers_survive_openmp_used_in_the_parent(no_leaks):
    # GNU OpenMP does not survive fork: a forked child running a multi-threaded op
    # after the parent did waits forever for pool threads. One thread per CPU
    # worker (the default) never enters the pool.
    threads = torch.get_num_threads()
    torch.set_num_threads(max(2, threads))
    try:
        a = torch.randn(1000, 1000)
        (a @ a).exp().sum()  # the parent's OpenMP pool is now running
        with HeavyCompute(["cpu", "cpu"], start_method=PLATFORM_DEFAULT,
                          cpu_threads=1) as runner:
            assert len(runner(range(6))) == 6  # the test's timeout catches a hang
    finally:
        torch.set_num_threads(threads)
