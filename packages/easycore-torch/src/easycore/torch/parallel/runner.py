"""The torch runners: easycore-parallel's runners with torch's device policy.

Everything that makes a runner a runner (worker processes, the engine,
chunking, ordering, errors, deaths, timeouts, cleanup) is
[`easycore.common.parallel.BaseRunner`][easycore.common.parallel.BaseRunner]'s.
These classes only set its ``device_policy``
([`TorchDevicePolicy`][easycore.torch.parallel.policy.TorchDevicePolicy]) and
its transport ([`TensorTransport`][easycore.torch.parallel.TensorTransport]).
"""

from __future__ import annotations

from typing import ClassVar

from easycore.common import parallel as _common

from .policy import TorchDevicePolicy
from .transport import TensorTransport

__all__ = ["BaseRunner", "OrderedRunner", "UnorderedRunner"]


class BaseRunner(_common.BaseRunner):
    """A multi-process runner on ``torch.multiprocessing`` whose consumer receives data unordered.

    The runner starts one process per device for the producers and runs the
    consumer in the calling thread; see
    [`easycore.common.parallel.BaseRunner`][easycore.common.parallel.BaseRunner]
    for the hooks, the lifecycle and the error guarantees, which are the same.
    What torch changes:

    * devices are ``"cpu"`` or ``"cuda:N"`` (``"cuda"`` means ``"cuda:0"``),
      checked when the runner is built: a malformed device, or a GPU this
      machine does not have, is a ``ValueError`` naming it (with
      ``backend="ray"`` only the spelling is checked here: Ray places GPUs);
    * each CUDA worker makes its device current (``torch.cuda.set_device``),
      so ``"cuda"`` in your code means the worker's GPU; every worker, CPU or
      CUDA, runs torch (and NumPy's BLAS) on ``cpu_threads`` threads:
      ``max(1, cpus // workers)`` by default;
    * workers start with ``spawn`` as soon as a device is CUDA or a CPU worker
      runs torch on more than one thread (keep the code that builds the runner
      under ``if __name__ == "__main__":``), otherwise with the platform's
      default start method;
    * CPU tensors travel through shared memory both ways: inputs to the
      workers and results back, without copies on the receiving side.
    """

    #: devices: "cpu" / "cuda:N", checked, set up and started as torch needs
    device_policy: ClassVar[_common.DevicePolicy] = TorchDevicePolicy()
    #: tensors (and NumPy arrays) through shared memory
    transport_class: ClassVar[type] = TensorTransport


class UnorderedRunner(BaseRunner, _common.UnorderedRunner):
    """A multi-process runner on ``torch.multiprocessing`` whose consumer receives data unordered.

    The runner starts one process per device for the producers and runs the
    consumer in the calling thread. See [`BaseRunner`][easycore.torch.parallel.BaseRunner].
    """

    ordered = False


class OrderedRunner(BaseRunner, _common.OrderedRunner):
    """A multi-process runner on ``torch.multiprocessing`` whose consumer receives data in order.

    The runner starts one process per device for the producers and runs the
    consumer in the calling thread. See [`BaseRunner`][easycore.torch.parallel.BaseRunner].
    """

    ordered = True
