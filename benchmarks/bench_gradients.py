"""Benchmark GradientServer pushes per second with 1, 2 and 4 reducer processes.

``CLIENTS`` client processes push the gradients of an ~8 MiB model (eight
512x512 linear layers) as fast as the server takes them; the time runs from
the first push to ``flush()`` returning, so every gradient was applied (the
server drops none: a full queue makes pushes wait). With ``reducers=N`` the
parameters are sharded over N reducer processes, each summing its share and
stepping its own optimizer; a client sends the shards at once. One reducer is
the peer. Each reducer runs torch on one thread. Expect gains only with
cores to spare: on a 2-core machine the clients and reducers share two cores.

Run: ``scripts/bench gradients`` or ``python benchmarks/bench_gradients.py [--quick]``.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import Contender, flush, machine_line, parse_args, print_rows, take_turns

from easycore.torch.parallel import GradientServer

CLIENTS = 2
LAYERS = 8
WIDTH = 512


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])


def sgd(params):
    return torch.optim.SGD(params, lr=1e-6)


def push_many(server: GradientServer, pushes: int) -> int:
    torch.set_num_threads(1)
    model = make_model()
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    for _ in range(pushes):
        server.push_gradients(model)
    server.close()
    return pushes


def run(pool, server: GradientServer, pushes: int) -> int:
    before = server.stats()["applied"]
    pool.starmap(push_many, [(server, pushes)] * CLIENTS)
    server.flush(timeout=600)
    return server.stats()["applied"] - before


def main() -> None:
    cfg = parse_args(__doc__)
    rounds = cfg.rounds or (3 if cfg.quick else 5)
    pushes = 20 if cfg.quick else 60
    print(machine_line())
    ctx = multiprocessing.get_context("spawn")
    # One torch thread per reducer: the rows compare reducer processes, not
    # thread pools (on a busy machine, OpenMP threads that wait for each
    # other would decide the numbers).
    servers = {n: GradientServer.start(make_model(), sgd, reduce_batch_size=4, reducers=n,
                                       flush_after=0.5, backend_options={"cpu_threads": 1})
               for n in (1, 2, 4)}
    try:
        with ctx.Pool(CLIENTS) as pool:
            contenders = [
                Contender(f"GradientServer(reducers={n})",
                          lambda s=s: run(pool, s, pushes),
                          lambda got: None if got == CLIENTS * pushes else
                          (_ for _ in ()).throw(AssertionError(f"applied {got}")))
                for n, s in servers.items()
            ]
            got = take_turns(contenders, rounds)
            print_rows(f"pushes of an {LAYERS * WIDTH * (WIDTH + 1) * 4 / 2**20:.1f} MiB model "
                       f"from {CLIENTS} client processes, until applied", got,
                       contenders[0].name, CLIENTS * pushes, "pushes")
            flush()
    finally:
        for s in servers.values():
            s.close()


if __name__ == "__main__":
    t0 = time.monotonic()
    main()
