"""The device policy of the torch runners and pools: CPUs and CUDA GPUs.

One object (see [`DevicePolicy`][easycore.common.parallel.DevicePolicy])
answers every device question for every back-end:

* ``validate``: ``"cpu"`` / ``"cuda:N"`` parsed, ``"cuda"`` means ``"cuda:0"``
  ([`canonical_device`][easycore.torch.parallel.canonical_device]);
* ``check_available``: this machine has the GPU (local back-ends only: Ray
  places GPUs on its own nodes);
* ``setup_worker``: ``torch.cuda.set_device`` in a CUDA worker, so that
  ``"cuda"`` in your code means the worker's GPU (the worker's thread budget,
  ``torch.set_num_threads`` included, is set before, by the engine);
* ``start_method``: ``spawn`` as soon as a device is CUDA, or a CPU worker
  runs torch on more than one thread
  ([`select_start_method`][easycore.torch.parallel.select_start_method]);
* ``mp_context``: ``torch.multiprocessing``'s;
* ``make_transport``: [`TensorTransport`][easycore.torch.parallel.TensorTransport],
  CPU tensors through shared memory in both directions.
"""

from __future__ import annotations

from multiprocessing.context import BaseContext
from typing import Any, Optional, Sequence

from easycore.common.parallel import DevicePolicy

from .context import get_context, select_start_method
from .devices import canonical_device, check_device, is_cuda, setup_device
from .transport import TensorTransport

__all__ = ["TorchDevicePolicy"]


class TorchDevicePolicy(DevicePolicy):
    """CPU and CUDA devices for workers that run PyTorch."""

    transport_class = TensorTransport

    def validate(self, device: Any) -> str:
        return canonical_device(device)

    def check_available(self, device: str) -> None:
        check_device(device)

    def setup_worker(self, device: str) -> None:
        setup_device(device, None)

    def start_method(
        self, devices: Sequence[str], requested: Optional[str], threads: Optional[int]
    ) -> str:
        return select_start_method(devices, requested, threads)

    def mp_context(self, method: str) -> BaseContext:
        return get_context(method)

    def ray_resources(self, device: str) -> tuple:
        if is_cuda(device):
            return 1.0, 1.0, "cuda:0"
        return 1.0, 0.0, device
