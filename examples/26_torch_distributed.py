"""torch.distributed made easy: ranks started, grouped and checked by easycore.

``spawn(fn, world_size)`` starts the ranks, joins them into one process group
(gloo on CPUs here; NCCL on GPUs) on a free port of 127.0.0.1, runs
``fn(ctx, ...)`` on each and returns their results in rank order. A rank that
raises or dies ends the call at once, naming it; nothing waits for torch's
30-minute timeout. ``plan_placement`` then places models on devices.
"""

# requires: torch

from __future__ import annotations

import torch
import torch.distributed as dist

from easycore.torch.distributed import WorkerError, recv_any, spawn
from easycore.torch.placement import module_nbytes, plan_placement


def heading(text: str) -> None:
    print(f"\n=== {text} " + "=" * max(0, 70 - len(text)))


def average_gradients(ctx, size: int) -> float:
    grad = torch.full((size,), float(ctx.rank + 1))
    dist.all_reduce(grad, group=ctx.group)  # torch's own collective, on ctx.group
    return float(grad[0]) / ctx.world_size


def first_to_answer(ctx) -> object:
    if ctx.rank == 0:
        box = torch.zeros(1)
        senders = [recv_any(box, group=ctx.group) for _ in range(ctx.world_size - 1)]
        return sorted(senders)
    dist.send(torch.tensor([float(ctx.rank)]), dst=0, group=ctx.group)
    return None


def one_rank_fails(ctx) -> None:
    if ctx.rank == 1:
        raise RuntimeError("out of data on this rank")
    dist.barrier(group=ctx.group)  # the others would wait here forever without easycore


def main() -> None:
    heading("spawn: one function on every rank")
    print("averaged on 3 ranks:", spawn(average_gradients, 3, 1000))  # (1+2+3)/3 = 2.0
    print("rank 0 heard from:", spawn(first_to_answer, 3)[0])
    try:
        spawn(one_rank_fails, 3, timeout=60)
    except WorkerError as err:
        print("fails fast:", str(err).splitlines()[0])

    heading("placement: which model on which device")
    models = [torch.nn.Linear(1024, 1024), torch.nn.Linear(2048, 2048), torch.nn.Linear(512, 512)]
    sizes = [module_nbytes(m) for m in models]
    plan = plan_placement(sizes, ["cuda:0", "cuda:1"], capacity={"cuda:0": 40 << 20,
                                                                  "cuda:1": 40 << 20})
    print("sizes (MB):", [round(s / 2**20, 1) for s in sizes], "-> devices:", plan)


if __name__ == "__main__":
    main()
