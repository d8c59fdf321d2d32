"""What every rank is told about itself: `DistContext`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DistContext"]


@dataclass(frozen=True)
class DistContext:
    """One rank's place in the process group; ``fn``'s first argument in
    [`spawn`][easycore.torch.distributed.spawn] and ``cfg.dist`` in the producer hooks of a
    [`DistributedRunner`][easycore.torch.distributed.DistributedRunner].

    The collectives are `torch.distributed`'s own; pass ``group=ctx.group``
    (the default group of the rank's process, so it may also be left out).

    Attributes:
        rank (int): this process's rank, ``0 <= rank < world_size``.
        world_size (int): number of ranks.
        device (str): this rank's device, e.g. ``"cpu"`` or ``"cuda:0"`` (made
            current with ``torch.cuda.set_device`` for a GPU).
        backend (str): the `torch.distributed` backend, e.g. ``"gloo"`` or ``"nccl"``.
        group (torch.distributed.ProcessGroup): the group of all ranks.

    Examples:
        ```python
        # requires: torch
        import torch
        import torch.distributed as dist
        from easycore.torch.distributed import spawn

        def total(ctx):
            t = torch.tensor([float(ctx.rank)])
            dist.all_reduce(t, group=ctx.group)
            return t.item()

        if __name__ == "__main__":
            print(spawn(total, 2))  # [1.0, 1.0]
        ```
    """

    rank: int
    world_size: int
    device: str
    backend: str
    group: Any

    @property
    def is_main(self) -> bool:
        """bool: whether this is rank 0."""
        return self.rank == 0

    def __repr__(self) -> str:
        return (
            f"DistContext(rank={self.rank}, world_size={self.world_size}, "
            f"device={self.device!r}, backend={self.backend!r})"
        )
