"""What seeing into the workers costs: stacks(), a stop that says where, a memory limit.

* ``stacks()`` of 2 workers, both busy (one in a Python loop, one in C code
  that holds the GIL): seconds per call (the issue asks "in about a second").
* ``terminate()`` of a pool whose 2 workers are busy: easycore's, which first
  reads where they were (half a second at most, the Ctrl-C path too), against
  ``multiprocessing.Pool.terminate()`` (the peer), same run, taking turns.
* ``Pool.map`` of tiny items: with ``max_worker_memory`` (one chunk per worker
  at a time, the worker's RSS read after each chunk) and with ``insights=True``
  (peak RSS/USS read twice a second per worker) against the same pool without
  either (the peer).

Run: ``scripts/bench observe`` or ``python benchmarks/bench_observe.py [--quick]``.
"""

from __future__ import annotations

import glob
import multiprocessing
import os
import shutil
import tempfile
import time
from typing import Callable, List

from _harness import Contender, expect, flush, machine_line, parse_args, print_rows, take_turns

from easycore.common.parallel import Pool


def busy(kind: str, mark: str) -> None:
    open(f"{mark}.{os.getpid()}", "w").close()
    if kind == "c":
        sum(range(10**12))  # C code holding the GIL
    end = time.monotonic() + 600
    while time.monotonic() < end:  # a Python loop
        pass


def _wait_marks(folder: str, n: int) -> None:
    deadline = time.monotonic() + 60
    while len(glob.glob(os.path.join(folder, "m.*"))) < n:
        if time.monotonic() > deadline:
            raise RuntimeError("the workers never started")
        time.sleep(0.005)


def _timed_stop(make: Callable[[], object], submit: Callable[[object, str], None],
                rounds: int) -> List[float]:
    times = []
    for _ in range(rounds):
        folder = tempfile.mkdtemp()
        pool = make()
        try:
            submit(pool, os.path.join(folder, "m"))
            _wait_marks(folder, 2)
            t0 = time.perf_counter()
            pool.terminate()  # type: ignore[attr-defined]
            times.append(time.perf_counter() - t0)
            pool.join()  # type: ignore[attr-defined]
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return times


def _ours_submit(pool, mark):
    pool.apply_async(busy, ("py", mark))
    pool.apply_async(busy, ("c", mark))


def main() -> None:
    args = parse_args(__doc__)
    rounds = args.rounds or (3 if args.quick else 5)
    print(machine_line())

    # ------------------------------------------------------------ stacks()
    folder = tempfile.mkdtemp()
    with Pool(2, queue_scale=1) as pool:
        pool.broadcast(os.getpid)
        _ours_submit(pool, os.path.join(folder, "m"))
        _wait_marks(folder, 2)
        times = []
        for _ in range(rounds * 4):
            t0 = time.perf_counter()
            got = pool.stacks()
            times.append(time.perf_counter() - t0)
            assert sum("busy" in text for text in got.values()) == 2, got
    shutil.rmtree(folder, ignore_errors=True)
    print(f"\nstacks() of 2 busy workers (Python loop, C code): best {min(times) * 1e3:.1f} ms, "
          f"median {sorted(times)[len(times) // 2] * 1e3:.1f} ms, worst {max(times) * 1e3:.1f} ms")
    flush()

    # ---------------------------------------------------- terminate() busy
    ours = _timed_stop(lambda: Pool(2, queue_scale=1), _ours_submit, rounds)

    def without_stacks() -> Pool:
        pool = Pool(2, queue_scale=1)
        abort = pool._engine.abort
        pool._engine.abort = lambda where=False: abort(False)  # type: ignore[method-assign]
        return pool

    before = _timed_stop(without_stacks, _ours_submit, rounds)
    ctx = multiprocessing.get_context("fork")

    def peer_submit(pool, mark):
        pool.apply_async(busy, ("py", mark))
        pool.apply_async(busy, ("c", mark))

    peer = _timed_stop(lambda: ctx.Pool(2), peer_submit, rounds)
    print(f"\nterminate() with 2 busy workers, best of {rounds}:")
    print(f"  easycore Pool (reads where they were first)   {min(ours) * 1e3:8.1f} ms")
    print(f"  easycore Pool, not reading them (before)      {min(before) * 1e3:8.1f} ms")
    print(f"  multiprocessing.Pool (peer)                    {min(peer) * 1e3:8.1f} ms")
    print(f"  reading adds {(min(ours) - min(before)) * 1e3:.0f} ms; easycore / peer "
          f"{min(ours) / min(peer):.2f}x (goal: under a second in all; the rest is the "
          "SIGTERM grace of a worker in C code)")
    flush()

    # ------------------------------------------ max_worker_memory, insights
    n = 2_000 if args.quick else 20_000
    items = list(range(n))
    expected = sum(abs(x) for x in items)
    pools = {
        "Pool, no limit, no insights (peer)": Pool(2),
        "Pool, max_worker_memory='100 GB'": Pool(2, max_worker_memory="100 GB"),
        "Pool, insights=True": Pool(2, insights=True),
    }
    try:
        contenders = [Contender(name, (lambda p=p: sum(p.map(abs, items))), expect(expected))
                      for name, p in pools.items()]
        results = take_turns(contenders, rounds)
    finally:
        for p in pools.values():
            p.terminate()
    print_rows(f"Pool.map(abs) of {n:,} tiny items, 2 workers", results,
               "Pool, no limit, no insights (peer)", n, "items")
    flush()


if __name__ == "__main__":
    main()
