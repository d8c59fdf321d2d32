"""Producer/consumer runners on ``torch.multiprocessing``, for CPUs and GPUs.

The same API as :mod:`easycore.common.parallel` (same hooks, same lifecycle,
same errors), for producers that run PyTorch::

    import torch
    from easycore.torch.parallel import OrderedRunner

    class Predictor(OrderedRunner):
        @staticmethod
        def producer_init(device, cfg):
            cfg.model = Net().to(device)       # one model per worker, on its device

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

Modules, one job each; the runner machinery itself is easycore-parallel's,
reached only through its seams:

* :mod:`.runner`: the public classes, filling in the seams;
* :mod:`.devices`: device strings checked in the caller, and each worker's
  device setup (``torch.cuda.set_device``, ``torch.set_num_threads``);
* :mod:`.context`: the start method (``spawn`` when a device is CUDA) on
  ``torch.multiprocessing``;
* :mod:`.transport`: CPU tensors through shared memory, without copies in the
  caller.

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
from .policy import TorchDevicePolicy
from .pool import Pool
from .runner import BaseRunner, OrderedRunner, UnorderedRunner
from .transport import TensorTransport, TorchSharingTransport

__all__ = [
    "Pool",
    "BackgroundTask",
    "JobQueue",
    "TorchDevicePolicy",
    "TorchSharingTransport",
    "TaskTimeoutError",
    "BaseRunner",
    "UnorderedRunner",
    "OrderedRunner",
    "TensorTransport",
    "ParallelError",
    "RunnerClosedError",
    "WorkerError",
    "WorkerDiedError",
    "canonical_device",
    "check_device",
    "select_start_method",
]
