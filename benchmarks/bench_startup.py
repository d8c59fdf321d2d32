"""Where a fresh pool's start-up goes: each phase's time and the caller's page faults,
against ``multiprocessing.Pool`` measured in the same run (issue 37 item 3, issue 32 item 1).

A fresh pool under ``fork`` is mostly copy-on-write: once a child is forked,
every page of the caller that the caller writes again (a Python object's
reference count is a write) is copied first, a page fault each. So each
phase is given three ways, medians over the rounds:

* its time in milliseconds;
* the caller's minor page faults (``getrusage``'s ``ru_minflt``);
* those faults at this machine's price of one copy-on-write fault, measured
  in the same run (a forked child kept alive, the caller writing one byte in
  each of 2,000 private pages): how much of the phase the faults explain.

The phases: the constructor (``Pool(2)``, a runner's ``__init__``), the first
call (``apply(square, (3,))``, ``runner([3])``), and the end (``close()`` +
``join()``, a runner's ``close()``). The contenders take turns; the forks
the caller makes are counted by wrapping ``os.fork`` in this process only.
A line per contender adds up constructor and first call: issue 37's goal is
easycore's ``Pool`` within 1.5x the stdlib's there (``bench_parallel --only
startup`` checks it, as the best of its rounds).

Run: ``scripts/bench startup`` or ``python benchmarks/bench_startup.py
[--quick] [--rounds N]`` (``fork``, where the platform has it).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import resource
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Tuple

from _harness import flush, machine_line, parse_args
from bench_parallel import Square, square

import easycore.common.parallel as ecp

PAGES = 2000
_forks = [0]
_real_fork = os.fork


def _counting_fork() -> int:
    pid = _real_fork()
    if pid:
        _forks[0] += 1
    return pid


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def fault_price() -> float:
    """Microseconds per copy-on-write fault here: a child kept alive, the caller
    writing one byte in each of ``PAGES`` private pages it had written before."""
    page = resource.getpagesize()
    pages = bytearray(PAGES * page + page)
    for i in range(PAGES):
        pages[i * page] = 1
    r, w = os.pipe()
    pid = _real_fork()
    if pid == 0:
        os.close(w)
        os.read(r, 1)  # until the caller is done
        os._exit(0)
    os.close(r)
    try:
        f0, t0 = _faults(), time.perf_counter()
        for i in range(PAGES):
            pages[i * page] = 2
        dt, faults = time.perf_counter() - t0, _faults() - f0
    finally:
        os.close(w)
        os.waitpid(pid, 0)
    return dt / max(1, faults) * 1e6


Phase = Tuple[float, int]  # (seconds, faults)


def _timed(fn: Callable[[], object]) -> Tuple[object, Phase]:
    f0, t0 = _faults(), time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0, _faults() - f0)


def _pool(make: Callable[[int], Any]) -> List[Phase]:
    pool, ctor = _timed(lambda: make(2))
    got, first = _timed(lambda: pool.apply(square, (3,)))
    assert got == 9
    _, end = _timed(lambda: (pool.close(), pool.join()))
    return [ctor, first, end]


def _runner() -> List[Phase]:
    runner, ctor = _timed(lambda: Square(2))
    got, first = _timed(lambda: runner([3]))
    assert got == 9
    _, end = _timed(runner.close)
    return [ctor, first, end]


CONTENDERS: Dict[str, Callable[[], List[Phase]]] = {
    "multiprocessing.Pool(2)": functools.partial(_pool, multiprocessing.Pool),
    "easycore Pool(2)": functools.partial(_pool, ecp.Pool),
    "Runner(2)": _runner,
}
PHASES = ("constructor", "first call", "close + join")


def main() -> int:
    args = parse_args(__doc__)
    rounds = args.rounds or (15 if args.quick else 41)
    if "fork" not in multiprocessing.get_all_start_methods():
        print("bench_startup: no fork start method here; nothing to measure")
        return 0
    multiprocessing.set_start_method("fork", force=True)
    print(f"A fresh pool's start-up, phase by phase, with the caller's page faults"
          f"{' (--quick)' if args.quick else ''}")
    print(f"  {machine_line()}")
    flush()
    os.fork = _counting_fork  # (this process only: counts, changes nothing)
    try:
        for fn in CONTENDERS.values():  # warm: imports, first-time paths
            fn()
        got: Dict[str, List[List[Phase]]] = {name: [] for name in CONTENDERS}
        forks: Dict[str, int] = {}
        names = list(CONTENDERS)
        for r in range(rounds):
            for name in names[r % 3:] + names[:r % 3]:  # taking turns
                before = _forks[0]
                got[name].append(CONTENDERS[name]())
                forks[name] = _forks[0] - before
    finally:
        os.fork = _real_fork
    price = statistics.median(fault_price() for _ in range(5))
    print(f"\n[startup] medians of {rounds} rounds, 2 workers, start method fork; one "
          f"copy-on-write fault here: {price:.2f} us (median of 5)")
    print(f"  {'contender':<26} {'phase':<13} {'ms':>7} {'faults':>7} {'faults x price':>15}")
    totals: Dict[str, float] = {}
    for name, runs in got.items():
        for i, phase in enumerate(PHASES):
            ms = statistics.median(run[i][0] for run in runs) * 1e3
            faults = statistics.median(run[i][1] for run in runs)
            print(f"  {name:<26} {phase:<13} {ms:>7.2f} {faults:>7.0f} "
                  f"{faults * price / 1e3:>12.2f} ms")
        totals[name] = statistics.median(run[0][0] + run[1][0] for run in runs) * 1e3
        print(f"  {name:<26} {'forks':<13} {forks[name]:>7}")
    peer = totals["multiprocessing.Pool(2)"]
    print("  constructor + first call (median of the rounds' sums): "
          + ", ".join(f"{name} {ms:.2f} ms ({ms / peer:.2f}x the stdlib's time)"
                      for name, ms in totals.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
