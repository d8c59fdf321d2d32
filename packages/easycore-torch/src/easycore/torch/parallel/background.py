"""Background work for PyTorch: [`BackgroundTask`][easycore.torch.parallel.BackgroundTask]
and [`JobQueue`][easycore.torch.parallel.JobQueue].

easycore-parallel's [`BackgroundTask`][easycore.common.parallel.BackgroundTask]
and [`JobQueue`][easycore.common.parallel.JobQueue] on the torch
[`Pool`][easycore.torch.parallel.Pool], which brings:

* **tensors through shared memory**: CPU tensors (and NumPy arrays) in
  results and in a job's arguments travel through easycore's recycled
  segments, rebuilt without a copy on arrival (``tensor_sharing=`` as for
  the torch ``Pool``);
* **devices checked up front**: ``devices=["cuda:0", "cuda:1"]`` runs one
  worker per GPU (started with ``spawn``, its GPU made current), and a GPU
  this machine lacks is a ``ValueError`` naming it;
* **torch's random generators in the streams**: without ``seed`` every
  worker seeds torch (CPU, and CUDA as it initialises) from fresh entropy,
  where forked workers would all continue the caller's torch stream; with
  ``seed`` each call seeds them from ``(seed, call)`` (see
  [`seeding`][easycore.common.parallel.seeding]);
* **one CPU thread per worker** by default (``cpu_threads=1``, as torch's
  ``DataLoader`` sets in its workers), so that background work does not
  starve the training loop, and workers may be forked (fast to start);
* **pinned results**: ``pin_memory=True`` copies each result's CPU tensors
  into page-locked memory in a thread of the caller, as ``DataLoader`` does,
  so that ``.to("cuda", non_blocking=True)`` overlaps with compute. Without
  CUDA pinning is impossible: a ``UserWarning`` says so and results come
  unpinned.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, ClassVar, Mapping, Optional, Sequence

import torch

from easycore.common.parallel import BackgroundTask as _BackgroundTask
from easycore.common.parallel import JobQueue as _JobQueue
from easycore.common.parallel.extending import RandomStreams

from .pool import Pool

__all__ = ["BackgroundTask", "JobQueue", "TorchRandomStreams", "pin_memory"]


class TorchRandomStreams(RandomStreams):
    """`RandomStreams` plus torch's generators."""

    def seed_all(self, key: bytes, first: bool) -> None:
        super().seed_all(key, first)
        seed = int.from_bytes(key[:8], "little")
        # What torch.manual_seed does for CPU and CUDA, without its per-call
        # cost (about 0.2 ms: it formats a stack for its lazy CUDA seeding).
        torch.default_generator.manual_seed(seed)
        if torch.cuda.is_initialized() or (first and _BUILT_WITH_GPUS):
            # Before CUDA initialises this is queued for when it does; the
            # queueing formats a stack, which read source files for ~7 ms in
            # a fresh worker: not done at all by a build without GPU support.
            torch.cuda.manual_seed_all(seed)


#: whether this torch can use a GPU at all (a CPU-only build: never)
_BUILT_WITH_GPUS = torch.version.cuda is not None or getattr(torch.version, "hip", None) is not None


def pin_memory(data: Any) -> Any:
    """``data`` with every CPU tensor in it copied into pinned memory.

    Tensors inside tuples (named tuples too), lists and dicts are found; other
    objects (NumPy arrays, numbers, CUDA tensors, pinned tensors) stay as they are.

    Args:
        data (Any): a result.

    Returns:
        Any: the same structure, pinned.
    """
    if isinstance(data, torch.Tensor):
        if data.device.type == "cpu" and data.layout == torch.strided and not data.is_pinned():
            return data.pin_memory()
        return data
    if isinstance(data, tuple):
        items = [pin_memory(x) for x in data]
        return type(data)(*items) if hasattr(data, "_fields") else type(data)(items)
    if isinstance(data, list):
        return [pin_memory(x) for x in data]
    if isinstance(data, dict):
        return type(data)((k, pin_memory(v)) for k, v in data.items())
    return data


def _pin_stage(pin: bool, who: str) -> Optional[Callable[[Any], Any]]:
    if not pin:
        return None
    if not torch.cuda.is_available():  # asks the driver; creates no CUDA context
        warnings.warn(
            f"{who}(pin_memory=True): CUDA is not available, so there is nothing to pin "
            "for; results come unpinned",
            UserWarning,
            stacklevel=3,
        )
        return None
    return pin_memory


class BackgroundTask(_BackgroundTask):
    """[`easycore.common.parallel.BackgroundTask`][easycore.common.parallel.BackgroundTask]
    for targets that make tensors.

    Examples:
        ```python
        import torch
        from easycore.torch.parallel import BackgroundTask

        def getbatch(size):
            return torch.randn(size, 3, 224, 224), torch.randint(10, (size,))

        if __name__ == "__main__":
            task = BackgroundTask(getbatch, (64,), workers=4, pin_memory=True)
            with task as batches:
                for step in range(1000):
                    data, label = batches.get()
                    # pinned: asynchronous
                    data = data.to("cuda", non_blocking=True)
                    ...
        ```
    """

    pool_class: ClassVar[type] = Pool
    streams_class: ClassVar[type] = TorchRandomStreams

    def __init__(self, target: Callable[..., Any], args: Sequence[Any] = (),
                 kwargs: Optional[Mapping[str, Any]] = None, *, pin_memory: bool = False,
                 cpu_threads: Any = 1, **options: Any) -> None:
        """
        Args:
            target (callable): what the workers call.
            args (tuple): its positional arguments.
            kwargs (dict or None): its keyword arguments.
            pin_memory (bool): pin the results' CPU tensors in a thread of the
                caller (with a warning and no pinning where CUDA is unavailable).
            cpu_threads (int or str or None): torch's threads in each worker
                (1, as ``DataLoader``; ``"auto"``: ``cpus // workers``).
            **options: as the [`BackgroundTask`][easycore.common.parallel.BackgroundTask]
                of easycore-parallel, plus ``tensor_sharing`` (see
                [`Pool`][easycore.torch.parallel.Pool]).
        """
        self._stage = _pin_stage(pin_memory, "BackgroundTask")
        super().__init__(target, args, kwargs, cpu_threads=cpu_threads, **options)

    @property
    def pin_memory(self) -> bool:
        """bool: whether results are pinned."""
        return self._stage is not None


class JobQueue(_JobQueue):
    """[`easycore.common.parallel.JobQueue`][easycore.common.parallel.JobQueue]
    for jobs that take and make tensors."""

    pool_class: ClassVar[type] = Pool
    streams_class: ClassVar[type] = TorchRandomStreams

    def __init__(self, workers: Optional[int] = None, *, pin_memory: bool = False,
                 cpu_threads: Any = 1, **options: Any) -> None:
        """
        Args:
            workers (int or None): worker processes (None: 2, or one per device).
            pin_memory (bool): pin the results' CPU tensors in a thread of the
                caller (with a warning and no pinning where CUDA is unavailable).
            cpu_threads (int or str or None): torch's threads in each worker.
            **options: as the [`JobQueue`][easycore.common.parallel.JobQueue] of
                easycore-parallel, plus ``tensor_sharing``.
        """
        self._stage = _pin_stage(pin_memory, "JobQueue")
        super().__init__(workers, cpu_threads=cpu_threads, **options)

    @property
    def pin_memory(self) -> bool:
        """bool: whether results are pinned."""
        return self._stage is not None
