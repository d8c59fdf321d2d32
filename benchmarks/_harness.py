"""What the parallel benchmarks share: the machine line, fair turns, tables with ratios.

Rules every benchmark here follows (see ``docs`` and the developers' guide):

* contenders are measured in the same run, **taking turns** (round 1: A, B,
  C; round 2: A, B, C; ...), so that a noisy moment on a shared machine hits
  all of them alike; the best round counts, and the spread of the rounds is
  printed beside it;
* every run's result is checked against the expected value (a contender that
  skips work fails loudly instead of winning);
* ratios compare each contender with its peer *in this run*; a row also shows
  the range of the per-round ratios (the same round's A against B's), which
  says how far one number can be trusted on this machine.

Not a benchmark (no ``bench_`` prefix): ``scripts/bench`` does not run it.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import platform
import shutil
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence


def parse_args(doc: Optional[str], extra: Optional[Callable[[argparse.ArgumentParser], None]] = None
               ) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer items and rounds: a few minutes on a 2-core machine")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds of turns (default: 3 with --quick, else 5)")
    parser.add_argument("--only", default=None,
                        help="comma-separated section names to run (default: all)")
    if extra is not None:
        extra(parser)
    return parser.parse_args()


def available_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except OSError:
            pass
    return os.cpu_count() or 1


def machine_line() -> str:
    """CPUs, affinity, start method, ``/dev/shm``, versions, load: the top of every table."""
    try:
        shm = shutil.disk_usage("/dev/shm")
        shm_text = f"/dev/shm {shm.total / 2**30:.1f} GiB ({shm.free / 2**30:.1f} free)"
    except OSError:
        shm_text = "no /dev/shm"
    try:
        load = "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except OSError:
        load = "load n/a"
    try:
        import numpy

        np_text = f", numpy {numpy.__version__}"
    except ImportError:
        np_text = ""
    return (f"Python {platform.python_version()}{np_text} on {platform.system()} "
            f"{platform.machine()}: {os.cpu_count()} CPUs, affinity {available_cpus()}, "
            f"start method {multiprocessing.get_start_method()}, {shm_text}, {load}")


class Result(NamedTuple):
    """One contender's times, one per round (seconds for the whole measurement)."""

    name: str
    times: List[float]

    @property
    def best(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def spread(self) -> float:
        """Worst round over best round, minus one (0.10: the worst was 10 % slower)."""
        return max(self.times) / min(self.times) - 1.0


class Contender(NamedTuple):
    name: str
    run: Callable[[], Any]  #: one measurement; returns what ``check`` verifies
    check: Callable[[Any], None]  #: raises AssertionError when the result is wrong


def expect(value: Any) -> Callable[[Any], None]:
    """A check that the result equals ``value``."""

    def check(result: Any) -> None:
        if result != value:
            raise AssertionError(f"wrong result {result!r}, expected {value!r}")

    return check


def take_turns(contenders: Sequence[Contender], rounds: int,
               warmup: bool = True) -> Dict[str, Result]:
    """Run every contender once per round, in turn; every result is checked.

    Args:
        contenders: what to measure.
        rounds: how many rounds.
        warmup: run each once, unmeasured, first (pools started, code warm).

    Returns:
        dict: name -> Result.
    """
    def checked(c: Contender, out: Any) -> None:
        try:
            c.check(out)
        except AssertionError as exc:
            raise AssertionError(f"{c.name}: {exc}") from None

    if warmup:
        for c in contenders:
            checked(c, c.run())
    times: Dict[str, List[float]] = {c.name: [] for c in contenders}
    for r in range(rounds):
        # Rotate who goes first, so no contender always follows the same one.
        order = list(contenders[r % len(contenders):]) + list(contenders[: r % len(contenders)])
        for c in order:
            gc.collect()
            start = time.perf_counter()
            out = c.run()
            elapsed = time.perf_counter() - start
            checked(c, out)
            del out
            times[c.name].append(elapsed)
    return {name: Result(name, t) for name, t in times.items()}


def ratio_range(mine: Result, peer: Result) -> str:
    """Per-round ratios (peer time / my time): their range, as ``lo-hi``."""
    ratios = [p / m for m, p in zip(mine.times, peer.times)]
    return f"{min(ratios):.2f}-{max(ratios):.2f}"


def print_rows(title: str, results: Dict[str, Result], peer: str, count: float, unit: str,
               nbytes: Optional[float] = None, per_call: bool = False) -> None:
    """A table: rate (or time per call), spread, ratio of bests vs ``peer`` and its range.

    Args:
        count: units in one measurement (items, calls).
        unit: what is counted ("items", "calls", ...).
        nbytes: bytes moved per unit: adds a GB/s column.
        per_call: show microseconds per unit instead of a rate.
    """
    print(f"\n{title}")
    head = f"  {'contender':<58}"
    head += f" {'us/' + unit:>10}" if per_call else f" {unit + '/s':>12}"
    if nbytes:
        head += f" {'GB/s':>7}"
    head += f" {'best':>9} {'spread':>7} {'vs peer':>8} {'per round':>10}"
    print(head)
    ref = results[peer]
    for name, res in results.items():
        line = f"  {name:<58}"
        if per_call:
            line += f" {res.best / count * 1e6:>10.1f}"
        else:
            line += f" {count / res.best:>12,.0f}"
        if nbytes:
            line += f" {count * nbytes / res.best / 1e9:>7.2f}"
        line += f" {res.best:>8.3f}s {res.spread * 100:>6.0f}%"
        if name == peer:
            line += f" {'(peer)':>8} {'':>10}"
        else:
            line += f" {ref.best / res.best:>7.2f}x {ratio_range(res, ref):>10}"
        print(line)


def goal(label: str, ratio: float, target: float) -> str:
    verdict = "met" if ratio >= target else "NOT met"
    line = f"  goal: {label}: {ratio:.3f}x (target {target:g}x) {verdict}"
    print(line)
    return line


def flush() -> None:
    sys.stdout.flush()
