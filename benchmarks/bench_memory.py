"""Private memory per worker: a big read-only target, and the caller's Python objects.

Sections (``--only NAME,...``; default: both):

* ``target``: elektronn2's pattern: ``BackgroundTask(D.getbatch)`` where
  ``D`` holds a big read-only data set (here one NumPy array of ``--mb`` MB,
  200 by default). Each contender runs 2 workers, takes ``CALLS`` results
  (every worker has worked: each call reads random rows of the data set),
  then measures each worker's *private* memory (``psutil``'s USS: pages no
  other process shares) and reports the mean per worker, also as a share of
  the object:

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
* ``objects``: the caller makes fresh Python objects every round (300,000
  small dicts, 100,000 with ``--quick``: ``{"id": i, "tags": [i, str(i)]}``),
  then a ``fork`` pool of 2 workers; each worker runs one task that times a
  ``gc.collect()`` and reads its private memory (USS, ``_os.memory``: ``/proc``,
  Linux only) before and after it. A collection that visits the inherited
  objects writes their headers, and so copies their pages. Contenders, taking
  turns: ``multiprocessing.get_context("fork").Pool(2)`` (the peer) and
  easycore's ``Pool(2, start_method="fork")`` (its workers freeze what they
  start with, ``gc.freeze``). Shown: the median over the rounds of the mean
  growth per worker, the mean collection time, and the peer's growth over
  the contender's. Goal: easycore's worker copies at most 10 % of what the
  peer's copies.

Run: ``scripts/bench memory`` or
``python benchmarks/bench_memory.py [--quick] [--mb 200] [--only target,objects]``.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import psutil
from _harness import flush, goal, machine_line, parse_args

from easycore.common.parallel import BackgroundTask, Pool
from easycore.common.parallel import background as _background
from easycore.common.parallel._os import memory as _memory

WORKERS = 2
ROW = 1 << 16  # bytes per row: a batch is 16 random rows (1 MiB)
ROWS_PER_BATCH = 16
CALLS = 16
NAP = 0.2  # seconds a task waits before it measures: each worker takes one task


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


def section_target(args: argparse.Namespace) -> None:
    rounds = args.rounds or (2 if args.quick else 3)
    nbytes = args.mb << 20
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



def private_kb() -> int:
    """This process's private memory (USS, kB): the package's own reading of it."""
    reading = _memory.read(os.getpid(), unique=True)
    if reading is None or reading.uss is None:
        raise RuntimeError("this platform does not tell a process's private memory")
    return reading.uss // 1024


def collect_in_worker(_: int) -> Tuple[int, int, int, float]:
    """In a worker: (pid, private memory before and after a ``gc.collect()`` in kB, its ms)."""
    time.sleep(NAP)  # the other worker takes the other task meanwhile
    before = private_kb()
    start = time.perf_counter()
    gc.collect()
    elapsed = time.perf_counter() - start
    return os.getpid(), before, private_kb(), elapsed * 1e3


def collect_round(make_pool: Callable[[], Any], n: int) -> List[Tuple[int, int, int, float]]:
    """Fresh objects, then the pool (its workers inherit them); one result per worker."""
    objects = [{"id": i, "tags": [i, str(i)]} for i in range(n)]
    try:
        with make_pool() as pool:
            results = pool.map(collect_in_worker, range(WORKERS), 1)
    finally:
        del objects
    per_pid: Dict[int, Tuple[int, int, int, float]] = {}
    for result in results:
        per_pid.setdefault(result[0], result)  # a worker's first collection counts
    if len(per_pid) < WORKERS:
        print(f"  note: {WORKERS} tasks ran in {len(per_pid)} worker(s)")
    return list(per_pid.values())


def section_objects(args: argparse.Namespace) -> None:
    try:
        private_kb()
    except RuntimeError:
        print("\nobjects: skipped (no /proc/<pid>/smaps_rollup here: Linux only)")
        return
    rounds = args.rounds or (2 if args.quick else 3)
    n = 100_000 if args.quick else 300_000
    peer = "multiprocessing fork Pool(2) (peer)"
    contenders: List[Tuple[str, Callable[[], Any]]] = [
        (peer, lambda: multiprocessing.get_context("fork").Pool(WORKERS)),
        ("easycore Pool(2, start_method='fork')", lambda: Pool(WORKERS, start_method="fork")),
    ]
    growth: Dict[str, List[float]] = {name: [] for name, _ in contenders}  # MB, per round
    times: Dict[str, List[float]] = {name: [] for name, _ in contenders}  # ms, per worker
    for r in range(rounds):
        order = contenders[r % len(contenders):] + contenders[: r % len(contenders)]
        for name, make_pool in order:
            gc.collect()
            per_worker = collect_round(make_pool, n)
            gc.collect()
            growth[name].append(statistics.mean((a - b) / 1024 for _, b, a, _ in per_worker))
            times[name].extend(ms for *_, ms in per_worker)
            flush()
    print(f"\nprivate memory (USS) a gc.collect() adds per fork worker, {WORKERS} "
          f"workers, the caller holding {n:,} fresh small dicts; median of {rounds} rounds")
    print(f"  {'contender':<40} {'MB/worker':>10} {'collect ms':>11} {'peer/this':>10}")
    peer_mb = statistics.median(growth[peer])
    for name in growth:
        mb = statistics.median(growth[name])
        vs = "(peer)" if name == peer else f"{peer_mb / max(mb, 0.1):.1f}x"
        print(f"  {name:<40} {mb:>10.1f} {statistics.mean(times[name]):>11.1f} {vs:>10}")
    easy = statistics.median(growth["easycore Pool(2, start_method='fork')"])
    goal(f"easycore's worker copies at most 10% of the peer's ({easy:.1f} of "
         f"{peer_mb:.1f} MB; growth floored at 0.1 MB)", peer_mb / max(easy, 0.1), 10)


SECTIONS = {"target": section_target, "objects": section_objects}


def main() -> None:
    args = parse_args(__doc__, lambda p: p.add_argument("--mb", type=int, default=200))
    wanted = args.only.split(",") if args.only else list(SECTIONS)
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}; known: {sorted(SECTIONS)}")
    print(machine_line())
    for name in wanted:
        SECTIONS[name](args)


if __name__ == "__main__":
    sys.exit(main())
