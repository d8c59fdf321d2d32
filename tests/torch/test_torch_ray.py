"""The torch runners on the Ray back-end: same hooks, devices placed by Ray.

The caller's GPU check is skipped there (Ray places GPUs on its own nodes);
Ray's own resource check refuses what the cluster cannot fit.
"""

from __future__ import annotations

import os

import pytest
import torch
from _torch_helpers import BatchPredictor, Probe, batch_generator, reference_outputs
from _torch_util import EXAMPLES, HERE, gpu_count

from easycore.torch.parallel import ParallelError

pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]

# Ray's workers are not our children: they find the test helpers and the
# tutorial's network.py through PYTHONPATH.
_PATH = os.pathsep.join([str(HERE), str(EXAMPLES)])
RAY = {
    "ray_init_kwargs": {
        "num_cpus": 2,
        "include_dashboard": False,
        "runtime_env": {"env_vars": {"PYTHONPATH": _PATH}},
    }
}


def test_tutorial_predictor_on_ray():
    expected = reference_outputs(torch.arange(100.0).view(-1, 1))
    with BatchPredictor(["cpu", "cpu"], backend="ray", **RAY) as predictor:
        result = predictor(batch_generator(list(range(100)), 10))
    assert torch.allclose(result, expected)


def test_setup_worker_runs_in_ray_actors():
    with Probe(["cpu", "cpu"], backend="ray", **RAY) as runner:
        infos = runner(range(4))
    assert {i["device"] for i in infos} == {"cpu"}
    assert {i["threads"] for i in infos} == {1}


@pytest.mark.skipif(gpu_count() > 0, reason="this machine has a GPU")
def test_gpu_devices_are_left_to_ray_to_place():
    # Not this process's ValueError (Ray may have GPUs elsewhere): Ray's own refusal.
    with pytest.raises(ParallelError, match="GPU"):
        Probe(["cuda:0"], backend="ray", **RAY)
    with pytest.raises(ValueError, match="invalid device 'gpu:0'"):
        Probe(["gpu:0"], backend="ray", **RAY)  # the spelling is still checked here
