"""``DistributedRunner``: an ordered torch runner whose producers form one process group."""

from __future__ import annotations

from typing import Any, ClassVar, Dict, Iterable, Mapping, Optional, Sequence, Union

import torch.distributed as dist

from easycore.common.parallel import (
    Backend,
    ProcessBackend,
    WorkerDiedError,
    WorkerError,
    WorkerProgram,
)
from easycore.common.parallel.extending import ProgressOption
from easycore.torch.parallel import OrderedRunner
from easycore.torch.parallel.devices import is_cuda

from .failures import name_rank
from .group_backend import GroupBackend
from .rank_worker import RankProgram

__all__ = ["DistributedRunner", "default_backend"]


def default_backend(devices: Sequence[str]) -> str:
    """"nccl" when every device is a GPU and torch has NCCL, else "gloo".

    Args:
        devices (list[str]): canonical device strings.

    Returns:
        str:
    """
    if devices and all(is_cuda(d) for d in devices) and dist.is_nccl_available():
        return "nccl"
    return "gloo"


class DistributedRunner(OrderedRunner):
    """An [`OrderedRunner`][easycore.torch.parallel.OrderedRunner] whose producers are the
    ranks of one ``torch.distributed`` process group.

    Rank ``r`` is the producer on ``devices[r]``. The group is formed when the
    runner starts (the constructor, or [`activate`][easycore.common.parallel.BaseRunner.activate]),
    before ``producer_init``, and left after ``producer_end``; in all three
    producer hooks ``cfg.dist`` is the rank's
    [`DistContext`][easycore.torch.distributed.DistContext] (``rank``,
    ``world_size``, ``device``, ``backend``, ``group``). Everything else —
    the hooks, ordering, errors, ``close`` — is the runner's.

    Collectives need every rank: call them in ``producer_init`` and
    ``producer_end``, which every rank runs exactly once (load a model on rank 0
    and broadcast it; reduce statistics at the end). ``producer_work`` runs
    on whichever producer is free, a different number of times per rank, so
    keep collectives out of it (point-to-point messages are fine).

    A producer that raises or dies, in the group's start-up too, raises
    ``WorkerError`` / ``WorkerDiedError`` naming its rank and device, and the
    other ranks are killed, not left waiting in a collective.

    Examples:
        ```python
        # requires: torch
        import torch
        import torch.distributed as dist
        from easycore.torch.distributed import DistributedRunner

        class Scaled(DistributedRunner):
            @staticmethod
            def producer_init(device, cfg):
                scale = torch.tensor([3.0 if cfg.dist.rank == 0 else 0.0])
                # every rank gets rank 0's
                dist.broadcast(scale, src=0, group=cfg.dist.group)
                cfg.scale = scale

            @staticmethod
            def producer_work(device, cfg, data):
                return cfg.scale * data

            @staticmethod
            def consumer_init(cfg):
                cfg.out = []

            @staticmethod
            def consumer_work(cfg, data):
                cfg.out.append(data.item())

            @staticmethod
            def consumer_end(cfg):
                return cfg.out

        if __name__ == "__main__":
            with Scaled(devices=2) as runner:
                print(runner(range(4)))  # [0.0, 3.0, 6.0, 9.0]
        ```
    """

    #: ranks as local processes, or as Ray actors (threads cannot form a group)
    backends: ClassVar[Dict[str, Union[type, str]]] = {
        "process": ProcessBackend,
        "ray": "easycore.common.parallel.extending:RayBackend",
    }

    def __init__(
        self,
        devices: Union[int, Iterable[str]],
        cfg: Optional[Mapping[str, Any]] = None,
        queue_scale: float = 3.0,
        *,
        dist_backend: Optional[str] = None,
        dist_timeout: Optional[float] = 60.0,
        dist_host: Optional[str] = None,
        **options: Any,
    ) -> None:
        """
        Args:
            devices (int or list): as for the torch runners; one rank per entry.
            cfg (CfgNode or dict or None): as for the runners.
            queue_scale (float): as for the runners.
            dist_backend (str or None): the ``torch.distributed`` backend;
                None: "nccl" when every device is a GPU, else "gloo".
            dist_timeout (float or None): seconds the ranks may take to join
                the group (``producer_init`` itself has no limit, as in any
                runner), and each collective; None: torch's default.
            dist_host (str or None): the address of the rendezvous store;
                None: ``127.0.0.1`` for local processes, rank 0's node for Ray.
            **options: the runners' keyword arguments (``progress``,
                ``start_method``, ``cpu_threads``, ``backend="process"`` or
                ``"ray"``, and the Ray back-end's ``address`` and
                ``ray_init_kwargs``), except ``task_timeout``: a rank killed
                for overrunning could not be replaced in its group.

        Raises:
            ValueError: a bad ``dist_timeout``, or a ``task_timeout``.
        """
        if dist_timeout is not None and not dist_timeout > 0:
            raise ValueError(f"dist_timeout must be positive or None, got {dist_timeout!r}")
        _refuse_task_timeout(options.get("task_timeout"))
        #: the torch.distributed backend of the group
        self.dist_backend = dist_backend or default_backend(self.normalize_devices(devices))
        #: seconds the ranks may take to join the group, and each collective
        self.dist_timeout = dist_timeout
        #: the rendezvous store's address (None: the default)
        self.dist_host = dist_host
        super().__init__(devices, cfg, queue_scale, **options)

    # ----------------------------------------------------------------- seams
    def make_program(self) -> WorkerProgram:
        """Every rank runs this class's hooks around the group's own steps.

        Returns:
            WorkerProgram: a ``RankProgram`` (see `rank_worker`).
        """
        return RankProgram(hooks=type(self))

    def make_backend(self) -> Backend:
        """The runner's back-end (local processes or Ray actors), its workers a group.

        Returns:
            Backend: a `GroupBackend`.
        """
        inner = super().make_backend()
        return GroupBackend(
            inner, backend=self.dist_backend, timeout=self.dist_timeout, host=self.dist_host,
            local_ranks=isinstance(inner, ProcessBackend), run_init=True,
        )

    def __call__(
        self,
        data_iter: Iterable,
        *,
        progress: Optional[ProgressOption] = None,
        task_timeout: Optional[float] = None,
    ) -> Any:
        """As the runners' call; a producer's error names its rank.

        Args:
            data_iter (Iterable): the items, read lazily.
            progress (bool or dict or None): override the constructor's ``progress``.
            task_timeout (None): not supported: a rank that is killed cannot be
                replaced in its group.

        Returns:
            Any: what ``consumer_end`` returned.
        """
        _refuse_task_timeout(task_timeout)
        try:
            return super().__call__(data_iter, progress=progress)
        except (WorkerError, WorkerDiedError) as err:
            name_rank(err, len(self.devices))
            raise


def _refuse_task_timeout(task_timeout: Optional[float]) -> None:
    if task_timeout is not None:
        raise ValueError(
            "DistributedRunner does not take task_timeout: a rank killed for overrunning "
            "could not be replaced in its process group; dist_timeout bounds each collective"
        )
