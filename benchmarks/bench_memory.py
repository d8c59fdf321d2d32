"""Private memory per worker with a big read-only target: fork, spawn, and DataLoader.

elektronn2's pattern: ``BackgroundTask(D.getbatch)`` where ``D`` holds a big
read-only data set (here one NumPy array of ``--mb`` MB, 200 by default).
Each contender runs 2 workers, takes ``CALLS`` results (every worker has
worked: each call reads random rows of the data set), then measures each
worker's *private* memory (``psutil``'s USS: pages no other process shares)
and reports the mean per worker, also as a share of the object:

* ``BackgroundTask, fork``: the target is inherited (only a token travels);
* ``BackgroundTask, fork, target pickled``: the same with inheritance turned
  off, what every start method did before (the object unpickled into each
  worker): the *before* row, measured in this run;
* ``BackgroundTask, spawn``: a fresh interpreter per worker, the target
  pickled once into each (expected: about one object per worker);
* ``torch DataLoader(num_workers=2, fork)``: the peer (workers inherit the
  data set), when torch is installed.

Contenders take turns over ``--rounds`` rounds; the lowest mean counts, and
the spread of the rounds is shown. Every result is checked (the sum of the
rows read). Goal: under ``fork``, at most 10 % of the object per worker.

Run: ``scripts/bench memory`` or ``python benchmarks/bench_memory.py [--quick] [--mb 200]``.
"""

from __future__ import annotations

import gc
from typing import Callable, Dict, List, Tuple

import numpy as np
import psutil
from _harness import flush, machine_line, parse_args

from easycore.common.parallel import BackgroundTask
from easycore.common.parallel import background as _background

WORKERS = 2
ROW = 1 << 16  # bytes per row: a batch is 16 random rows (1 MiB)
ROWS_PER_BATCH = 16
CALLS = 16


class Dataset:
    """A big read-only data set behind a bound method."""

    def __init__(self, nbytes: int) -> None:
        rows = max(ROWS_PER_BATCH, nbytes // ROW)
        self.data = np.ones((rows, ROW), dtype=np.uint8)  # written once: real pages

    def getbatch(self) -> int:
        index = np.random.randint(0, len(self.data), ROWS_PER_BATCH)
        return int(self.data[index].sum())  # reads (copies) 16 rows

    def __len__(self) -> int:
        return 1 << 40

    def __getitem__(self, index: int) -> int:
        return self.getbatch()


EXPECTED = ROWS_PER_BATCH * ROW  # every byte is 1


def uss(pids: List[int]) -> List[int]:
    return [psutil.Process(pid).memory_full_info().uss for pid in pids]


def background(data: Dataset, method: str, inherit: bool = True) -> List[int]:
    forked = _background.inherit.forked
    if not inherit:
        _background.inherit.forked = lambda backend: False  # type: ignore[assignment]
    try:
        with BackgroundTask(data.getbatch, workers=WORKERS, start_method=method) as task:
            for _ in range(CALLS):
                assert task.get(timeout=120) == EXPECTED
            return uss([p for p in task.worker_pids if p is not None])
    finally:
        _background.inherit.forked = forked  # type: ignore[assignment]


def dataloader(data: Dataset) -> List[int]:
    from torch.utils.data import DataLoader

    loader = DataLoader(data, num_workers=WORKERS, persistent_workers=True,  # type: ignore
                        batch_size=None, multiprocessing_context="fork", prefetch_factor=2)
    stream = iter(loader)
    try:
        for _ in range(CALLS):
            assert int(next(stream)) == EXPECTED
        return uss([w.pid for w in stream._workers])  # type: ignore[attr-defined]
    finally:
        stream._shutdown_workers()  # type: ignore[attr-defined]


def main() -> None:
    args = parse_args(__doc__, lambda p: p.add_argument("--mb", type=int, default=200))
    rounds = args.rounds or (2 if args.quick else 3)
    nbytes = args.mb << 20
    print(machine_line())
    data = Dataset(nbytes)
    obj = data.data.nbytes
    contenders: List[Tuple[str, Callable[[], List[int]]]] = [
        ("BackgroundTask, fork (inherited)", lambda: background(data, "fork")),
        ("BackgroundTask, fork, target pickled (before)",
         lambda: background(data, "fork", inherit=False)),
        ("BackgroundTask, spawn (pickled once per worker)", lambda: background(data, "spawn")),
    ]
    try:
        import torch  # noqa: F401

        contenders.append(("torch DataLoader(num_workers=2, fork)", lambda: dataloader(data)))
    except ImportError:
        pass
    got: Dict[str, List[float]] = {name: [] for name, _ in contenders}
    for r in range(rounds):
        order = contenders[r % len(contenders):] + contenders[: r % len(contenders)]
        for name, run in order:
            gc.collect()
            per_worker = run()
            got[name].append(sum(per_worker) / len(per_worker))
            flush()
    print(f"\nprivate memory (USS) per worker, {WORKERS} workers, a {obj / 2**20:.0f} MB "
          f"read-only target behind a bound method, {CALLS} calls; best of {rounds} rounds")
    print(f"  {'contender':<50} {'MB/worker':>10} {'of object':>10} {'spread':>7}")
    for name, values in got.items():
        best = min(values)
        spread = max(values) / best - 1 if best else 0.0
        print(f"  {name:<50} {best / 2**20:>10.1f} {best / obj * 100:>9.1f}% "
              f"{spread * 100:>6.0f}%")
    fork = min(got["BackgroundTask, fork (inherited)"]) / obj
    verdict = "met" if fork <= 0.10 else "NOT met"
    print(f"  goal: under fork at most 10% of the object per worker: {fork * 100:.1f}%, {verdict}")


if __name__ == "__main__":
    main()
