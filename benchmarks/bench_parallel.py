"""easycore-parallel's runners against ``multiprocessing.Pool``, measured in the same run.

Sections (``--only NAME,...``), each contender taking turns with its peer,
best of the rounds with the spread of the rounds, every result checked:

* ``arrays``: fresh 8 MB NumPy arrays (a new array per item, never the same
  object twice: ``np.empty`` and the item written on every 4 KiB page), as
  **inputs** (made by a generator in the caller, checked by the worker) and
  as **results** (made by the worker, checked by the consumer); the check
  reads the number on every page. Peer: ``Pool.imap`` (pickles through a pipe).
  Goals: inputs at least 5x ``Pool.imap``, and within 2x of the results.
* ``cpu``: items of ~1 ms of pure Python each, at 1, 2, 4, 8 and
  ``cpu_count`` workers. Peer: ``Pool.imap_unordered(chunksize=8)`` whose
  caller runs the tutorial's consumer hooks (``consumer_init``, then
  ``consumer_work(cfg, r)`` -- ``cfg.sum += data`` on a ``CfgNode`` -- per
  result), as the runner does: the tutorial's hook on both sides, so the
  ratio is the engines'. A second Pool row sums into a local variable (the
  cheapest caller loop, for information), and a second runner row consumes
  with ``consumer_work_batch``. Goal: at least 1.0x at every count.
* ``tiny``: ``x * x`` for 400,000 items, the same way; peer
  ``Pool.imap_unordered(chunksize=256)``. Goal: at least 1.0x at every count.
* ``latency``: a kept-alive runner called with 1 and with 10 items, against
  ``Pool.apply`` and ``Pool.map`` on the same inputs. Goal: faster.
* ``startup``: a runner's start until its first result, and its close, and
  easycore's ``Pool(n)`` until its first ``apply``, against a
  ``multiprocessing.Pool``'s. Goals at 2 workers: each at most 1.5x its time.
* ``insights``: the same runner with ``insights=True`` and without, taking
  turns, on tiny items (``x * x``, ``consumer_work`` per result) and on
  ~1 ms items, at 2 workers. Goal: insights cost under 3% (0.97x or more).
* ``ordered``: an ``OrderedRunner`` over fast items with one slow item among
  them (sleeps: independent of cores): time against the ideal and against
  ``Pool.imap``.

``--quick`` fits in a few minutes on a 2-core machine; the default is sized
for a 16-core GPU node. Run: ``scripts/bench parallel`` or
``python benchmarks/bench_parallel.py [--quick] [--rounds N] [--only tiny,cpu]``.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from typing import Dict, List

import numpy as np
from _harness import (
    Contender,
    Result,
    available_cpus,
    expect,
    flush,
    goal,
    machine_line,
    parse_args,
    print_rows,
    take_turns,
)

from easycore.common.config import CfgNode
from easycore.common.parallel import OrderedRunner, UnorderedRunner
from easycore.common.parallel import Pool as EasyPool

ARRAY_ELEMS = 1 << 20  # float64: 8 MiB
PAGE_STRIDE = 512  # float64 elements per 4 KiB page: the checks read one per page
#: pure-Python loop iterations that take ~1 ms here; set by ``calibrate`` and
#: passed to workers through the environment (spawned workers re-import this file)
SPIN_ITERS = int(os.environ.get("EASYCORE_BENCH_SPIN_ITERS", "0") or 0)


# ------------------------------------------------------------- the work
def square(x):
    return x * x


def spin(x):
    """~1 ms of pure Python (no GIL release, no allocation worth a mention)."""
    s = x
    for i in range(SPIN_ITERS):
        s = (s * 31 + i) % 1000003
    return s


def calibrate(target=0.001):
    global SPIN_ITERS
    SPIN_ITERS = 20_000
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        spin(1)
        best = min(best, time.perf_counter() - t0)
    SPIN_ITERS = max(1, int(20_000 * target / best))
    os.environ["EASYCORE_BENCH_SPIN_ITERS"] = str(SPIN_ITERS)
    return SPIN_ITERS


def page_sum(a):
    """One number per 4 KiB page of ``a``: touches every page, costs little."""
    return float(a[::PAGE_STRIDE].sum())


def fresh_array(i):
    """A new 8 MB array object with ``i`` on every page (in a worker: a result).

    ``np.empty`` and a strided fill: a new object every time (a transport
    cannot re-send one it already shared), every page written, and cheap, so
    the numbers are the transport's rather than ``np.full``'s.
    """
    a = np.empty(ARRAY_ELEMS)
    a[::PAGE_STRIDE] = i
    return a


def fresh_arrays(n):
    """New 8 MB arrays, one per item (in the caller: the inputs)."""
    for i in range(n):
        yield fresh_array(i)


def array_checksum(n):
    return float(ARRAY_ELEMS // PAGE_STRIDE) * (n * (n - 1) / 2)


def nap(x):
    time.sleep(SLOW_SECONDS if x == SLOW_INDEX else FAST_SECONDS)
    return x


SLOW_INDEX = 3
SLOW_SECONDS = 1.0
FAST_SECONDS = 0.005


# ------------------------------------------------------------- the runners
class TutorialSum(UnorderedRunner):
    """The tutorial's example 1, with the work as a parameter of the class."""

    @staticmethod
    def producer_work(device, cfg, data):
        return data * data

    @staticmethod
    def consumer_init(cfg):
        cfg.sum = 0

    @staticmethod
    def consumer_work(cfg, data):
        cfg.sum += data

    @staticmethod
    def consumer_end(cfg):
        return cfg.sum


class TutorialSumBatch(TutorialSum):
    """The same, consuming with the batched hook."""

    @staticmethod
    def consumer_work_batch(cfg, batch):
        cfg.sum += sum(batch)


class SpinSum(TutorialSum):
    @staticmethod
    def producer_work(device, cfg, data):
        return spin(data)


class SpinSumBatch(TutorialSumBatch):
    @staticmethod
    def producer_work(device, cfg, data):
        return spin(data)


class ArraysIn(OrderedRunner):
    """Inputs: 8 MB arrays made by the caller; the worker checks every page."""

    @staticmethod
    def producer_work(device, cfg, data):
        return page_sum(data)

    consumer_init = TutorialSum.consumer_init
    consumer_work = TutorialSum.consumer_work
    consumer_end = TutorialSum.consumer_end


class ArraysInUnordered(UnorderedRunner):
    producer_work = ArraysIn.producer_work
    consumer_init = TutorialSum.consumer_init
    consumer_work = TutorialSum.consumer_work
    consumer_end = TutorialSum.consumer_end


class ArraysOut(OrderedRunner):
    """Results: a fresh 8 MB array per item; the consumer checks every page."""

    @staticmethod
    def producer_work(device, cfg, data):
        return fresh_array(data)

    @staticmethod
    def consumer_init(cfg):
        cfg.sum = 0.0

    @staticmethod
    def consumer_work(cfg, data):
        cfg.sum += page_sum(data)

    consumer_end = TutorialSum.consumer_end


class ArraysOutUnordered(UnorderedRunner):
    producer_work = ArraysOut.producer_work
    consumer_init = ArraysOut.consumer_init
    consumer_work = ArraysOut.consumer_work
    consumer_end = ArraysOut.consumer_end


class Square(TutorialSum):
    """Latency: the result of a call is the sum of the squares."""


class Naps(OrderedRunner):
    """Ordered: checks that results come in input order."""

    @staticmethod
    def producer_work(device, cfg, data):
        return nap(data)

    @staticmethod
    def consumer_init(cfg):
        cfg.next = [0]

    @staticmethod
    def consumer_work(cfg, data):
        if data != cfg.next[0]:
            raise AssertionError(f"out of order: {data} where {cfg.next[0]} was due")
        cfg.next[0] += 1

    @staticmethod
    def consumer_end(cfg):
        return cfg.next[0]


class NapsUnordered(UnorderedRunner):
    producer_work = Naps.producer_work

    @staticmethod
    def consumer_init(cfg):
        cfg.n = [0]

    @staticmethod
    def consumer_work(cfg, data):
        cfg.n[0] += 1

    @staticmethod
    def consumer_end(cfg):
        return cfg.n[0]


# ------------------------------------------------------------- the peer's side
def pool_tutorial_sum(pool, fn, items, chunksize):
    """Pool with the tutorial's consumer hooks run by the caller, as the runner runs them."""
    cfg = CfgNode()
    TutorialSum.consumer_init(cfg)
    for r in pool.imap_unordered(fn, items, chunksize=chunksize):
        TutorialSum.consumer_work(cfg, r)
    return TutorialSum.consumer_end(cfg)


def pool_sum(pool, fn, items, chunksize):
    """The caller's loop the docs show: sum what ``imap_unordered`` yields."""
    total = 0
    for r in pool.imap_unordered(fn, items, chunksize=chunksize):
        total += r
    return total


def pool_page_sums_in(pool, n):
    total = 0
    for r in pool.imap(page_sum, fresh_arrays(n)):
        total += r
    return total


def pool_page_sums_out(pool, n):
    total = 0.0
    for a in pool.imap(fresh_array, range(n)):
        total += page_sum(a)
    return total


# ------------------------------------------------------------- sections
def section_arrays(cfg):
    workers = min(4, cfg.cpus)
    n = cfg.n_arrays
    expected = expect(array_checksum(n))
    print(f"\n[arrays] {n} fresh 8 MB float64 arrays per measurement, {workers} workers, "
          f"best of {cfg.rounds} rounds")
    flush()
    with multiprocessing.Pool(workers) as pool, ArraysIn(workers) as r_in, \
            ArraysInUnordered(workers) as r_in_u, ArraysOut(workers) as r_out, \
            ArraysOutUnordered(workers) as r_out_u:
        inputs = take_turns([
            Contender("Pool.imap(chunksize=1), inputs pickled", lambda: pool_page_sums_in(pool, n),
                      expected),
            Contender("OrderedRunner, inputs", lambda: r_in(fresh_arrays(n)), expected),
            Contender("UnorderedRunner, inputs", lambda: r_in_u(fresh_arrays(n)), expected),
        ], cfg.rounds)
        outputs = take_turns([
            Contender("Pool.imap(chunksize=1), results pickled",
                      lambda: pool_page_sums_out(pool, n), expected),
            Contender("OrderedRunner, results", lambda: r_out(range(n)), expected),
            Contender("UnorderedRunner, results", lambda: r_out_u(range(n)), expected),
        ], cfg.rounds)
    nbytes = ARRAY_ELEMS * 8
    print_rows("  8 MB arrays as inputs (generator in the caller, page check in the worker)",
               inputs, "Pool.imap(chunksize=1), inputs pickled", n, "arrays", nbytes)
    print_rows("  8 MB arrays as results (made in the worker, page check in the consumer)",
               outputs, "Pool.imap(chunksize=1), results pickled", n, "arrays", nbytes)
    p_in = inputs["Pool.imap(chunksize=1), inputs pickled"].best
    e_in = inputs["OrderedRunner, inputs"].best
    e_out = outputs["OrderedRunner, results"].best
    return [
        goal("OrderedRunner inputs vs Pool.imap", p_in / e_in, 5.0),
        goal("OrderedRunner inputs vs its results (throughput)", e_out / e_in, 0.5),
    ]


def worker_counts(cpus):
    return sorted({1, 2, 4, 8, cpus})


def items_at(w, items, fn, chunksize, runner_cls, batch_cls, peer, expected, rounds):
    with multiprocessing.Pool(w) as pool, runner_cls(w) as runner, batch_cls(w) as batch:
        return take_turns([
            Contender(peer, lambda: pool_tutorial_sum(pool, fn, items, chunksize), expected),
            Contender(f"Pool.imap_unordered(chunksize={chunksize}), caller sums a local",
                      lambda: pool_sum(pool, fn, items, chunksize), expected),
            Contender("UnorderedRunner, consumer_work (cfg.sum += data)",
                      lambda: runner(items), expected),
            Contender("UnorderedRunner, consumer_work_batch", lambda: batch(items), expected),
        ], rounds)


def section_items(cfg, kind):
    """``cpu`` (spin, ~1 ms) or ``tiny`` (x * x) at several worker counts."""
    goals = []
    if kind == "cpu":
        fn, runner_cls, batch_cls, chunksize = spin, SpinSum, SpinSumBatch, 8
        per_worker = cfg.cpu_items_per_worker
        print(f"\n[cpu] items of ~1 ms of pure Python ({SPIN_ITERS} loop iterations), "
              f"{per_worker} items per worker, best of {cfg.rounds} rounds")
        counts = worker_counts(cfg.cpus)
        results = [spin(x) for x in range(per_worker * max(counts))]
    else:
        fn, runner_cls, batch_cls, chunksize = square, TutorialSum, TutorialSumBatch, 256
        print(f"\n[tiny] {cfg.n_tiny:,} items of x * x, best of {cfg.rounds} rounds")
        counts = worker_counts(cfg.cpus)
    flush()
    peer = f"Pool.imap_unordered(chunksize={chunksize}), tutorial's consumer_work"
    for w in counts:
        n = per_worker * w if kind == "cpu" else cfg.n_tiny
        items = range(n)
        expected = expect(sum(results[:n]) if kind == "cpu" else sum(x * x for x in items))
        got = items_at(w, items, fn, chunksize, runner_cls, batch_cls, peer, expected, cfg.rounds)
        print_rows(f"  {w} worker{'s' if w > 1 else ''}, {n:,} items", got, peer, n, "items")
        mine = got["UnorderedRunner, consumer_work (cfg.sum += data)"].best
        goals.append(goal(f"{kind} items, {w} workers, consumer_work on both sides",
                          got[peer].best / mine, 1.0))
        local = got[f"Pool.imap_unordered(chunksize={chunksize}), caller sums a local"].best
        batch = got["UnorderedRunner, consumer_work_batch"].best
        print(f"  (information: vs Pool summing a local, {local / mine:.3f}x; with "
              f"consumer_work_batch, {local / batch:.3f}x)")
        flush()
    return goals


def section_latency(cfg):
    workers = min(4, cfg.cpus)
    calls = cfg.latency_calls
    one, ten = [7], list(range(10))
    e_one, e_ten = 49, sum(x * x for x in ten)
    print(f"\n[latency] a kept-alive runner and a Pool, {workers} workers, {calls} calls per "
          f"measurement, best of {cfg.rounds} rounds")
    flush()

    def repeat(call, expected):
        def run():
            for _ in range(calls):
                if call() != expected:
                    raise AssertionError("wrong result")
            return True
        return run

    ok = expect(True)
    # The consumer's cfg is a fresh copy per call: a large one must not cost per call.
    table = {"table": {f"key{i}": i for i in range(10_000)}}
    with multiprocessing.Pool(workers) as pool, Square(workers) as runner, \
            Square(workers, cfg=table) as runner_big_cfg:
        got1 = take_turns([
            Contender("Pool.apply(square, (7,))", repeat(lambda: pool.apply(square, (7,)), e_one),
                      ok),
            Contender("runner([7])", repeat(lambda: runner(one), e_one), ok),
            Contender("runner([7]), 10k-key dict in cfg",
                      repeat(lambda: runner_big_cfg(one), e_one), ok),
        ], cfg.rounds)
        got10 = take_turns([
            Contender("sum(Pool.map(square, range(10)))",
                      repeat(lambda: sum(pool.map(square, ten)), e_ten), ok),
            Contender("runner(range(10))", repeat(lambda: runner(ten), e_ten), ok),
        ], cfg.rounds)
    print_rows("  1 item per call", got1, "Pool.apply(square, (7,))", calls, "call",
               per_call=True)
    print_rows("  1 item per call: 10k-key dict in cfg vs an empty cfg",
               {k: got1[k] for k in ("runner([7])", "runner([7]), 10k-key dict in cfg")},
               "runner([7])", calls, "call", per_call=True)
    print_rows("  10 items per call", got10, "sum(Pool.map(square, range(10)))", calls, "call",
               per_call=True)
    return [
        goal("runner([x]) vs Pool.apply (speed)",
             got1["Pool.apply(square, (7,))"].best / got1["runner([7])"].best, 1.0),
        goal("runner([x]) with a 10k-key cfg vs an empty cfg (time, at most 2x)",
             got1["runner([7])"].best / got1["runner([7]), 10k-key dict in cfg"].best, 0.5),
        goal("runner(10 items) vs Pool.map (speed)",
             got10["sum(Pool.map(square, range(10)))"].best / got10["runner(range(10))"].best,
             1.0),
    ]


def section_startup(cfg):
    counts = sorted({2, min(8, cfg.cpus), cfg.cpus})
    rounds = max(cfg.rounds, 7)  # ~20 ms a round: the best of 3 was mostly noise
    goals = []
    print(f"\n[startup] start until the first result, then close; best of {rounds} rounds "
          f"(start method {multiprocessing.get_start_method()})")
    print(f"  {'contender':<44} {'workers':>7} {'first result':>13} {'close':>9} "
          f"{'spread':>7} {'vs peer':>8}")
    flush()
    for w in counts:
        times: Dict[str, List[tuple]] = {"Pool": [], "runner": [], "easycore Pool": []}
        names = list(times)
        for r in range(rounds):
            for name in names[r % 3:] + names[:r % 3]:  # taking turns
                t0 = time.perf_counter()
                if name != "runner":
                    pool = (multiprocessing.Pool if name == "Pool" else EasyPool)(w)
                    assert pool.apply(square, (3,)) == 9
                    t1 = time.perf_counter()
                    pool.close()
                    pool.join()
                else:
                    runner = Square(w)
                    assert runner([3]) == 9
                    t1 = time.perf_counter()
                    runner.close()
                t2 = time.perf_counter()
                times[name].append((t1 - t0, t2 - t1))
        pool_first = Result("Pool", [t[0] for t in times["Pool"]])
        runner_first = Result("runner", [t[0] for t in times["runner"]])
        easy_first = Result("easycore Pool", [t[0] for t in times["easycore Pool"]])
        for label, key, res in (("Pool(n) + apply, close + join", "Pool", pool_first),
                                ("Runner(n) + runner([3]), close", "runner", runner_first),
                                ("easycore Pool(n) + apply, close + join", "easycore Pool",
                                 easy_first)):
            close = min(t[1] for t in times[key])
            ratio = "(peer)" if key == "Pool" else f"{pool_first.best / res.best:.2f}x"
            print(f"  {label:<44} {w:>7} {res.best * 1e3:>10.1f} ms {close * 1e3:>6.1f} ms "
                  f"{res.spread * 100:>6.0f}% {ratio:>8}")
        flush()
        if w == 2:
            goals.append(goal("runner start-up to first result vs Pool, 2 workers "
                              "(time, at most 1.5x)", pool_first.best / runner_first.best,
                              1 / 1.5))
            goals.append(goal("easycore Pool start-up to first apply vs Pool, 2 workers "
                              "(time, at most 1.5x)", pool_first.best / easy_first.best,
                              1 / 1.5))
    return goals


def section_ordered(cfg):
    workers = max(2, min(8, cfg.cpus))
    n = cfg.naps_per_worker * workers
    work = SLOW_SECONDS + (n - 1) * FAST_SECONDS
    ideal = max(SLOW_SECONDS, work / workers)
    print(f"\n[ordered] {n} items sleeping {FAST_SECONDS * 1e3:.0f} ms, item {SLOW_INDEX} "
          f"sleeping {SLOW_SECONDS:.1f} s, {workers} workers; ideal {ideal:.2f} s "
          f"(max(slow item, all work / workers)); best of {cfg.rounds} rounds")
    flush()
    items = list(range(n))
    with multiprocessing.Pool(workers) as pool, Naps(workers) as ordered, \
            NapsUnordered(workers) as unordered:
        got = take_turns([
            Contender("Pool.imap(chunksize=1)", lambda: len(list(pool.imap(nap, items))),
                      expect(n)),
            Contender("OrderedRunner", lambda: ordered(items), expect(n)),
            Contender("UnorderedRunner (no order to keep)", lambda: unordered(items), expect(n)),
        ], cfg.rounds, warmup=False)
    print_rows("  one slow item among fast ones", got, "Pool.imap(chunksize=1)", n, "items")
    for name, res in got.items():
        print(f"    {name:<40} {res.best:.3f} s = {res.best / ideal:.2f}x the ideal")
    return [goal("OrderedRunner vs Pool.imap", got["Pool.imap(chunksize=1)"].best
                 / got["OrderedRunner"].best, 1.0)]


def section_insights(cfg):
    """``insights=True`` against the same runner without, on tiny and ~1 ms items."""
    workers = min(2, cfg.cpus)
    print(f"\n[insights] insights=True vs off, {workers} workers, best of {cfg.rounds} rounds")
    flush()
    goals = []
    for label, runner_cls, n, expected in [
        ("tiny items (x * x)", TutorialSum, cfg.n_tiny,
         sum(x * x for x in range(cfg.n_tiny))),
        ("~1 ms items", SpinSum, cfg.cpu_items_per_worker * workers,
         sum(spin(x) for x in range(cfg.cpu_items_per_worker * workers))),
    ]:
        items = range(n)
        with runner_cls(workers) as off, runner_cls(workers, insights=True) as on:
            got = take_turns([
                Contender("insights off", lambda off=off, items=items: off(items),
                          expect(expected)),
                Contender("insights=True", lambda on=on, items=items: on(items),
                          expect(expected)),
            ], cfg.rounds)
            verdict = on.insights().verdict()
        print_rows(f"  {label}, {n:,} items", got, "insights off", n, "items")
        print(f"  (the verdict of the last run: {verdict.stage}: {verdict})")
        goals.append(goal(f"insights=True, {label}: off / on",
                          got["insights off"].best / got["insights=True"].best, 0.97))
        flush()
    return goals


class Config:
    def __init__(self, args):
        self.cpus = available_cpus()
        quick = args.quick
        self.rounds = args.rounds or (3 if quick else 5)
        self.n_arrays = 40 if quick else 200
        self.cpu_items_per_worker = 250 if quick else 500
        self.n_tiny = 200_000 if quick else 400_000
        self.latency_calls = 200 if quick else 1000
        self.naps_per_worker = 200


SECTIONS = {
    "arrays": section_arrays,
    "cpu": lambda cfg: section_items(cfg, "cpu"),
    "tiny": lambda cfg: section_items(cfg, "tiny"),
    "latency": section_latency,
    "startup": section_startup,
    "ordered": section_ordered,
    "insights": section_insights,
}


def main():
    args = parse_args(__doc__)
    cfg = Config(args)
    wanted = args.only.split(",") if args.only else list(SECTIONS)
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}; known: {sorted(SECTIONS)}")
    calibrate()
    print("easycore-parallel runners vs multiprocessing.Pool"
          f"{' (--quick)' if args.quick else ''}")
    print(f"  {machine_line()}")
    print("  ratios: the peer's best time over the contender's (above 1.00x: faster than the "
          "peer); 'per round': the range of the same ratio round by round; 'spread': worst "
          "round over best")
    start = time.perf_counter()
    goals = []
    for name in wanted:
        goals += SECTIONS[name](cfg)
    print("\nGoals (this run):")
    for line in goals:
        print(line)
    print(f"\n(total {time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
