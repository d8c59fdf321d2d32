"""On GPUs: the tutorial predictor on ["cuda:0", "cuda:0"], device setup, CUDA in the parent.

Skipped where torch sees no GPU (``-m "not cuda"`` deselects them explicitly).
Workers are spawned (CUDA cannot be forked), so each runner takes seconds to start.
"""

from __future__ import annotations

import json

import pytest
import torch
from _torch_helpers import (
    BatchPredictor,
    Fail,
    Predictor,
    batch_generator,
    reference_outputs,
)
from _torch_util import SCRIPTS, gpu_count, run_python
from torch.utils.data import DataLoader

from easycore.common.config import CfgNode
from easycore.torch.parallel import WorkerError

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(gpu_count() == 0, reason="torch sees no CUDA GPU"),
    pytest.mark.timeout(180),
]

DATA = list(range(100))


@pytest.fixture(scope="module")
def cpu_expected():
    return reference_outputs(torch.tensor(DATA, dtype=torch.float32).view(-1, 1))


def test_example2_on_two_workers_on_cuda0_equals_cpu(no_leaks, cpu_expected):
    predictor = Predictor(devices=["cuda:0", "cuda:0"])
    try:
        assert predictor.get_mp_context().get_start_method() == "spawn"
        result = predictor(DATA)
    finally:
        predictor.close()
    assert result.device.type == "cpu" and result.shape == (100, 3)
    assert torch.allclose(result, cpu_expected, atol=1e-5)


def test_example3_generator_and_dataloader_on_cuda0(no_leaks, cpu_expected):
    loader = DataLoader(torch.tensor(DATA, dtype=torch.float32), batch_size=16)
    with BatchPredictor(devices=["cuda:0", "cuda:0"]) as predictor:
        assert torch.allclose(predictor(batch_generator(DATA, 10)), cpu_expected, atol=1e-5)
        assert torch.allclose(predictor(loader), cpu_expected, atol=1e-5)


def test_every_gpu_and_the_parent_already_using_cuda():
    # CUDA is initialised in a subprocess's caller, never in this test process.
    proc = run_python(str(SCRIPTS / "cuda_in_parent.py"), timeout=170)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["devices"][-2:] == ["cuda:0", "cpu"]  # "cuda" means cuda:0
    infos = report["infos"]
    assert {info["device"] for info in infos} == set(report["devices"])  # every worker took some
    for info in infos:
        device = info["device"]
        if device.startswith("cuda"):
            index = int(device.split(":")[1])
            # set_device in setup_worker: "cuda" in the hooks means this worker's GPU.
            assert info["current"] == index
            assert info["default_tensor_device"] == device
        else:
            assert info["threads"] == report["budget"]  # the worker's thread budget
    # A CUDA tensor returned as is arrives on its GPU in the caller.
    assert report["result_devices"] == ["cuda"] * 3
    assert report["result_values"] == [[float(i)] * 3 for i in range(3)]


def test_hook_error_on_a_gpu_names_the_device(no_leaks):
    cfg = CfgNode({"fail": "producer_work", "item": 3, "n": 4})
    with pytest.raises(WorkerError) as info, Fail(["cuda:0"], cfg=cfg) as runner:
        runner(range(10))
    assert info.value.device == "cuda:0" and "'cuda:0'" in str(info.value)


def test_fork_is_refused_and_missing_gpu_named(no_leaks):
    with pytest.raises(ValueError, match="start_method='fork' cannot run CUDA"):
        Predictor(["cuda:0"], start_method="fork")
    missing = f"cuda:{gpu_count()}"
    with pytest.raises(ValueError, match=f"device '{missing}' does not exist"):
        Predictor(["cuda:0", missing])
