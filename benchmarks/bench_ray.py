"""Benchmark the runners' Ray back-end beside the process back-end, in the same run.

Same runner classes, same workloads, two workers each; only ``backend=`` changes:

1. tiny items: 50,000 ``x * x`` summed by the consumer (per-item overhead, chunking);
2. big results: 50 NumPy arrays of 8 MB each (shared memory vs Ray's object store,
   both handing the consumer views without a copy).

Plus the cost of starting a runner (its workers / actors, ``producer_init`` done;
``ray.init`` is measured on its own). Ray runs locally on loopback, 2 CPUs.

Run: ``scripts/bench ray`` or ``python benchmarks/bench_ray.py [--repeat N]``.
"""

import argparse
import os
import time

# Ray's processes take their node address from this: keep everything on 127.0.0.1.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import numpy as np

from easycore.common.parallel import UnorderedRunner

TINY_ITEMS = 50_000
ARRAYS, ARRAY_BYTES = 50, 8 << 20


class Squares(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return data * data

    @staticmethod
    def consumer_init(cfg):
        cfg.acc = [0]

    @staticmethod
    def consumer_work(cfg, data):
        cfg.acc[0] += data

    @staticmethod
    def consumer_end(cfg):
        return cfg.acc[0]


class Arrays(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return np.full(ARRAY_BYTES // 8, data, dtype=np.float64)

    @staticmethod
    def consumer_init(cfg):
        cfg.acc = [0.0]

    @staticmethod
    def consumer_work(cfg, data):
        cfg.acc[0] += data[-1]  # a view: touch it, do not copy it

    @staticmethod
    def consumer_end(cfg):
        return cfg.acc[0]


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(backend, repeat):
    out = {}
    start = time.perf_counter()
    runner = Squares(devices=2, backend=backend)
    out["start"] = time.perf_counter() - start
    with runner:
        expected = sum(i * i for i in range(TINY_ITEMS))
        assert runner(range(TINY_ITEMS)) == expected  # warm-up: chunk sizes settle
        out["tiny"] = TINY_ITEMS / best(lambda: runner(range(TINY_ITEMS)), repeat)
    with Arrays(devices=2, backend=backend) as runner:
        assert runner(range(ARRAYS)) == sum(range(ARRAYS))
        seconds = best(lambda: runner(range(ARRAYS)), repeat)
        out["big"] = ARRAYS * ARRAY_BYTES / seconds / 1e6
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per workload (best kept)")
    args = parser.parse_args()
    import ray

    start = time.perf_counter()
    ray.init(address="local", num_cpus=2, include_dashboard=False,
             _node_ip_address="127.0.0.1", log_to_driver=False)
    ray_init = time.perf_counter() - start
    try:
        results = {backend: measure(backend, args.repeat) for backend in ("process", "ray")}
    finally:
        ray.shutdown()

    p, r = results["process"], results["ray"]
    print(f"2 workers each; best of {args.repeat}; ray.init itself took {ray_init:.1f} s")
    print(f"{'workload':<34}{'process':>14}{'ray':>14}{'ray/process':>13}")
    rows = [
        (f"{TINY_ITEMS:,} x*x (items/s)", p["tiny"], r["tiny"], "{:,.0f}"),
        (f"{ARRAYS} x 8 MB arrays (MB/s)", p["big"], r["big"], "{:,.0f}"),
        ("runner start (s, lower is better)", p["start"], r["start"], "{:.2f}"),
    ]
    for name, a, b, fmt in rows:
        print(f"{name:<34}{fmt.format(a):>14}{fmt.format(b):>14}{b / a:>12.2f}x")


if __name__ == "__main__":
    main()
