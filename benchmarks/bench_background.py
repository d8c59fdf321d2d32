"""Benchmark easycore.torch.parallel.BackgroundTask against torch's DataLoader.

The training-loop prefetch pattern: two workers make batches while the main
loop consumes them. Each call returns a *fresh* 8 MiB float32 tensor (a new
object every time: torch re-sends an already-shared storage by handle, so a
worker returning the same tensor again would make ``DataLoader`` look like
10 GB/s). The main loop reads one element of each batch. Measured in this
run, taking turns, best of ``REPEAT``:

* ``easycore.torch.parallel.BackgroundTask(make_batch, workers=2, prefetch=2)``:
  results through recycled shared-memory segments;
* ``torch.utils.data.DataLoader(num_workers=2, persistent_workers=True,
  prefetch_factor=2, batch_size=None)`` over a map-style data set whose items
  are the same fresh tensors: torch moves each one into a new shared-memory
  file and passes its descriptor.

Two numbers each:

* **throughput**: ``ITEMS`` batches from a stream that is already running
  (one long-lived task, one long-lived ``DataLoader`` iterator), so both
  measure the steady state; goal: easycore at least 2x;
* **time to the first batch**: from construction (``BackgroundTask(...)``;
  ``iter(DataLoader(...))``) to the first batch in hand, workers started by
  ``fork`` on both sides; goal: no worse.

Run: ``scripts/bench background`` or ``python benchmarks/bench_background.py`` (about 30 s).
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from typing import Callable, Dict, List

import torch
from torch.utils.data import DataLoader, Dataset

from easycore.torch.parallel import BackgroundTask

ELEMENTS = 2 << 20  # float32: 8 MiB per batch
ITEMS = 100  # batches per throughput measurement
REPEAT = 5  # best of, taking turns
STARTS = 7  # time-to-first-batch measurements per contender
WORKERS = 2
PREFETCH = 2


def make_batch(fill: float = 1.0) -> torch.Tensor:
    """A fresh tensor per call, as augmentation makes one."""
    return torch.full((ELEMENTS,), fill)


class Batches(Dataset):
    """The same batches for DataLoader: item k is a fresh tensor."""

    def __len__(self) -> int:
        return 1 << 40  # endless in practice: one iterator serves every measurement

    def __getitem__(self, index: int) -> torch.Tensor:
        return make_batch()


def loader() -> DataLoader:
    return DataLoader(Batches(), num_workers=WORKERS, persistent_workers=True,
                      prefetch_factor=PREFETCH, batch_size=None,
                      multiprocessing_context="fork")


def consume(next_batch: Callable[[], torch.Tensor], n: int) -> float:
    """Seconds to take ``n`` batches, reading one element of each (the main loop)."""
    start = time.perf_counter()
    for _ in range(n):
        batch = next_batch()
        assert batch.shape == (ELEMENTS,) and batch[-1].item() == 1.0
        del batch
    return time.perf_counter() - start


def bench_throughput() -> Dict[str, float]:
    """Best seconds for ITEMS batches of each contender, taking turns."""
    best = {"easycore": float("inf"), "dataloader": float("inf")}
    with BackgroundTask(make_batch, workers=WORKERS, prefetch=PREFETCH,
                        start_method="fork") as task:
        stream = iter(loader())
        try:
            consume(task.get, 2 * WORKERS * PREFETCH)  # warm: segments exist
            consume(lambda: next(stream), 2 * WORKERS * PREFETCH)
            for _ in range(REPEAT):
                best["easycore"] = min(best["easycore"], consume(task.get, ITEMS))
                best["dataloader"] = min(best["dataloader"],
                                         consume(lambda: next(stream), ITEMS))
        finally:
            stream._shutdown_workers()  # persistent workers: end them now, not at exit
    return best


def first_batch_easycore() -> float:
    start = time.perf_counter()
    with BackgroundTask(make_batch, workers=WORKERS, prefetch=PREFETCH,
                        start_method="fork") as task:
        task.get()
        return time.perf_counter() - start


def first_batch_dataloader() -> float:
    start = time.perf_counter()
    stream = iter(loader())
    try:
        next(stream)
        return time.perf_counter() - start
    finally:
        stream._shutdown_workers()


def bench_first_batch() -> Dict[str, List[float]]:
    times: Dict[str, List[float]] = {"easycore": [], "dataloader": []}
    for _ in range(STARTS):
        times["easycore"].append(first_batch_easycore())
        times["dataloader"].append(first_batch_dataloader())
    return times


def main() -> None:
    torch.set_num_threads(1)  # the main loop's share; the workers have one thread each
    print(f"Python {sys.version.split()[0]}, torch {torch.__version__}, "
          f"{platform.machine()}, {torch.get_num_threads()} main-loop thread")
    mib = ELEMENTS * 4 / (1 << 20)
    best = bench_throughput()
    print(f"\n(1) throughput: {ITEMS} fresh {mib:.0f} MiB tensors from {WORKERS} workers, "
          f"prefetch {PREFETCH}, best of {REPEAT} taking turns")
    names = {"easycore": "easycore.torch.parallel.BackgroundTask",
             "dataloader": "torch DataLoader (persistent workers)"}
    for key, name in names.items():
        rate = ITEMS / best[key]
        print(f"    {name:42s} {rate:8.1f} batches/s {rate * mib / 1024:6.2f} GiB/s")
    ratio = best["dataloader"] / best["easycore"]
    verdict = "met" if ratio >= 2.0 else "NOT met in this run (a shared machine is noisy: rerun)"
    print(f"    goal: at least 2x DataLoader's throughput: {ratio:.2f}x, {verdict}")

    starts = bench_first_batch()
    print(f"\n(2) time to the first batch (construction to batch in hand, fork), "
          f"{STARTS} runs taking turns")
    for key, name in names.items():
        t = starts[key]
        print(f"    {name:42s} best {min(t) * 1e3:7.1f} ms  median "
              f"{statistics.median(t) * 1e3:7.1f} ms")
    first = min(starts["dataloader"]) / min(starts["easycore"])
    median = statistics.median(starts["dataloader"]) / statistics.median(starts["easycore"])
    verdict = "met" if first >= 1.0 else "NOT met in this run (a shared machine is noisy: rerun)"
    print(f"    goal: no slower than DataLoader: DataLoader / easycore = {first:.2f}x best, "
          f"{median:.2f}x median, {verdict}")


if __name__ == "__main__":
    main()
