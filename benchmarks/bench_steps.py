"""Where a small call's time goes, beside a raw pipe round trip measured in the same run (issue 37).

Sections (``--only NAME,...``):

* ``steps``: one kept-alive call broken into its steps, in microseconds
  (medians over the calls): the caller's job set-up, per-call ``cfg``,
  encode and send; the worker's wake, decode, run, encode and send; the
  caller's wake, decode, deliver, consumer hooks and job end. For a runner's
  ``runner([7])``, ``Pool.apply(square, (7,))`` and ``Pool.imap`` over tiny
  items (per item: each step's time summed over the run; wake-ups overlap
  with other work there, so they are left out). One worker, so that every
  message has one place to go. The steps are timed by wrapping the engine's
  functions from here, before the worker is forked: nothing in the
  package pays for it when this benchmark does not run. The wrappers cost
  about a microsecond per step, so the steps add up to a little more than
  the un-instrumented call of the ``floor`` section.
* ``floor``: kept-alive ``runner([7])``, easycore ``Pool.apply`` and
  ``multiprocessing.Pool.apply``, each against the pipe floor (one byte each
  way between two processes, ``os.write``/``os.read``), taking turns, medians
  of the rounds. Goal: the runner and ``Pool.apply`` within 5x the floor
  (the goals take the round trip held on one CPU where it is cheaper: an
  unplaced one that the scheduler kept on two CPUs for the run would
  flatter every ratio).
  A row beside them is a bare Python call: ``square(7)`` pickled to a
  process that unpickles it, calls it and pickles the result back, one
  ``os.write`` and one ``os.read`` each way, nothing else: what any
  Python-level call pays before a library's own work (a line after the
  table gives each call's time against it). Two more rows place the same
  round trip (where the platform lets a thread be held on a CPU, and has
  two): both processes on one CPU, and on two; a third, the bare Python
  call with both processes on one CPU. They are context, not the floor: on
  a virtual machine the first is a hand-over of the CPU (a few
  microseconds) and the second a wake-up on another CPU (tens of
  microseconds); the unplaced floor is whichever of the two the scheduler
  chose, and a call through several processes and threads pays some of
  each. ``taskset -c 0 python benchmarks/bench_steps.py --only floor``
  holds every process on one CPU: each call's own work, without wake-ups
  on other CPUs.
* ``imap``: ``Pool.imap`` over 200,000 tiny items (``x * x``) against
  ``multiprocessing.Pool.imap(chunksize=256)``. Goal: at least 1.5x.
* ``cfg``: ``runner([7])`` with a 100,000-key ``cfg`` whose consumer writes a
  top-level key, or a key of a 100,000-key nested node, against a tiny
  ``cfg``'s call. Goal: at most 2x.

Run: ``scripts/bench steps`` or ``python benchmarks/bench_steps.py [--quick]
[--rounds N] [--only steps,floor]``.
"""

from __future__ import annotations

import functools
import inspect
import mmap
import multiprocessing
import os
import pickle
import statistics
import sys
import time
from collections import defaultdict
from typing import Any, Callable, Dict, List, Optional

from _harness import (
    Contender,
    expect,
    flush,
    goal,
    machine_line,
    parse_args,
    print_rows,
    take_turns,
)
from bench_parallel import TutorialSum, square

import easycore.common.parallel as ecp
from easycore.common.parallel import runner as runner_mod
from easycore.common.parallel.backends.multiplexer import Multiplexer
from easycore.common.parallel.backends.process import ProcessBackend
from easycore.common.parallel.engine.core import Engine
from easycore.common.parallel.pool import results as results_mod
from easycore.common.parallel.transport.shared_memory import SharedMemoryTransport
from easycore.common.parallel.worker import loop as loop_mod
from easycore.common.parallel.worker.executor import WorkerHandler

now = time.perf_counter  # CLOCK_MONOTONIC on Linux: one clock for every process


# ------------------------------------------------------------- the pipe floor
def _echo(message: bytes) -> bytes:
    return message


def _call_back(message: bytes) -> bytes:
    fn, args = pickle.loads(message)
    return pickle.dumps(fn(*args), protocol=pickle.HIGHEST_PROTOCOL)


def _serve_pipe(r: int, w: int, cpu: Optional[int], answer: Callable[[bytes], bytes]) -> None:
    """The child's loop: each message read is answered with ``answer(message)``."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    while True:
        b = os.read(r, 65536)
        if not b or b == b"q":
            os._exit(0)
        os.write(w, answer(b))


class PipeFloor:
    """A child that echoes one byte: a raw round trip between two processes."""

    _answer = staticmethod(_echo)

    def __init__(self, cpu: Optional[int] = None) -> None:
        r1, w1 = os.pipe()
        r2, w2 = os.pipe()
        ctx = multiprocessing.get_context("fork")
        self._p = ctx.Process(target=_serve_pipe, args=(r1, w2, cpu, self._answer), daemon=True)
        self._p.start()
        os.close(r1)
        os.close(w2)
        self._w, self._r = w1, r2

    def call(self) -> bool:
        os.write(self._w, b"x")
        return os.read(self._r, 1) == b"x"

    def close(self) -> None:
        os.write(self._w, b"q")
        self._p.join(5)
        os.close(self._w)
        os.close(self._r)


class BareCall(PipeFloor):
    """The least a Python call to a kept-alive process does: ``square(7)`` pickled
    there, its result pickled back, one ``os.write`` and one ``os.read`` each way
    (no framing, no error handling, no bookkeeping)."""

    _answer = staticmethod(_call_back)

    def call(self) -> bool:
        os.write(self._w, pickle.dumps((square, (7,)), protocol=pickle.HIGHEST_PROTOCOL))
        return pickle.loads(os.read(self._r, 65536)) == 49


# ------------------------------------------------------------- instrumentation
class Steps:
    """Timestamps of the caller's steps (this process) and the worker's (shared memory).

    The worker is forked after ``install``: it inherits the wrapped functions
    and writes one record per message it answers into an anonymous shared
    mapping (message ``k`` at record ``k``), which the caller reads after
    the calls.
    """

    W_FIELDS = ("recv", "loads", "decode", "run", "encode", "dumps", "dumped", "sent")
    MAX = 1 << 16

    def __init__(self) -> None:
        self.mm = mmap.mmap(-1, 8 * len(self.W_FIELDS) * (self.MAX + 1))
        self.w = memoryview(self.mm).cast("d")
        self.c: Dict[str, List[float]] = defaultdict(list)  # caller: name -> values
        self.enabled = False
        self._undo: List[Callable[[], None]] = []

    # ------------------------------------------------------------ helpers
    def _patch(self, owner: Any, name: str, make: Callable[[Callable], Callable]) -> None:
        own = name in owner.__dict__
        original = inspect.getattr_static(owner, name)
        if isinstance(original, staticmethod):
            wrapped: Any = staticmethod(make(original.__func__))
        elif isinstance(original, classmethod):
            wrapped = staticmethod(make(getattr(owner, name)))
        else:
            wrapped = make(original)
        setattr(owner, name, wrapped)
        self._undo.append(lambda: setattr(owner, name, original) if own
                          else delattr(owner, name))

    def _span(self, key: str) -> Callable[[Callable], Callable]:
        """Caller: record (enter, exit) of each call."""
        def make(fn: Callable) -> Callable:
            @functools.wraps(fn)
            def timed(*args: Any, **kwargs: Any) -> Any:
                if not self.enabled:
                    return fn(*args, **kwargs)
                t0 = now()
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.c[key].append((t0, now()))  # type: ignore[arg-type]
            return timed
        return make

    def _worker_field(self, field: int, what: str = "span") -> Callable[[Callable], Callable]:
        """Worker: add a call's duration (or store its exit time) to the current record."""
        steps = self
        nf = len(self.W_FIELDS)

        def make(fn: Callable) -> Callable:
            @functools.wraps(fn)
            def timed(*args: Any, **kwargs: Any) -> Any:
                t0 = now()
                out = fn(*args, **kwargs)
                k = int(steps.w[0]) - 1
                if 0 <= k < steps.MAX:
                    base = (k + 1) * nf
                    if what == "span":
                        steps.w[base + field] += now() - t0
                    else:
                        steps.w[base + field] = now()
                return out
            return timed
        return make

    # ------------------------------------------------------------ install
    def install(self, runner_cls: type) -> None:
        """Wrap the engine's steps (before any worker is forked)."""
        nf = len(self.W_FIELDS)
        steps = self
        # ---- worker side (inherited by fork)
        original_receive = loop_mod._receive

        def receive(tasks: Any) -> bytes:
            count = int(steps.w[0])  # messages received so far; record k at (k + 1) * nf
            if 0 < count <= steps.MAX:  # the previous message's answer is sent by now
                steps.w[count * nf + 7] = now()
            data = original_receive(tasks)
            t = now()
            if count < steps.MAX:
                base = (count + 1) * nf
                for i in range(nf):
                    steps.w[base + i] = 0.0
                steps.w[base] = t
            steps.w[0] = count + 1
            return data

        loop_mod._receive = receive
        self._undo.append(lambda: setattr(loop_mod, "_receive", original_receive))

        class TimedPickle:
            HIGHEST_PROTOCOL = loop_mod.pickle.HIGHEST_PROTOCOL
            loads = staticmethod(self._worker_field(1)(loop_mod.pickle.loads))

            @staticmethod
            def dumps(obj: Any, protocol: Any = None) -> bytes:
                t0 = now()
                out = loop_mod_pickle.dumps(obj, protocol=protocol)
                k = int(steps.w[0]) - 1
                if 0 <= k < steps.MAX:
                    base = (k + 1) * nf
                    t1 = now()
                    steps.w[base + 5] += t1 - t0
                    steps.w[base + 6] = t1
                return out

        loop_mod_pickle = loop_mod.pickle
        loop_mod.pickle = TimedPickle  # type: ignore[assignment]
        self._undo.append(lambda: setattr(loop_mod, "pickle", loop_mod_pickle))
        self._patch(SharedMemoryTransport, "decode_items", self._worker_field(2))
        self._patch(WorkerHandler, "run_chunk", self._worker_field(3))
        self._patch(SharedMemoryTransport, "encode_results", self._worker_field(4))
        # ---- caller side
        self._patch(runner_mod.BaseRunner, "_consumer_cfg", self._span("cfg"))
        self._patch(SharedMemoryTransport, "encode_items", self._span("encode_items"))
        self._patch(ProcessBackend, "send", self._span("send_message"))
        self._patch(ProcessBackend, "_send_frame", self._span("write"))
        self._patch(Multiplexer, "select", self._span("select"))
        self._patch(SharedMemoryTransport, "decode_results", self._span("decode_results"))
        self._patch(Engine, "deliver", self._span("deliver"))
        self._patch(results_mod.AsyncResult, "_set", self._span("result_set"))
        for hook in ("consumer_init", "consumer_work_batch", "consumer_end"):
            self._patch(runner_cls, hook, self._span(hook))

    def uninstall(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def reset(self) -> None:
        self.c.clear()

    def worker_records(self, first: int, n: int) -> List[Dict[str, float]]:
        nf = len(self.W_FIELDS)
        out = []
        for k in range(first, first + n):
            base = (k + 1) * nf
            out.append({f: self.w[base + i] for i, f in enumerate(self.W_FIELDS)})
        return out

    def worker_count(self) -> int:
        return int(self.w[0])


class StepSquare(TutorialSum):
    """``x * x``, summed by the tutorial's consumer hooks."""

    @staticmethod
    def consumer_work_batch(cfg, batch):
        for x in batch:
            cfg.sum += x


def _last_before(spans: List[tuple], t: float) -> tuple:
    best = None
    for s in spans:
        if s[1] <= t and (best is None or s[1] > best[1]):
            best = s
    return best


def _within(spans: List[tuple], t0: float, t1: float) -> List[tuple]:
    return [s for s in spans if s[0] >= t0 and s[1] <= t1]


def _dur(spans: List[tuple]) -> float:
    return sum(b - a for a, b in spans)


def measure_calls(steps: Steps, call: Callable[[], Any], calls: int, kind: str
                  ) -> Dict[str, float]:
    """Per-call step times (medians, microseconds) of ``calls`` calls of ``call``."""
    first = steps.worker_count()
    steps.reset()
    spans = []
    steps.enabled = True
    try:
        for _ in range(calls):
            t0 = now()
            call()
            spans.append((t0, now()))
    finally:
        steps.enabled = False
    time.sleep(0.05)  # the worker's last "sent" stamp comes with its next wait
    records = steps.worker_records(first, calls)
    c = steps.c
    rows: Dict[str, List[float]] = defaultdict(list)
    for (t0, t1), w in zip(spans, records):
        send_msg = _within(c["send_message"], t0, t1)
        write = _within(c["write"], t0, t1)
        if len(send_msg) != 1 or len(write) != 1 or w["recv"] == 0.0:
            continue  # not a one-chunk call (should not happen with one worker)
        enc_items = _dur(_within(c["encode_items"], t0, t1))
        cfg = _dur(_within(c["cfg"], t0, t1))
        hooks_in = _dur(_within(c["consumer_init"], t0, send_msg[0][0]))
        setup = send_msg[0][0] - t0 - cfg - enc_items - hooks_in
        encode = write[0][0] - send_msg[0][0] + enc_items
        send = write[0][1] - write[0][0]
        w_sent = w["sent"] if w["sent"] else w["dumped"]
        # The select that returned the result: the last to end before delivery.
        deliver = _within(c["deliver"], t0, t1 + 1.0)
        if not deliver:
            continue
        d0, d1 = deliver[0]
        sel = _last_before(c["select"], d0)
        if sel is None:
            continue
        batch = _dur(_within(c["consumer_work_batch"], d0, d1))
        end_hook = _dur(_within(c["consumer_end"], t0, t1))
        rows["caller: job set-up"].append(setup)
        rows["caller: per-call cfg"].append(cfg)
        rows["caller: encode"].append(encode)
        rows["caller: send"].append(send)
        rows["worker: wake"].append(w["recv"] - write[0][1])
        rows["worker: decode"].append(w["loads"] + w["decode"])
        rows["worker: run"].append(w["run"])
        bookkeeping = (w["dumped"] - w["dumps"] - w["recv"]) - w["loads"] - w["decode"] \
            - w["run"] - w["encode"]
        rows["worker: bookkeeping (executor)"].append(bookkeeping)
        rows["worker: encode"].append(w["encode"] + w["dumps"])
        rows["worker: send"].append(w_sent - w["dumped"])
        rows["caller: wake"].append(sel[1] - w_sent)
        rows["caller: decode"].append(d0 - sel[1])
        if kind == "apply":
            sets = _within(c["result_set"], d0, d1)
            set_end = sets[0][1] if sets else d1
            rows["caller: deliver"].append(set_end - d0)
            rows["caller: consumer hooks"].append(0.0)
            rows["caller: job end (calling thread woken)"].append(t1 - set_end)
        else:
            rows["caller: deliver"].append(d1 - d0 - batch)
            rows["caller: consumer hooks"].append(hooks_in + batch + end_hook)
            rows["caller: job end"].append(t1 - d1 - end_hook)
        rows["total (instrumented)"].append(t1 - t0)
    return {k: statistics.median(v) * 1e6 for k, v in rows.items()}


def measure_stream(steps: Steps, pool: Any, n: int) -> Dict[str, float]:
    """Per-item step times (microseconds) of one ``Pool.imap`` over ``n`` tiny items."""
    first = steps.worker_count()
    steps.reset()
    steps.enabled = True
    try:
        t0 = now()
        total = sum(pool.imap(square, range(n)))
        t1 = now()
    finally:
        steps.enabled = False
    assert total == sum(x * x for x in range(n))
    time.sleep(0.05)
    done = steps.worker_count() - first
    records = steps.worker_records(first, done)
    c = steps.c
    per = 1e6 / n
    enc_items = _dur(c["encode_items"])
    out = {
        "caller: encode": (_dur(c["send_message"]) - _dur(c["write"]) + enc_items) * per,
        "caller: send": _dur(c["write"]) * per,
        "worker: decode": sum(w["loads"] + w["decode"] for w in records) * per,
        "worker: run": sum(w["run"] for w in records) * per,
        "worker: encode": sum(w["encode"] + w["dumps"] for w in records) * per,
        "worker: send": sum((w["sent"] or w["dumped"]) - w["dumped"] for w in records) * per,
        "caller: decode (results)": _dur(c["decode_results"]) * per,
        "caller: deliver": _dur(c["deliver"]) * per,
        "wall per item": (t1 - t0) * per,
        "chunks": float(done),
    }
    return out


STEP_ORDER = (
    "caller: job set-up", "caller: per-call cfg", "caller: encode", "caller: send",
    "worker: wake", "worker: decode", "worker: run", "worker: bookkeeping (executor)",
    "worker: encode", "worker: send", "caller: wake", "caller: decode",
    "caller: decode (results)", "caller: deliver", "caller: consumer hooks", "caller: job end",
    "caller: job end (calling thread woken)", "total (instrumented)", "wall per item", "chunks",
)


def print_steps(columns: Dict[str, Dict[str, float]], floor_us: float) -> None:
    names = list(columns)
    print(f"\n  {'step (us, median)':<42}" + "".join(f" {n:>22}" for n in names))
    for step in STEP_ORDER:
        if not any(step in col for col in columns.values()):
            continue
        line = f"  {step:<42}"
        for n in names:
            v = columns[n].get(step)
            if v is None:
                line += f" {'-':>22}"
            elif step == "chunks":
                line += f" {v:>22.0f}"
            else:
                line += f" {v:>22.2f}"
        print(line)
    print(f"  {'pipe floor (same run)':<42}" + f" {floor_us:>22.2f}")


def floor_us(calls: int, rounds: int = 5) -> float:
    floor = PipeFloor()
    try:
        got = []
        for _ in range(rounds):
            t0 = now()
            for _ in range(calls):
                floor.call()
            got.append((now() - t0) / calls)
        return statistics.median(got) * 1e6
    finally:
        floor.close()


# ------------------------------------------------------------- sections
def section_steps(cfg) -> List[str]:
    print(f"\n[steps] one kept-alive call, step by step; 1 worker, fork, {cfg.step_calls} calls "
          f"(medians); imap over {cfg.n_stream:,} tiny items (per item)")
    flush()
    steps = Steps()
    steps.install(StepSquare)
    try:
        # One worker process alive at a time: they share the record mapping.
        columns = {}
        with StepSquare(1, start_method="fork") as runner:
            for _ in range(50):
                runner([7])
            columns["runner([7])"] = measure_calls(steps, lambda: runner([7]), cfg.step_calls,
                                                   "runner")
        with ecp.Pool(1, start_method="fork") as pool:
            for _ in range(50):
                pool.apply(square, (7,))
            sum(pool.imap(square, range(1000)))
            columns["Pool.apply"] = measure_calls(
                steps, lambda: pool.apply(square, (7,)), cfg.step_calls, "apply")
            columns["Pool.imap, per item"] = measure_stream(steps, pool, cfg.n_stream)
        fl = floor_us(cfg.step_calls)
    finally:
        steps.uninstall()
    print_steps(columns, fl)
    return []


def _repeat(call: Callable[[], Any], expected: Any, calls: int) -> Callable[[], bool]:
    def run() -> bool:
        for _ in range(calls):
            if call() != expected:
                raise AssertionError("wrong result")
        return True
    return run


def _median_rows(title: str, got: Dict[str, Any], peer: str, calls: int) -> None:
    print(f"\n{title}")
    ref = got[peer]
    print(f"  {'contender':<46} {'us/call median':>15} {'best':>9} {'x floor (median)':>17} "
          f"{'per round':>12}")
    for name, res in got.items():
        ratios = [m / p for m, p in zip(res.times, ref.times)]
        line = f"  {name:<46} {res.median / calls * 1e6:>15.1f} {res.best / calls * 1e6:>9.1f}"
        if name == peer:
            line += f" {'(floor)':>17}"
        else:
            line += f" {res.median / ref.median:>16.2f}x {min(ratios):>5.1f}-{max(ratios):<5.1f}"
        print(line)


def _pinned(run: Callable[[], bool], cpu: int) -> Callable[[], bool]:
    """``run`` with the calling thread held on ``cpu`` (its affinity restored after)."""
    def pinned() -> bool:
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {cpu})
        try:
            return run()
        finally:
            os.sched_setaffinity(0, before)
    return pinned


#: the floor's round trip with both processes held on one CPU
ONE_CPU = "pipe round trip, both on one CPU"
#: the bare call with both processes held on one CPU
BARE_ONE_CPU = "bare Python call, both on one CPU"


def _placed_floors() -> Dict[str, Any]:
    """Context for the floor: the same round trip with both processes held on one
    CPU, and on two, and the bare Python call on one CPU (where the platform
    places threads and has two CPUs)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < 2:
        return {}
    here, there = cpus[0], cpus[1]
    return {
        ONE_CPU: (PipeFloor(here), here),
        "pipe round trip, on two CPUs": (PipeFloor(there), here),
        BARE_ONE_CPU: (BareCall(here), here),
    }


#: the least a Python call to a kept-alive process does (``BareCall``)
BARE = "bare Python call (a pickle each way)"


def section_floor(cfg) -> List[str]:
    calls = cfg.latency_calls
    rounds = cfg.rounds + 4
    print(f"\n[floor] kept-alive calls against a raw pipe round trip, 2 workers (1 for the "
          f"floor), {calls} calls per measurement, medians of {rounds} rounds")
    flush()
    ok = expect(True)
    floor = PipeFloor()
    bare = BareCall()
    placed = _placed_floors()
    try:
        with StepSquare(2) as runner, ecp.Pool(2) as pool, multiprocessing.Pool(2) as mp:
            got = take_turns([
                Contender("pipe round trip (1 byte each way)", _repeat(floor.call, True, calls),
                          ok),
                Contender(BARE, _repeat(bare.call, True, calls), ok),
                *(Contender(name, _pinned(_repeat(echo.call, True, calls), cpu), ok)
                  for name, (echo, cpu) in placed.items()),
                Contender("runner([7])", _repeat(lambda: runner([7]), 49, calls), ok),
                Contender("easycore Pool.apply(square, (7,))",
                          _repeat(lambda: pool.apply(square, (7,)), 49, calls), ok),
                Contender("multiprocessing.Pool.apply(square, (7,))",
                          _repeat(lambda: mp.apply(square, (7,)), 49, calls), ok),
            ], rounds)
    finally:
        floor.close()
        bare.close()
        for echo, _cpu in placed.values():
            echo.close()
    peer = "pipe round trip (1 byte each way)"
    _median_rows("  one call, kept alive", got, peer, calls)
    f = got[peer].median
    # The goal's floor is the round trip where it is cheapest: with two CPUs
    # free, the scheduler may put the floor's two processes on two CPUs for a
    # whole run (each wake-up then costs a CPU's exit from idle), which would
    # flatter every ratio against it. Held on one CPU it cannot.
    one_cpu = got.get(ONE_CPU)
    if one_cpu is not None and one_cpu.median < f:
        print(f"  (the goals' floor: the round trip held on one CPU, "
              f"{one_cpu.median / calls * 1e6:.1f} us, cheaper than the unplaced one in this run)")
        f = one_cpu.median
    # Context for the goal: what a Python call pays before any library's work
    # (as the floor, where it is cheapest).
    b = min(got[name].median for name in (BARE, BARE_ONE_CPU) if name in got)
    print(f"  against the {BARE} ({b / calls * 1e6:.1f} us, {b / f:.1f}x the floor): "
          + ", ".join(f"{name} {got[name].median / b:.2f}x" for name in (
              "runner([7])", "easycore Pool.apply(square, (7,))",
              "multiprocessing.Pool.apply(square, (7,))")))
    return [
        goal("runner([x]) vs the pipe floor (floor / time, at least 1/5)",
             f / got["runner([7])"].median, 0.2),
        goal("Pool.apply vs the pipe floor (floor / time, at least 1/5)",
             f / got["easycore Pool.apply(square, (7,))"].median, 0.2),
    ]


def consume(it) -> int:
    total = 0
    for r in it:
        total += r
    return total


def section_imap(cfg) -> List[str]:
    n = cfg.n_tiny
    items = range(n)
    rounds = cfg.rounds + 4
    ok = expect(sum(x * x for x in items))
    print(f"\n[imap] {n:,} tiny items (x * x), 2 workers, summed as they come; medians of "
          f"{rounds} rounds")
    flush()
    with ecp.Pool(2) as pool, multiprocessing.Pool(2) as mp:
        got = take_turns([
            Contender("multiprocessing.Pool.imap(chunksize=256)",
                      lambda: consume(mp.imap(square, items, chunksize=256)), ok),
            Contender("easycore Pool.imap (auto chunks)",
                      lambda: consume(pool.imap(square, items)), ok),
        ], rounds)
    peer = "multiprocessing.Pool.imap(chunksize=256)"
    print_rows("  imap over tiny items", got, peer, n, "items")
    mine = got["easycore Pool.imap (auto chunks)"]
    print(f"  medians: {got[peer].median / mine.median:.2f}x")
    return [goal("Pool.imap tiny items vs multiprocessing.Pool.imap(chunksize=256) (median)",
                 got[peer].median / mine.median, 1.5)]


class TopWrite(StepSquare):
    """The consumer writes a top-level key (``cfg.sum``) of a 100,000-key cfg."""


class NestedWrite(StepSquare):
    """The consumer writes a key of a 100,000-key nested node."""

    @staticmethod
    def consumer_init(cfg):
        cfg.sum = 0
        cfg.table.key5 = -1


def section_cfg(cfg) -> List[str]:
    calls = cfg.latency_calls
    rounds = cfg.rounds + 2
    print(f"\n[cfg] runner([7]) with a 100,000-key cfg vs a tiny one, 2 workers, {calls} calls "
          f"per measurement, medians of {rounds} rounds")
    flush()
    flat = {f"key{i}": i for i in range(100_000)}
    nested = {"table": dict(flat), "lists": {"a": [1, 2]}}
    ok = expect(True)
    with StepSquare(2) as tiny, TopWrite(2, cfg=flat) as top, \
            NestedWrite(2, cfg=nested) as deep:
        got = take_turns([
            Contender("tiny cfg", _repeat(lambda: tiny([7]), 49, calls), ok),
            Contender("100,000 top-level keys, consumer writes one",
                      _repeat(lambda: top([7]), 49, calls), ok),
            Contender("100,000-key nested node, consumer writes one",
                      _repeat(lambda: deep([7]), 49, calls), ok),
        ], rounds)
    peer = "tiny cfg"
    _median_rows("  runner([7])", got, peer, calls)
    return [
        goal("100,000 top-level keys vs a tiny cfg (tiny / big, at least 1/2)",
             got[peer].median / got["100,000 top-level keys, consumer writes one"].median, 0.5),
        goal("100,000-key nested node vs a tiny cfg (tiny / big, at least 1/2)",
             got[peer].median / got["100,000-key nested node, consumer writes one"].median, 0.5),
    ]


class Config:
    def __init__(self, args):
        quick = args.quick
        self.rounds = args.rounds or (3 if quick else 5)
        self.step_calls = 500 if quick else 2000
        self.n_stream = 100_000 if quick else 200_000
        self.n_tiny = 200_000
        self.latency_calls = 200 if quick else 1000


SECTIONS = {
    "steps": section_steps,
    "floor": section_floor,
    "imap": section_imap,
    "cfg": section_cfg,
}


def main():
    args = parse_args(__doc__)
    cfg = Config(args)
    wanted = args.only.split(",") if args.only else list(SECTIONS)
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}; known: {sorted(SECTIONS)}")
    print(f"easycore's small calls, step by step and against the pipe floor"
          f"{' (--quick)' if args.quick else ''}")
    print(f"  {machine_line()}")
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
