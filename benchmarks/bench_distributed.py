"""Benchmark easycore.torch.distributed.spawn against torch.multiprocessing.spawn.

The job: start N ranks, form a gloo process group on 127.0.0.1, run one
``all_reduce`` of a small tensor, bring each rank's result back to the
caller, and end every process. Wall time of the whole call, best of
``REPEAT``, the rows taking turns in one run:

* ``easycore spawn``: ``spawn(fn, N)``, its defaults (CPU ranks are forked:
  torch is already imported);
* ``easycore spawn, start_method="spawn"``: fresh interpreters, the start
  method CUDA ranks use, and the one torch's helper always uses;
* ``torch.multiprocessing.spawn``: what one writes with torch alone: a free
  port picked by binding port 0 and closing it (racy: the reason easycore
  hands the bound socket to the store instead), ``init_process_group`` from
  ``MASTER_ADDR``/``MASTER_PORT``, results through a ``SimpleQueue``.

Goal: easycore at most 1.2x torch's wall time.

Run: ``scripts/bench distributed`` or ``python benchmarks/bench_distributed.py`` (~40 s).
"""

from __future__ import annotations

import os
import platform
import socket
import time
from functools import partial
from typing import Callable, Dict, List

import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp

from easycore.torch.distributed import spawn

RANKS = (2, 3)
REPEAT = 3


def easycore_rank(ctx):
    t = torch.tensor([float(ctx.rank + 1)])
    dist.all_reduce(t, group=ctx.group)
    return t.item()


def torch_rank(rank, world_size, port, results):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    results.put((rank, t.item()))
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_torch(n: int) -> List[float]:
    results = torch_mp.get_context("spawn").SimpleQueue()
    torch_mp.spawn(torch_rank, args=(n, free_port(), results), nprocs=n, join=True)
    got = dict(results.get() for _ in range(n))
    return [got[r] for r in range(n)]


def main() -> None:
    print(f"torch {torch.__version__}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs; gloo on 127.0.0.1; wall time of the whole call, "
          f"best of {REPEAT}")
    for n in RANKS:
        expected = [n * (n + 1) / 2] * n
        rows: Dict[str, Callable[[], List[float]]] = {
            "easycore spawn (fork)": partial(spawn, easycore_rank, n),
            'easycore spawn, start_method="spawn"': partial(
                spawn, easycore_rank, n, start_method="spawn"),
            "torch.multiprocessing.spawn": partial(run_torch, n),
        }
        best = {name: float("inf") for name in rows}
        for _ in range(REPEAT):
            for name, call in rows.items():
                start = time.perf_counter()
                result = call()
                best[name] = min(best[name], time.perf_counter() - start)
                assert result == expected, (name, result)
        peer = best["torch.multiprocessing.spawn"]
        print(f"\n{n} ranks: start, process group, one all_reduce, results, exit")
        for name, seconds in best.items():
            print(f"  {name:40s} {seconds:7.3f} s   {seconds / peer:5.2f}x torch")
        ratio = best['easycore spawn, start_method="spawn"'] / peer
        print(f"  same start method as torch: {ratio:.2f}x (goal <= 1.2x): "
              f"{'met' if ratio <= 1.2 else 'NOT met'}")


if __name__ == "__main__":
    main()
