"""Private memory per worker reading a list of small dicts: plain list, detectron2's, SharedList.

The data set: ``--n`` small dicts (400,000 by default; a detection data set's
records: file name, image id, height, width). Two workers each read every item
once, by index, then each worker's *private* memory is measured (``psutil``'s
USS: pages no other process shares), and the mean per worker is reported.

Readers, under ``fork`` and under ``spawn``:

* ``multiprocessing.Pool(2)``: under fork the data is a module global the
  workers inherit; under spawn it is the pool's initializer argument (what the
  multiprocessing docs recommend for data every task needs): one copy per
  worker. A barrier makes each of the two tasks run on its own worker.
* ``torch DataLoader(num_workers=2)`` (when torch is installed), the data set
  given as it is; a batch sampler hands every batch to both workers, and the
  collate function returns only a checksum.

Data sets, each read by both readers:

* ``plain list``: the peer (copy-on-read under fork; a copy per worker under spawn);
* ``detectron2 serialised``: the anchor, detectron2's ``DatasetFromList(...,
  serialize=True)`` (its NumPy-serialised list: each item pickled, the bytes
  concatenated in one ``np.uint8`` array beside an ``int64`` array of end
  offsets), written inline below;
* ``SharedList``: ``easycore.common.parallel.SharedList``.

``MB/worker`` is the worker's whole USS, ``vs plain`` its share of the plain
list's (same reader and start method). ``data MB`` is the USS minus that of
the same reader over a one-item list (the interpreter and its imports, about
20 MB for a spawned Pool worker and 150 MB for a spawned DataLoader worker,
which imports torch; measured in this run): what the data costs a worker;
its ``vs plain`` compares that with the plain list's. ``items/s`` is each worker's read rate (timed
in the worker, start-up excluded), the mean of the two. Also printed: the
time to build each data set from the list, against ``pickle.dumps(list)``.

Goal: SharedList's data MB at most 10 % of the plain list's, under fork and
spawn, for both readers (the whole worker's share is printed beside it).

Run: ``scripts/bench shared_list`` or
``python benchmarks/bench_shared_list.py [--quick] [--n 400000] [--rounds 2]``.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import sys
import time
from typing import Any, Callable, Dict, List, NamedTuple, Tuple

import numpy as np
import psutil
from _harness import flush, machine_line, parse_args

from easycore.common.parallel import SharedList

WORKERS = 2
BATCH = 1000  # DataLoader: indices per batch


def make_items(n: int) -> List[dict]:
    return [{"file_name": f"datasets/coco/train2017/{i:012d}.jpg", "image_id": i,
             "height": 480, "width": 640} for i in range(n)]


def python_size(items: List[dict]) -> int:
    """The list's own objects (keys are interned, shared by all dicts)."""
    return sys.getsizeof(items) + sum(
        sys.getsizeof(d) + sum(sys.getsizeof(v) for v in d.values()) for d in items)


# ------------------------------------------------------------ the anchor
class DetectronList:
    """detectron2's serialised list: ``detectron2/data/common.py``, ``DatasetFromList``
    with ``serialize=True`` (its ``_serialize`` / ``NumpySerializedList``), trimmed to
    the storage: items pickled one by one into a NumPy byte array plus end offsets,
    so that forked workers read bytes without reference counts. Under spawn, both
    arrays are pickled into each worker."""

    def __init__(self, lst: List[Any]) -> None:
        def _serialize(data: Any) -> np.ndarray:
            buffer = pickle.dumps(data, protocol=-1)
            return np.frombuffer(buffer, dtype=np.uint8)

        serialized = [_serialize(x) for x in lst]
        self._addr = np.cumsum(np.asarray([len(x) for x in serialized], dtype=np.int64))
        self._lst = np.concatenate(serialized)

    def __len__(self) -> int:
        return len(self._addr)

    def __getitem__(self, idx: int) -> Any:
        start_addr = 0 if idx == 0 else self._addr[idx - 1].item()
        end_addr = self._addr[idx].item()
        return pickle.loads(memoryview(self._lst[start_addr:end_addr]))


# ------------------------------------------------------------ in the workers
_DATA: Any = None
_BARRIER: Any = None


def _init(data: Any, barrier: Any) -> None:
    global _DATA, _BARRIER
    if data is not None:  # spawn: the initializer's argument; fork: inherited
        _DATA = data
    _BARRIER = barrier


def read_all(_: int) -> Tuple[int, int, float]:
    """Read every item by index: (pid, checksum, seconds)."""
    _BARRIER.wait(300)  # both tasks at once: one per worker
    data = _DATA
    start = time.perf_counter()
    total = 0
    for i in range(len(data)):
        total += _use(data[i])
    return os.getpid(), total, time.perf_counter() - start


def _use(item: dict) -> int:
    """What a mapper does with a record: reads its fields (the checksum is the id)."""
    return item["image_id"] if item["file_name"] and item["height"] < item["width"] else -1


def checksum(batch: List[dict]) -> Tuple[int, int, int, float]:
    """DataLoader's collate: (worker id, items, checksum, when), not the items."""
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    return (-1 if info is None else info.id, len(batch),
            sum(_use(item) for item in batch), time.perf_counter())


class EveryBatchTwice:
    """A batch sampler: every batch twice in a row; batches alternate between
    the two workers, so each worker reads every item."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        for start in range(0, self.n, BATCH):
            batch = list(range(start, min(start + BATCH, self.n)))
            yield batch
            yield batch

    def __len__(self) -> int:
        return 2 * -(-self.n // BATCH)


# ------------------------------------------------------------ in the caller
class Run(NamedTuple):
    uss: List[int]  # per worker, bytes
    rate: float  # items/s per worker, the mean


def uss(pids: List[int]) -> List[int]:
    return [psutil.Process(pid).memory_full_info().uss for pid in pids]


def pool_run(data: Any, method: str) -> Run:
    global _DATA
    ctx = multiprocessing.get_context(method)
    barrier = ctx.Barrier(WORKERS)
    if method == "fork":
        _DATA = data  # inherited
    pool = ctx.Pool(WORKERS, initializer=_init,
                    initargs=(None if method == "fork" else data, barrier))
    try:
        out = pool.map(read_all, range(WORKERS), chunksize=1)
        expected = len(data) * (len(data) - 1) // 2
        assert all(total == expected for _, total, _ in out), out
        pids = [pid for pid, _, _ in out]
        assert len(set(pids)) == WORKERS, pids
        sizes = uss(pids)
        rate = sum(len(data) / seconds for _, _, seconds in out) / WORKERS
    finally:
        pool.terminate()
        pool.join()
        _DATA = None
    return Run(sizes, rate)


def loader_run(data: Any, method: str) -> Run:
    from torch.utils.data import DataLoader

    loader = DataLoader(data, batch_sampler=EveryBatchTwice(len(data)), num_workers=WORKERS,
                        collate_fn=checksum, multiprocessing_context=method,
                        persistent_workers=True)
    stream = iter(loader)
    try:
        seen: Dict[int, List[Tuple[int, int, float]]] = {}
        for worker, count, total, when in stream:
            seen.setdefault(worker, []).append((count, total, when))
        expected = len(data) * (len(data) - 1) // 2
        assert sorted(seen) == list(range(WORKERS)), sorted(seen)
        rates = []
        for batches in seen.values():
            assert sum(t for _, t, _ in batches) == expected
            assert sum(c for c, _, _ in batches) == len(data)
            # from the end of the first batch to the end of the last: start-up excluded
            spent = batches[-1][2] - batches[0][2]
            rates.append(sum(c for c, _, _ in batches[1:]) / spent if spent > 0 else 0.0)
        sizes = uss([w.pid for w in stream._workers])  # type: ignore[attr-defined]
    finally:
        stream._shutdown_workers()  # type: ignore[attr-defined]
    return Run(sizes, sum(rates) / len(rates))


def best_time(make: Callable[[], Any], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        gc.collect()
        start = time.perf_counter()
        made = make()
        times.append(time.perf_counter() - start)
        if isinstance(made, SharedList):
            made.close()
        del made
    return min(times)


def main() -> None:
    args = parse_args(__doc__, lambda p: p.add_argument("--n", type=int, default=None))
    n = args.n or (100_000 if args.quick else 400_000)
    rounds = args.rounds or (1 if args.quick else 2)
    print(machine_line())
    items = make_items(n)
    size = python_size(items)
    try:
        import torch  # noqa: F401

        readers: Dict[str, Callable[[Any, str], Run]] = {
            "multiprocessing.Pool": pool_run, "torch DataLoader": loader_run}
    except ImportError:
        readers = {"multiprocessing.Pool": pool_run}
        print("torch is not installed: no DataLoader rows")

    # building: one pass over the list each
    build = {
        "pickle.dumps(list) (peer)": best_time(lambda: pickle.dumps(items, protocol=5), rounds),
        "detectron2 serialised": best_time(lambda: DetectronList(items), rounds),
        "SharedList(list)": best_time(lambda: SharedList(items), rounds),
    }
    print(f"\nbuilding from the list of {n:,} dicts ({size / 2**20:.0f} MB as Python objects); "
          f"best of {rounds}")
    peer = build["pickle.dumps(list) (peer)"]
    for name, seconds in build.items():
        print(f"  {name:<30} {seconds:>7.3f} s  {seconds / peer:>5.2f}x the peer's time")
    flush()

    one = make_items(1)
    anchor = DetectronList(items)
    shared = SharedList(items)
    print(f"  serialised: detectron2 {anchor._lst.nbytes / 2**20:.1f} MB, "
          f"SharedList {shared.nbytes / 2**20:.1f} MB in shared memory")
    datasets: Dict[str, Callable[[], Any]] = {
        "empty (1 item)": lambda: one,
        "plain list (peer)": lambda: items,
        "detectron2 serialised (anchor)": lambda: anchor,
        "SharedList": lambda: shared,
    }
    keys = [(reader, method, data) for reader in readers for method in ("fork", "spawn")
            for data in datasets]
    got: Dict[Tuple[str, str, str], List[Run]] = {k: [] for k in keys}
    try:
        for r in range(rounds):
            order = keys[r % len(keys):] + keys[: r % len(keys)]
            for reader, method, data in order:
                gc.collect()
                got[(reader, method, data)].append(readers[reader](datasets[data](), method))
                print(".", end="")
                flush()
    finally:
        shared.close()
    print(f"\n\nprivate memory (USS) per worker after each of {WORKERS} workers read all "
          f"{n:,} dicts; best of {rounds}")
    print(f"  {'reader':<21} {'start':<6} {'data set':<31} {'MB/worker':>9} {'vs plain':>8} "
          f"{'data MB':>8} {'vs plain':>8} {'items/s':>10}")
    verdicts = []
    for reader in readers:
        for method in ("fork", "spawn"):
            base = _best(got[(reader, method, "empty (1 item)")])
            whole = _best(got[(reader, method, "plain list (peer)")])
            plain = whole - base
            for data in datasets:
                runs = got[(reader, method, data)]
                mem = _best(runs)
                net = mem - base
                rate = max(run.rate for run in runs)
                ratio = ("" if data.startswith("empty") else "(peer)" if data.startswith(
                    "plain") else f"{net / plain * 100:.1f}%")
                raw = "(peer)" if data.startswith("plain") else f"{mem / whole * 100:.1f}%"
                net_text = "" if data.startswith("empty") else f"{net / 2**20:8.1f}"
                rate_text = "" if data.startswith("empty") else f"{rate:10,.0f}"
                print(f"  {reader:<21} {method:<6} {data:<31} {mem / 2**20:>9.1f} {raw:>8} "
                      f"{net_text:>8} {ratio:>8} {rate_text:>10}")
                if data == "SharedList":
                    verdicts.append((f"{reader}, {method}", net / plain, mem / whole))
    for label, ratio, raw_ratio in verdicts:
        verdict = "met" if ratio <= 0.10 else "NOT met"
        print(f"  goal: SharedList at most 10% of the plain list's data MB ({label}): "
              f"{ratio * 100:.1f}%, {verdict} (whole worker: {raw_ratio * 100:.1f}%)")


def _best(runs: List[Run]) -> float:
    """The lowest mean USS per worker over the rounds."""
    return min(sum(run.uss) / len(run.uss) for run in runs)


if __name__ == "__main__":
    main()
