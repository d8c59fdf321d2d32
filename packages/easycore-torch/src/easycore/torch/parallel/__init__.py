"""Runners and a pool on ``torch.multiprocessing``, for CPUs and GPUs.

The same API as `easycore.common.parallel` (same hooks, same lifecycle,
same errors; [`Pool`][easycore.torch.parallel.Pool] is ``multiprocessing.Pool``'s
API), for code that runs PyTorch: devices are ``"cpu"`` / ``"cuda:N"``,
checked when the runner or pool is built; CUDA workers start with ``spawn``
and make their GPU current; each worker runs torch on its share of the CPUs;
CPU tensors travel through shared memory both ways.

Examples:
    ```python
    import torch
    from easycore.torch.parallel import OrderedRunner, Pool

    class Predictor(OrderedRunner):
        @staticmethod
        def producer_init(device, cfg):
            # one model per worker, on its device
            cfg.model = Net().to(device)

        @staticmethod
        def producer_work(device, cfg, data):
            with torch.no_grad():
                return cfg.model(data.to(device)).cpu()   # back on the CPU

        @staticmethod
        def consumer_init(cfg):
            cfg.outputs = []

        @staticmethod
        def consumer_work(cfg, data):
            cfg.outputs.append(data)

        @staticmethod
        def consumer_end(cfg):
            return torch.cat(cfg.outputs)

    if __name__ == "__main__":
        with Predictor(devices=["cuda:0", "cuda:1"]) as predictor:
            print(predictor(batches).shape)
        with Pool(devices=["cuda:0", "cuda:1"]) as pool:
            norms = pool.map(lambda batch: batch.norm().item(), batches)
    ```

Modules, one job each; the machinery itself is easycore-parallel's, reached
only through its seams (see the docs' "Extending" page):

* ``runner``, ``pool``: the public classes;
* ``policy``: [`TorchDevicePolicy`][easycore.torch.parallel.TorchDevicePolicy],
  what a device means (checks, set-up, start method, transport);
* ``devices``: device strings checked in the caller, and each worker's
  device set-up (``torch.cuda.set_device``);
* ``context``: the start method (``spawn`` when a device is CUDA) on
  ``torch.multiprocessing``;
* ``transport``: CPU tensors through shared memory, both ways, without
  copies on arrival; or torch's own sharing.

The errors are easycore-parallel's, re-exported here.
"""

from easycore.common.parallel import (
    ParallelError,
    RunnerClosedError,
    TaskTimeoutError,
    WorkerDiedError,
    WorkerError,
)

from .background import BackgroundTask, JobQueue
from .context import select_start_method
from .devices import canonical_device, check_device
from .gradient_server import GradientServer
from .model_sync import ModelSync
from .policy import TorchDevicePolicy
from .pool import Pool
from .queue import Queue
from .runner import BaseRunner, OrderedRunner, UnorderedRunner
from .transport import TensorTransport, TorchSharingTransport

__all__ = [
    "BackgroundTask",
    "BaseRunner",
    "GradientServer",
    "JobQueue",
    "ModelSync",
    "OrderedRunner",
    "ParallelError",
    "Pool",
    "Queue",
    "RunnerClosedError",
    "TaskTimeoutError",
    "TensorTransport",
    "TorchDevicePolicy",
    "TorchSharingTransport",
    "UnorderedRunner",
    "WorkerDiedError",
    "WorkerError",
    "canonical_device",
    "check_device",
    "select_start_method",
]
