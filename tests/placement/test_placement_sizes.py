"""``module_nbytes`` and ``device_capacity``."""

from __future__ import annotations

import re

import psutil
import pytest
import torch

from easycore.torch.placement import device_capacity, module_nbytes


def _gpus() -> int:
    return torch.cuda.device_count() if torch.backends.cuda.is_built() else 0


def test_parameters_and_buffers_are_counted():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    params = (4 * 3 + 3) * 4 + (3 + 3) * 4  # Linear weight + bias, BatchNorm weight + bias
    buffers = (3 + 3) * 4 + 8  # running mean and var (float32), num_batches_tracked (int64)
    assert module_nbytes(model) == params + buffers


DTYPES = [torch.float16, torch.bfloat16, torch.float64, torch.complex64, torch.complex128,
          torch.int8, torch.bool]
FLOAT8 = ("float8_e4m3fn", "float8_e5m2")
DTYPES += [getattr(torch, name) for name in FLOAT8 if hasattr(torch, name)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_is_counted_by_its_element_size(dtype):
    module = torch.nn.Module()
    module.register_buffer("data", torch.zeros(5, 7, dtype=dtype))
    module.weight = torch.nn.Parameter(torch.zeros(3, dtype=dtype), requires_grad=False)
    assert module_nbytes(module) == 38 * torch.empty(0, dtype=dtype).element_size()


def test_a_bfloat16_model():
    layer = torch.nn.Linear(4, 2).to(torch.bfloat16)
    assert module_nbytes(layer) == (4 * 2 + 2) * 2


def test_tied_weights_count_once():
    embed = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = embed.weight
    assert module_nbytes(torch.nn.ModuleList([embed, head])) == 10 * 4 * 4


def test_a_meta_model_is_measured_without_memory():
    with torch.device("meta"):
        big = torch.nn.Linear(1 << 14, 1 << 14)  # 1 GiB of float32, never allocated
    assert module_nbytes(big) == ((1 << 28) + (1 << 14)) * 4


def test_a_sparse_buffer_counts_values_and_indices():
    module = torch.nn.Module()
    indices = torch.tensor([[0, 5], [1, 9]])
    adj = torch.sparse_coo_tensor(indices, torch.ones(2), (100, 100), check_invariants=True)
    module.register_buffer("adj", adj)
    assert module_nbytes(module) == 2 * 4 + 4 * 8


def test_not_a_module_is_refused():
    with pytest.raises(TypeError, match=re.escape("needs a torch.nn.Module, got Tensor")):
        module_nbytes(torch.zeros(3))


def test_cpu_capacity_is_the_available_host_memory():
    available = device_capacity("cpu")
    assert 0 < available <= psutil.virtual_memory().total


@pytest.mark.parametrize("device", ["mps", "gpu:0", 3.5])
def test_unknown_devices_are_refused(device):
    with pytest.raises(ValueError, match="device"):
        device_capacity(device)


@pytest.mark.skipif(_gpus() > 0, reason="this machine has a GPU")
def test_a_gpu_this_machine_lacks_is_named():
    with pytest.raises(ValueError, match="'cuda:0' is not a GPU torch sees here"):
        device_capacity("cuda:0")


@pytest.mark.cuda
@pytest.mark.skipif(_gpus() == 0, reason="needs a CUDA GPU")
def test_gpu_capacity_is_its_free_memory():
    free = device_capacity("cuda:0")
    total = torch.cuda.get_device_properties(0).total_memory
    assert 0 < free <= total
