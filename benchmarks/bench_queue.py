"""Benchmark easycore's Queue against multiprocessing.Queue and torch.multiprocessing.Queue.

A producer process puts items, the caller gets them (the usual direction: a
worker feeds the training loop). Every item is *fresh* data made by the
producer (a new array or tensor each time, as a data pipeline makes them:
torch re-sends an already-shared storage by handle, which would flatter it),
and the caller reads one element of each. Contenders, measured in this run
taking turns, best round counts:

* ``easycore.common.parallel.Queue`` (NumPy arrays) and
  ``easycore.torch.parallel.Queue`` (tensors): one copy into a shared-memory
  segment by ``put``, none by ``get``;
* ``multiprocessing.Queue`` (NumPy arrays, pickled through a pipe by a feeder thread);
* ``torch.multiprocessing.Queue`` (tensors: each storage moved into a new
  shared-memory file, its descriptor passed over a socket).

Sections: ``big`` (8 MiB items) and ``tiny`` (a small tuple per item).

Run: ``scripts/bench queue`` or ``python benchmarks/bench_queue.py [--quick]``.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from typing import Any, Dict

import numpy as np
import torch
import torch.multiprocessing as tmp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import (
    Contender,
    expect,
    flush,
    machine_line,
    parse_args,
    print_rows,
    take_turns,
)

from easycore.common.parallel import Queue as EasyQueue
from easycore.torch.parallel import Queue as EasyTorchQueue

BIG = 1 << 20  # float64 / 2 x float32 elements: 8 MiB per item


def _make(kind: str, i: int) -> Any:
    if kind == "numpy":
        return np.full(BIG, i, dtype=np.float64)  # 8 MiB
    if kind == "torch":
        return torch.full((2 * BIG,), float(i))  # 8 MiB
    return (i, "tiny", 1.5)


def _producer(q: Any, commands: Any) -> None:
    torch.set_num_threads(1)
    while True:
        job = commands.recv()
        if job is None:
            return
        n, kind = job
        for i in range(n):
            q.put(_make(kind, i))


class Stream:
    """A long-lived producer process feeding one queue."""

    def __init__(self, ctx: Any, q: Any) -> None:
        self.q = q
        self.commands, theirs = ctx.Pipe()
        self.proc = ctx.Process(target=_producer, args=(q, theirs), daemon=True)
        self.proc.start()

    def take(self, n: int, kind: str) -> float:
        self.commands.send((n, kind))
        total = 0.0
        for _ in range(n):
            item = self.q.get(timeout=300)
            total += float(item[0])  # read one element
            del item
        return total

    def close(self) -> None:
        self.commands.send(None)
        self.proc.join(60)
        if hasattr(self.q, "close"):
            self.q.close()


def main() -> None:
    cfg = parse_args(__doc__)
    rounds = cfg.rounds or (3 if cfg.quick else 5)
    only = set(cfg.only.split(",")) if cfg.only else {"big", "tiny"}
    print(machine_line())
    ctx = multiprocessing.get_context("fork")
    tctx = tmp.get_context("fork")
    streams: Dict[str, Stream] = {
        "easycore.common.parallel.Queue": Stream(ctx, EasyQueue(maxsize=8)),
        "easycore.torch.parallel.Queue": Stream(ctx, EasyTorchQueue(maxsize=8)),
        "multiprocessing.Queue": Stream(ctx, ctx.Queue(maxsize=8)),
        "torch.multiprocessing.Queue": Stream(tctx, tctx.Queue(maxsize=8)),
    }
    kinds = {"easycore.common.parallel.Queue": "numpy", "easycore.torch.parallel.Queue": "torch",
             "multiprocessing.Queue": "numpy", "torch.multiprocessing.Queue": "torch"}
    try:
        if "big" in only:
            n = 40 if cfg.quick else 100
            want = float(sum(range(n)))
            contenders = [Contender(f"{name} ({kinds[name]}, 8 MiB)",
                                    lambda s=s, k=kinds[name]: s.take(n, k), expect(want))
                          for name, s in streams.items()]
            got = take_turns(contenders, rounds)
            print_rows("8 MiB items, fresh per item (producer process -> caller)", got,
                       contenders[2].name, n, "items", nbytes=8 << 20)
            flush()
        if "tiny" in only:
            n = 2000 if cfg.quick else 10000
            want = float(sum(range(n)))
            contenders = [Contender(f"{name} (tiny tuples)",
                                    lambda s=s: s.take(n, "tiny"), expect(want))
                          for name, s in streams.items()]
            got = take_turns(contenders, rounds)
            print_rows("tiny items (producer process -> caller)", got, contenders[2].name, n,
                       "items")
            flush()
    finally:
        for s in streams.values():
            s.close()


if __name__ == "__main__":
    main()
