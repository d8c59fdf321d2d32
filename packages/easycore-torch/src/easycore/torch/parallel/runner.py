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
from typing import Any, ClassVar, Iterable, Mapping, Optional, Union

from easycore.common import parallel as _common
from easycore.common.parallel.progress import ProgressOption

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

    def __init__(
        self,
        devices: Union[int, Iterable[DeviceLike]],
        cfg: Optional[Mapping[str, Any]] = None,
        queue_scale: float = 3.0,
        *,
        progress: ProgressOption = False,
        start_method: Optional[str] = None,
        backend: str = "process",
        **backend_options: Any,
    ) -> None:
        """
        Args:
            devices (int or Iterable): If the `devices` is `int`, it will use
                `devices` cpu to do the work. If the `devices` is an iterable
                object, such as list, it will use the devices specified by the
                iterable object, such as ["cpu", "cuda:0", "cuda:1"] (str or
                torch.device).
            cfg (easycore.common.config.CfgNode): user custom data (a dict is
                converted); defaults to an empty CfgNode. The runner keeps a deep
                copy; tensors in it reach spawned workers through shared memory.
            queue_scale (float): scale the queues for communication between
                processes.
            progress (bool or dict): show a tqdm progress bar on every call.
            start_method (str or None): "fork", "forkserver" or "spawn"; None
                chooses (spawn when a device is CUDA). "fork" with a CUDA device
                is a ValueError.
            backend (str): which back-end runs the producers.
            **backend_options: extra keyword arguments for the back-end class.
        """
        # Parsed first (a generator can be read only once), then checked against
        # this machine's GPUs, before any worker starts. Not for other back-ends:
        # Ray places GPUs on its own nodes, and this process may see none.
        devices = self.normalize_devices(devices)
        if backend == "process":
            for device in devices:
                self.check_available(device)
        # Read by get_mp_context, which the base constructor reaches via activate().
        self._requested_start_method = start_method
        super().__init__(
            devices,
            cfg,
            queue_scale,
            progress=progress,
            start_method=start_method,
            backend=backend,
            **backend_options,
        )

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
        processes.

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
        requested = self._requested_start_method or self.default_start_method
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
