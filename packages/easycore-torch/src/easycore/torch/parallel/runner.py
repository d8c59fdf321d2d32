"""The torch runners: easycore-parallel's runners with torch's seams filled in.

Everything that makes a runner a runner (worker processes, per-worker pipes,
adaptive chunking, ordering, error and death propagation, cleanup) is
:class:`easycore.common.parallel.BaseRunner`'s. These classes override only
its documented seams:

* ``validate_device``: ``"cpu"`` / ``"cuda:N"`` parsed (:mod:`.devices`); the
  constructor then checks that this machine has each GPU (``check_available``,
  process back-end only: Ray places GPUs on its own nodes);
* ``get_mp_context``: ``torch.multiprocessing``, ``spawn`` when a device is
  CUDA (:mod:`.context`);
* ``setup_worker``: ``torch.cuda.set_device`` / ``torch.set_num_threads`` in
  each worker (:mod:`.devices`);
* ``transport_class``: tensors through shared memory (:mod:`.transport`).
"""

from __future__ import annotations

from multiprocessing.context import BaseContext
from typing import ClassVar, Optional

from easycore.common import parallel as _common

from .context import get_context, select_start_method
from .devices import DeviceLike, canonical_device, check_device, setup_device
from .transport import TensorTransport

__all__ = ["BaseRunner", "UnorderedRunner", "OrderedRunner"]


class BaseRunner(_common.BaseRunner):
    """A multi-process runner on ``torch.multiprocessing`` whose consumer receives data unordered.

    The runner starts one process per device for the producers and runs the
    consumer in the calling thread; see :class:`easycore.common.parallel.BaseRunner`
    for the hooks, the lifecycle and the error guarantees, which are the same.
    What torch changes:

    * devices are ``"cpu"`` or ``"cuda:N"`` (``"cuda"`` means ``"cuda:0"``),
      checked when the runner is built: a malformed device, or a GPU this
      machine does not have, is a ``ValueError`` naming it (with
      ``backend="ray"`` only the spelling is checked here: Ray places GPUs);
    * each CUDA worker makes its device current (``torch.cuda.set_device``),
      so ``"cuda"`` in your code means the worker's GPU; each CPU worker runs
      torch on :attr:`cpu_threads` intra-op threads (one by default);
    * workers start with ``spawn`` as soon as a device is CUDA (keep the code
      that builds the runner under ``if __name__ == "__main__":``), otherwise
      with the platform's default start method;
    * CPU tensors returned by ``producer_work`` reach the consumer through
      shared memory without being copied there (return ``output.cpu()``).
    """

    #: torch.set_num_threads in each CPU worker; None keeps torch's default (one
    #: per core in every worker). Above one, workers start with spawn.
    cpu_threads: ClassVar[Optional[int]] = 1
    #: result transport: CPU tensors and NumPy arrays through shared memory
    transport_class: ClassVar[type] = TensorTransport

    @classmethod
    def validate_device(cls, device: DeviceLike) -> str:  # type: ignore[override]
        """Parse one device (the constructor then checks that this machine has it).

        Args:
            device (str or torch.device): "cpu", "cuda", "cuda:N".

        Returns:
            str: the canonical device ("cuda" becomes "cuda:0").
        """
        return canonical_device(device)

    @classmethod
    def check_available(cls, device: str) -> None:
        """Raise ``ValueError`` unless this machine has ``device`` (a GPU torch sees).

        Called by the constructor for each device when the workers are local
        processes (the base runner's seam).

        Args:
            device (str): a device returned by :meth:`validate_device`.
        """
        check_device(device)

    @classmethod
    def setup_worker(cls, device: str) -> None:
        """Runs in each worker before ``producer_init``: select its GPU, or its CPU threads.

        Args:
            device (str): this worker's device.
        """
        setup_device(device, cls.cpu_threads)

    def get_mp_context(self) -> BaseContext:
        """The ``torch.multiprocessing`` context that starts the workers.

        Returns:
            multiprocessing.context.BaseContext: spawn when a device is CUDA.
        """
        requested = self._start_method or self.default_start_method
        return get_context(select_start_method(self.devices, requested, self.cpu_threads))


class UnorderedRunner(BaseRunner, _common.UnorderedRunner):
    """A multi-process runner on ``torch.multiprocessing`` whose consumer receives data unordered.

    The runner starts one process per device for the producers and runs the
    consumer in the calling thread. See :class:`BaseRunner`.
    """

    ordered = False


class OrderedRunner(BaseRunner, _common.OrderedRunner):
    """A multi-process runner on ``torch.multiprocessing`` whose consumer receives data in order.

    The runner starts one process per device for the producers and runs the
    consumer in the calling thread. See :class:`BaseRunner`.
    """

    ordered = True
