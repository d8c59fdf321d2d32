"""easycore's ``Pool`` against ``multiprocessing.Pool``, mpire and joblib (loky), same run.

Sections (``--only NAME,...``), each contender taking turns with the others,
best of the rounds with the spread of the rounds, every result checked; each
peer configured as its documentation recommends (automatic chunk sizes where
it has them, workers kept alive between calls):

* ``tiny``: ``x * x`` over 200,000 items, summed, with ``map`` (every pool
  picks its own chunk size) and with ``imap_unordered`` (the stdlib's with
  ``chunksize=256``). Goals: ``map`` at least 1.3x ``multiprocessing.Pool``
  and at least 1.0x mpire.
* ``results``: 100 fresh 8 MB NumPy arrays made by the workers (``imap``),
  every page checked by the caller. Goal: at least 5x ``multiprocessing.Pool``.
* ``inputs``: 100 fresh 8 MB NumPy arrays made by a generator in the caller
  and checked by the workers (``imap``). Goal: at least 5x
  ``multiprocessing.Pool``. joblib moves such inputs through memory-mapped
  files, its documented fast path.
* ``apply``: one ``apply`` and one ``map`` of 10 items on a kept-alive pool
  (per-call latency), against the stdlib's and mpire's.
* ``messages``: what pickling costs per chunk of tiny items, both ways,
  without pipes (issue 24, "one pickle per message"): a chunk's items and
  results as the pool sends them (``encode_items``, its ``RunChunk`` pickled
  and unpickled, ``decode_items``; the same back with ``ChunkDone``), beside
  two pickles per message (the list pickled, then the message holding those
  bytes: how every chunk travelled before short lists of plain values went
  inline) and one pickle per message written out by hand (the floor). For 1
  and 16 items, an apply's ``(args, kwds)`` and 64 items (past the inline
  bound: the transport pickles them, so it shows what the check costs). No
  goal: it prices the change. Run it on two trees (``PYTHONPATH``) to compare
  the pool's path before and after.

Arrays are new objects every time (``np.empty`` with the item written on every
4 KiB page, see ``bench_parallel``). mpire and joblib rows read "n/a" when they
are not installed (``requirements/bench.txt`` has them).

``--quick`` fits in a few minutes on a 2-core machine; the default is sized
for a 16-core GPU node. Run: ``scripts/bench pool`` or
``python benchmarks/bench_pool.py [--quick] [--rounds N] [--only tiny,results]``.
"""

from __future__ import annotations

import multiprocessing
import pickle
import sys
import time

from _harness import (
    Contender,
    available_cpus,
    expect,
    flush,
    goal,
    machine_line,
    parse_args,
    print_rows,
    take_turns,
)
from bench_parallel import array_checksum, fresh_array, fresh_arrays, page_sum, square

import easycore.common.parallel as ecp
from easycore.common.parallel.worker.protocol import ChunkDone, RunChunk

try:
    from mpire import WorkerPool
except ImportError:  # optional peer
    WorkerPool = None
try:
    from joblib import Parallel, delayed
except ImportError:  # optional peer
    Parallel = delayed = None

STDLIB, EASYCORE, MPIRE, JOBLIB = "multiprocessing.Pool", "easycore Pool", "mpire WorkerPool", \
    "joblib Parallel (loky)"


class Pools:
    """Every contender's pool, started once and kept alive (as their docs advise)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.stdlib = multiprocessing.Pool(workers)
        self.easycore = ecp.Pool(workers)
        self._mpire = {}
        self.mpire = self if WorkerPool is not None else None
        self.joblib_gen = None
        self.joblib = None
        if Parallel is not None:
            self.joblib = Parallel(n_jobs=workers)
            self.joblib.__enter__()
            self.joblib_gen = Parallel(n_jobs=workers, return_as="generator")
            self.joblib_gen.__enter__()

    def mpire_for(self, use: str):
        """An mpire pool for one kind of call, made on first use.

        ``keep_alive=True``, as mpire's docs advise for a pool that serves
        several calls (without it every ``map`` starts new workers); one pool
        per kind of call, because a kept-alive mpire 2.10 pool that ran one
        kind (``map``, ``imap_unordered``, ``apply``) hands the next kind's
        tasks to the previous kind's helper and fails.
        """
        pool = self._mpire.get(use)
        if pool is None:
            pool = self._mpire[use] = WorkerPool(n_jobs=self.workers, keep_alive=True)
            pool.__enter__()
        return pool

    def close(self) -> None:
        self.stdlib.terminate()
        self.easycore.terminate()
        for pool in self._mpire.values():
            pool.__exit__(None, None, None)
        for p in (self.joblib, self.joblib_gen):
            if p is not None:
                p.__exit__(None, None, None)

    def __enter__(self) -> Pools:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def consume_sum(results):
    total = 0
    for r in results:
        total += r
    return total


def consume_pages(arrays):
    total = 0.0
    for a in arrays:
        total += page_sum(a)
    return total


def section_tiny(cfg, pools):
    n = cfg.n_tiny
    items = range(n)
    ok = expect(sum(x * x for x in items))
    print(f"\n[tiny] {n:,} items of x * x, {pools.workers} workers, best of {cfg.rounds + 4} "
          "rounds")
    flush()
    maps = [
        Contender(f"{STDLIB}.map (auto chunksize)", lambda: sum(pools.stdlib.map(square, items)),
                  ok),
        Contender(f"{EASYCORE}.map (auto chunks)", lambda: sum(pools.easycore.map(square, items)),
                  ok),
    ]
    if pools.mpire is not None:
        maps.append(Contender(f"{MPIRE}.map (auto chunk_size)",
                              lambda: sum(pools.mpire_for("map").map(square, items)), ok))
    if pools.joblib is not None:
        maps.append(Contender(f'{JOBLIB} (batch_size="auto")',
                              lambda: sum(pools.joblib(delayed(square)(x) for x in items)), ok))
    # One map of 200,000 tiny items takes some 30 ms: more rounds for the same trust.
    got = take_turns(maps, cfg.rounds + 4)
    peer = maps[0].name
    print_rows("  map, then sum", got, peer, n, "items")
    ours = got[maps[1].name].best
    lines = [goal("tiny items, map vs multiprocessing.Pool", got[peer].best / ours, 1.3)]
    if pools.mpire is not None:
        lines.append(goal("tiny items, map vs mpire", got[maps[2].name].best / ours, 1.0))
    flush()
    unordered = [
        Contender(f"{STDLIB}.imap_unordered(chunksize=256)",
                  lambda: consume_sum(pools.stdlib.imap_unordered(square, items, chunksize=256)),
                  ok),
        Contender(f"{EASYCORE}.imap_unordered (auto chunks)",
                  lambda: consume_sum(pools.easycore.imap_unordered(square, items)), ok),
    ]
    if pools.mpire is not None:
        unordered.append(Contender(
            f"{MPIRE}.imap_unordered (auto chunk_size)",
            lambda: consume_sum(pools.mpire_for("imap_unordered").imap_unordered(square, items)),
            ok))
    got = take_turns(unordered, cfg.rounds + 4)
    print_rows("  imap_unordered, summed by the caller as results come", got, unordered[0].name,
               n, "items")
    return lines


def section_arrays(cfg, pools, direction):
    n = cfg.n_arrays
    ok = expect(array_checksum(n))
    where = ("made by the workers, pages checked by the caller" if direction == "results"
             else "made by a generator in the caller, pages checked by the workers")
    print(f"\n[{direction}] {n} fresh 8 MB arrays {where}; imap, {pools.workers} workers, best "
          f"of {cfg.rounds} rounds")
    flush()
    if direction == "results":
        contenders = [
            Contender(f"{STDLIB}.imap (pickled through a pipe)",
                      lambda: consume_pages(pools.stdlib.imap(fresh_array, range(n))), ok),
            Contender(f"{EASYCORE}.imap (shared memory)",
                      lambda: consume_pages(pools.easycore.imap(fresh_array, range(n))), ok),
        ]
        if pools.mpire is not None:
            contenders.append(Contender(
                f"{MPIRE}.imap",
                lambda: consume_pages(pools.mpire_for("imap").imap(fresh_array, range(n))), ok))
        if pools.joblib_gen is not None:
            contenders.append(Contender(
                f'{JOBLIB} (return_as="generator")',
                lambda: consume_pages(pools.joblib_gen(delayed(fresh_array)(i)
                                                       for i in range(n))), ok))
    else:
        contenders = [
            Contender(f"{STDLIB}.imap (pickled through a pipe)",
                      lambda: consume_sum(pools.stdlib.imap(page_sum, fresh_arrays(n))), ok),
            Contender(f"{EASYCORE}.imap (shared memory)",
                      lambda: consume_sum(pools.easycore.imap(page_sum, fresh_arrays(n))), ok),
        ]
        if pools.mpire is not None:
            contenders.append(Contender(
                f"{MPIRE}.imap (iterable_len given)",
                lambda: consume_sum(pools.mpire_for("imap_in").imap(page_sum, fresh_arrays(n),
                                                                    iterable_len=n)), ok))
        if pools.joblib_gen is not None:
            contenders.append(Contender(
                f'{JOBLIB} (return_as="generator", memmapped inputs)',
                lambda: consume_sum(pools.joblib_gen(delayed(page_sum)(a)
                                                     for a in fresh_arrays(n))), ok))
    got = take_turns(contenders, cfg.rounds)
    print_rows(f"  8 MB arrays as {direction}", got, contenders[0].name, n, "arrays",
               nbytes=8 << 20)
    return [goal(f"8 MB {direction} vs multiprocessing.Pool",
                 got[contenders[0].name].best / got[contenders[1].name].best, 5.0)]


def section_apply(cfg, pools):
    calls = cfg.latency_calls
    ten = list(range(10))
    e_ten = [x * x for x in ten]
    print(f"\n[apply] per-call latency on kept-alive pools, {pools.workers} workers, {calls} "
          f"calls per measurement, best of {cfg.rounds} rounds")
    flush()

    def repeat(call, expected):
        def run():
            for _ in range(calls):
                if call() != expected:
                    raise AssertionError("wrong result")
            return True
        return run

    ok = expect(True)
    one = [
        Contender(f"{STDLIB}.apply", repeat(lambda: pools.stdlib.apply(square, (7,)), 49), ok),
        Contender(f"{EASYCORE}.apply", repeat(lambda: pools.easycore.apply(square, (7,)), 49),
                  ok),
    ]
    if pools.mpire is not None:
        one.append(Contender(f"{MPIRE}.apply",
                             repeat(lambda: pools.mpire_for("apply").apply(square, (7,)), 49),
                             ok))
    tens = [
        Contender(f"{STDLIB}.map, 10 items", repeat(lambda: pools.stdlib.map(square, ten), e_ten),
                  ok),
        Contender(f"{EASYCORE}.map, 10 items",
                  repeat(lambda: pools.easycore.map(square, ten), e_ten), ok),
    ]
    if pools.mpire is not None:
        tens.append(Contender(f"{MPIRE}.map, 10 items",
                              repeat(lambda: pools.mpire_for("map10").map(square, ten), e_ten), ok))
    got1 = take_turns(one, cfg.rounds)
    got10 = take_turns(tens, cfg.rounds)
    print_rows("  apply(square, (7,))", got1, one[0].name, calls, "call", per_call=True)
    print_rows("  map(square, range(10))", got10, tens[0].name, calls, "call", per_call=True)
    return [
        goal("apply latency vs multiprocessing.Pool (speed)",
             got1[one[0].name].best / got1[one[1].name].best, 1.0),
        goal("map of 10 latency vs multiprocessing.Pool (speed)",
             got10[tens[0].name].best / got10[tens[1].name].best, 1.0),
    ]


def _chunk_now(transport, worker, items):
    """One chunk both ways as the pool sends it: the transport's payloads inside messages."""
    payload, _ = transport.encode_items(0, items)
    message = pickle.loads(pickle.dumps(RunChunk(1, 0, payload, None, (), None, 0),
                                        protocol=pickle.HIGHEST_PROTOCOL))
    results = [_work(x) for x in worker.decode_items(message.items)]
    payload, nbytes = worker.encode_results(results)
    done = pickle.loads(pickle.dumps(ChunkDone(1, 0, payload, len(results), 0.0, nbytes, [],
                                               None), protocol=pickle.HIGHEST_PROTOCOL))
    return transport.decode_results(0, done.results)


def _chunk_twice(items):
    """The same chunk with each list pickled first, then its message (2 and 2 each way)."""
    data = pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL)
    message = pickle.loads(pickle.dumps(RunChunk(1, 0, data, None, (), None, 0),
                                        protocol=pickle.HIGHEST_PROTOCOL))
    results = [_work(x) for x in pickle.loads(message.items)]
    data = pickle.dumps(results, protocol=pickle.HIGHEST_PROTOCOL)
    done = pickle.loads(pickle.dumps(ChunkDone(1, 0, data, len(results), 0.0, len(data), [],
                                               None), protocol=pickle.HIGHEST_PROTOCOL))
    return pickle.loads(done.results)


def _chunk_inline(items):
    """The same chunk with each list inline in its message: one pickle per message."""
    message = pickle.loads(pickle.dumps(RunChunk(1, 0, items, None, (), None, 0),
                                        protocol=pickle.HIGHEST_PROTOCOL))
    results = [_work(x) for x in message.items]
    done = pickle.loads(pickle.dumps(ChunkDone(1, 0, results, len(results), 0.0, 0, [], None),
                                     protocol=pickle.HIGHEST_PROTOCOL))
    return done.results


def _work(x):
    """``x * x``, or an apply's call: ``square(*args, **kwds)``."""
    if type(x) is tuple:
        args, kwds = x
        return square(*args, **kwds)
    return x * x


#: (what, the chunk's items) of the messages section
MESSAGE_CHUNKS = (
    ("1 item", [7]),
    ("an apply's (args, kwds)", [((7,), {})]),
    ("16 items", list(range(16))),
    ("64 items", list(range(64))),
)


def section_messages(cfg):
    chunks = cfg.message_chunks
    print(f"\n[messages] pickling per chunk of tiny items, both ways, no pipes; {chunks:,} "
          f"chunks, best of {cfg.rounds} rounds; ratios: two pickles per message over the row")
    transport = ecp.SharedMemoryTransport()  # the caller's; the worker's is its pickled copy
    worker = pickle.loads(pickle.dumps(transport))
    worker.bind_worker(0)
    try:
        for what, items in MESSAGE_CHUNKS:
            ok = expect([_work(x) for x in items])
            rows = [
                Contender(f"two pickles per message (before), {what}",
                          lambda items=items: [_chunk_twice(items) for _ in range(chunks)][-1],
                          ok),
                Contender(f"the pool's path (this tree), {what}",
                          lambda items=items: [_chunk_now(transport, worker, items)
                                               for _ in range(chunks)][-1], ok),
                Contender(f"one pickle per message (the floor), {what}",
                          lambda items=items: [_chunk_inline(items)
                                               for _ in range(chunks)][-1], ok),
            ]
            got = take_turns(rows, cfg.rounds)
            print_rows(f"  a chunk of {what} both ways", got, rows[0].name, chunks, "chunk",
                       per_call=True)
            flush()
    finally:
        transport.cleanup()
    return []


class Config:
    def __init__(self, args):
        self.cpus = available_cpus()
        quick = args.quick
        self.rounds = args.rounds or (3 if quick else 5)
        self.n_tiny = 200_000
        self.n_arrays = 40 if quick else 100
        self.latency_calls = 200 if quick else 1000
        self.message_chunks = 20_000 if quick else 100_000
        self.workers = args.workers or self.cpus
        self.array_workers = args.workers or min(4, self.cpus)


SECTIONS = ("tiny", "results", "inputs", "apply", "messages")


def main():
    args = parse_args(__doc__, lambda p: p.add_argument(
        "--workers", type=int, default=None,
        help="workers of every pool (default: the CPUs this process may use; 4 at most for "
             "the 8 MB arrays)"))
    cfg = Config(args)
    wanted = args.only.split(",") if args.only else list(SECTIONS)
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}; known: {list(SECTIONS)}")
    import importlib.metadata as md

    def version(name):
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return "not installed"

    print(f"easycore Pool vs multiprocessing.Pool, mpire {version('mpire')}, joblib "
          f"{version('joblib')}{' (--quick)' if args.quick else ''}")
    print(f"  {machine_line()}")
    print("  ratios: the peer's best time over the contender's (above 1.00x: faster than "
          "multiprocessing.Pool); 'per round': the same ratio round by round; 'spread': "
          "worst round over best")
    start = time.perf_counter()
    goals = []
    if "tiny" in wanted or "apply" in wanted:
        with Pools(cfg.workers) as pools:
            if "tiny" in wanted:
                goals += section_tiny(cfg, pools)
            if "apply" in wanted:
                goals += section_apply(cfg, pools)
    if "results" in wanted or "inputs" in wanted:
        with Pools(cfg.array_workers) as pools:
            for direction in ("results", "inputs"):
                if direction in wanted:
                    goals += section_arrays(cfg, pools, direction)
    if "messages" in wanted:
        goals += section_messages(cfg)
    print("\nGoals (this run):")
    for line in goals:
        print(line)
    print(f"\n(total {time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
