"""easycore-parallel against its peers, measured in the same run.

Two workloads on 2 workers:

* 200,000 tiny items (``x * x``, summed by the consumer): what per-item
  overhead costs. Peers: ``multiprocessing.Pool.imap(chunksize=256)``, mpire,
  joblib.
* 100 NumPy arrays of 8 MB returned by the workers: what moving results
  costs. The workers return an array they already hold, so the numbers are the
  transport's (easycore: shared memory; the peers: pickles through pipes).

Each contender runs a few times; the best time counts. Ratios compare
throughput with Pool's in this same run (above 1.00x: faster than Pool).
mpire and joblib are optional ("n/a" when not installed).

Run: ``scripts/bench parallel`` or ``python benchmarks/bench_parallel.py``.
"""

from __future__ import annotations

import multiprocessing
import platform
import sys
import time

import numpy as np

from easycore.common.parallel import OrderedRunner, UnorderedRunner

WORKERS = 2
N_TINY = 200_000
N_ARRAYS = 100
ARRAY_ELEMS = 1 << 20  # float64: 8 MB
REPEAT_TINY = 3
REPEAT_BIG = 2


# ----------------------------------------------------------- peer functions
def square(x):
    return x * x


_ARRAY = None


def big_array(_):
    global _ARRAY
    if _ARRAY is None:
        _ARRAY = np.ones(ARRAY_ELEMS)
    return _ARRAY


# ---------------------------------------------------------- easycore runners
class SumSquares(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return data * data

    @staticmethod
    def consumer_init(cfg):
        cfg.acc = [0]  # a list cell: CfgNode attribute assignment costs ~1.5 us

    @staticmethod
    def consumer_work(cfg, data):
        cfg.acc[0] += data

    @staticmethod
    def consumer_end(cfg):
        return cfg.acc[0]


class SumSquaresOrdered(OrderedRunner):
    producer_work = SumSquares.producer_work
    consumer_init = SumSquares.consumer_init
    consumer_work = SumSquares.consumer_work
    consumer_end = SumSquares.consumer_end


class TutorialSum(UnorderedRunner):
    """Tutorial example 1 exactly: ``cfg.sum += data`` per item."""

    producer_work = SumSquares.producer_work

    @staticmethod
    def consumer_init(cfg):
        cfg.sum = 0

    @staticmethod
    def consumer_work(cfg, data):
        cfg.sum += data

    @staticmethod
    def consumer_end(cfg):
        return cfg.sum


class BigArrays(UnorderedRunner):
    @staticmethod
    def producer_init(device, cfg):
        cfg.array = np.ones(ARRAY_ELEMS)

    @staticmethod
    def producer_work(device, cfg, data):
        return cfg.array

    @staticmethod
    def consumer_init(cfg):
        cfg.acc = [0.0]

    @staticmethod
    def consumer_work(cfg, data):
        cfg.acc[0] += float(data[0])

    @staticmethod
    def consumer_end(cfg):
        return cfg.acc[0]


# -------------------------------------------------------------- measurement
def best_of(repeat, run, expected):
    """Best wall time of ``run()`` over ``repeat`` runs; checks the result."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        result = run()
        elapsed = time.perf_counter() - start
        if result != expected:
            raise AssertionError(f"wrong result {result!r}, expected {expected!r}")
        best = min(best, elapsed)
    return best


def sum_first(arrays):
    return sum(float(a[0]) for a in arrays)


def tiny_contenders():
    expected = sum(x * x for x in range(N_TINY))
    rows = []

    with multiprocessing.Pool(WORKERS) as pool:
        sum(pool.imap(square, range(1000), chunksize=256))  # warm up
        rows.append((
            "multiprocessing.Pool.imap(chunksize=256)",
            best_of(REPEAT_TINY, lambda: sum(pool.imap(square, range(N_TINY), chunksize=256)),
                    expected),
        ))

    for label, cls in [
        ("easycore UnorderedRunner", SumSquares),
        ("easycore OrderedRunner", SumSquaresOrdered),
        ("easycore, tutorial consumer (cfg.sum += x)", TutorialSum),
    ]:
        with cls(WORKERS) as runner:
            runner(range(1000))
            rows.append((label, best_of(REPEAT_TINY, lambda: runner(range(N_TINY)), expected)))

    try:
        from mpire import WorkerPool
    except ImportError:
        rows.append(("mpire WorkerPool.imap", None))
    else:
        with WorkerPool(n_jobs=WORKERS) as pool:
            rows.append((
                "mpire WorkerPool.imap",
                best_of(REPEAT_TINY, lambda: sum(pool.imap(square, range(N_TINY))), expected),
            ))

    try:
        from joblib import Parallel, delayed
    except ImportError:
        rows.append(('joblib Parallel(batch_size="auto")', None))
    else:
        with Parallel(n_jobs=WORKERS, batch_size="auto") as parallel:
            rows.append((
                'joblib Parallel(batch_size="auto")',
                best_of(1, lambda: sum(parallel(delayed(square)(x) for x in range(N_TINY))),
                        expected),
            ))
    return rows


def big_contenders():
    expected = float(N_ARRAYS)
    rows = []

    with multiprocessing.Pool(WORKERS) as pool:
        sum_first(pool.imap(big_array, range(WORKERS * 2)))  # warm up: arrays made
        rows.append((
            "multiprocessing.Pool.imap (pickled through a pipe)",
            best_of(REPEAT_BIG, lambda: sum_first(pool.imap(big_array, range(N_ARRAYS))),
                    expected),
        ))

    with BigArrays(WORKERS) as runner:
        runner(range(WORKERS * 4))
        rows.append((
            "easycore UnorderedRunner (shared memory)",
            best_of(REPEAT_BIG, lambda: runner(range(N_ARRAYS)), expected),
        ))

    try:
        from mpire import WorkerPool
    except ImportError:
        rows.append(("mpire WorkerPool.imap", None))
    else:
        with WorkerPool(n_jobs=WORKERS) as pool:
            rows.append((
                "mpire WorkerPool.imap",
                best_of(REPEAT_BIG, lambda: sum_first(pool.imap(big_array, range(N_ARRAYS))),
                        expected),
            ))

    try:
        from joblib import Parallel, delayed
    except ImportError:
        rows.append(("joblib Parallel", None))
    else:
        with Parallel(n_jobs=WORKERS) as parallel:
            rows.append((
                "joblib Parallel",
                best_of(REPEAT_BIG, lambda: sum_first(
                    parallel(delayed(big_array)(i) for i in range(N_ARRAYS))), expected),
            ))
    return rows


def print_table(title, unit, count, rows, nbytes=None):
    pool_time = rows[0][1]
    print(f"\n{title}")
    gb_head = f" {'GB/s':>9}" if nbytes else ""
    print(f"  {'contender':<52} {unit + '/s':>12}{gb_head} {'time':>9} {'vs Pool':>8}")
    for label, seconds in rows:
        if seconds is None:
            gb = f" {'n/a':>9}" if nbytes else ""
            print(f"  {label:<52} {'n/a':>12}{gb} {'n/a':>9} {'n/a':>8}")
            continue
        rate = count / seconds
        gb = f" {count * nbytes / seconds / 1e9:>9.2f}" if nbytes else ""
        print(f"  {label:<52} {rate:>12,.0f}{gb} {seconds:>8.3f}s {pool_time / seconds:>7.2f}x")


def main():
    print("easycore-parallel benchmark")
    print(f"  Python {platform.python_version()} on {platform.system()}, "
          f"{multiprocessing.cpu_count()} CPUs, {WORKERS} workers, "
          f"start method {multiprocessing.get_start_method()}; best of "
          f"{REPEAT_TINY} (tiny) / {REPEAT_BIG} (arrays) runs")
    start = time.perf_counter()
    print_table(f"{N_TINY:,} tiny items (x*x, summed)", "items", N_TINY, tiny_contenders())
    print_table(f"{N_ARRAYS} NumPy arrays of {ARRAY_ELEMS * 8 >> 20} MB returned by workers",
                "arrays", N_ARRAYS, big_contenders(), nbytes=ARRAY_ELEMS * 8)
    print(f"\n(vs Pool: throughput relative to Pool.imap in this run; "
          f"total {time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
