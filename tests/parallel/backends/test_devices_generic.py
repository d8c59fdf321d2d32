"""What a device name means to easycore.common.parallel's own runners and pools (issue 34 item 30).

A device is a label handed to the hooks ("cpu", "cpu:1", "scanner:0"), with
two exceptions checked by every entry point before anything starts:
"cuda"/"cuda:N" must be a GPU this machine shows (local back-ends; Ray places
it itself), and other accelerators' names ("gpu", "mps", ...) are refused
everywhere, since nothing here would put a worker on one.
"""

from __future__ import annotations

import os

import pytest
from _parallel_helpers import _Collect

from easycore.common.parallel import BackgroundTask, DevicePolicy, JobQueue, Pool, UnorderedRunner
from easycore.common.parallel._os.devices import visible_cuda_devices
from easycore.common.parallel.backends import policy as policy_module

pytestmark = pytest.mark.timeout(120)


class Echo(_Collect, UnorderedRunner):
    @staticmethod
    def consumer_end(cfg):
        return sorted(cfg.out)


def _device(x):
    return x


ENTRY_POINTS = {
    "runner": lambda devices, **kw: Echo(devices, **kw),
    "Pool": lambda devices, **kw: Pool(devices=devices, **kw),
    "BackgroundTask": lambda devices, **kw: BackgroundTask(_device, (1,), devices=devices, **kw),
    "JobQueue": lambda devices, **kw: JobQueue(devices=devices, **kw),
}
BACKENDS = ["process", "thread", "ray"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("device", ["gpu", "gpu:0", "GPU:1", "mps", "xpu:0", "tpu"])
def test_an_accelerator_nothing_here_honours_is_refused_by_every_entry_point(
        entry, device, backend, no_leaks):
    with pytest.raises(ValueError, match=f"device {device!r}: easycore's workers run on CPUs"):
        ENTRY_POINTS[entry](["cpu", device], backend=backend)


@pytest.mark.parametrize("backend", ["process", "thread"])
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"])
def test_a_cuda_gpu_this_machine_does_not_show_is_refused_pointing_at_easycore_torch(
        entry, device, backend, monkeypatch, no_leaks):
    monkeypatch.setattr(policy_module, "visible_cuda_devices", lambda: 0)
    with pytest.raises(ValueError, match=f"device {device!r}: this machine shows no CUDA GPU") \
            as info:
        ENTRY_POINTS[entry](["cpu", device], backend=backend)
    assert "easycore.torch.parallel" in str(info.value)


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_a_malformed_cuda_name_is_refused_by_every_entry_point(entry, no_leaks):
    with pytest.raises(ValueError, match="'cuda:x': a CUDA GPU is 'cuda' or 'cuda:N'"):
        ENTRY_POINTS[entry](["cuda:x"], backend="ray")


def test_a_cuda_gpu_the_machine_shows_is_a_label_for_the_hooks(monkeypatch, no_leaks):
    # What "cuda:N" means here: a GPU the hooks use themselves (the torch
    # runners set it up); the caller only checks that the machine shows it.
    monkeypatch.setattr(policy_module, "visible_cuda_devices", lambda: 1)
    with Pool(devices=["cuda:0", "cpu"], backend="thread") as pool:
        assert pool.devices == ["cuda:0", "cpu"]
        assert pool.map(_device, [1, 2]) == [1, 2]
    with pytest.raises(ValueError, match="'cuda:1': this machine shows CUDA GPUs 0 to 0 only"):
        Pool(devices=["cuda:1"], backend="thread")


def test_labels_stay_labels(no_leaks):
    policy = DevicePolicy()
    for label in ("cpu", " cpu:1 ", "scanner:0", "gpu_like_but_not", "cudax"):
        device = policy.validate(label)
        policy.check_available(device)
        assert device == label.strip()


# ------------------------------------------------ which GPUs the machine shows
def _dev(tmp_path, *names):
    for name in names:
        (tmp_path / name).touch()
    return str(tmp_path)


@pytest.mark.parametrize(("nodes", "env", "expected"), [
    ((), None, 0),
    (("nvidiactl", "nvidia-uvm"), None, 0),  # the driver, no GPU node
    (("nvidia0", "nvidia1", "nvidiactl"), None, 2),
    (("nvidia0", "nvidia1"), "", 0),
    (("nvidia0", "nvidia1"), "1", 1),
    (("nvidia0", "nvidia1"), "0,1", 2),
    (("nvidia0", "nvidia1"), "1,5,0", 1),  # CUDA stops at the first invalid entry
    (("nvidia0", "nvidia1"), "-1", 0),
    (("nvidia0",), "GPU-8a1b", 1),
    (("nvidia0",), "MIG-3f2e,MIG-4a", 1),
])
def test_visible_cuda_devices_reads_device_nodes_and_cuda_visible_devices(
        tmp_path, monkeypatch, nodes, env, expected):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_cuda_devices(_dev(tmp_path, *nodes), env) == expected


def test_visible_cuda_devices_without_a_dev_folder_is_zero(tmp_path):
    assert visible_cuda_devices(os.path.join(str(tmp_path), "missing")) == 0
