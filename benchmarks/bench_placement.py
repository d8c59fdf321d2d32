"""Benchmark easycore.torch.placement.plan_placement: time and quality.

machin's ``ModelAssigner`` is the peer the issue names, but it cannot be
installed here: machin's ``parallel.distributed`` no longer imports on
current torch (it calls ``broadcast_multigpu``, removed from
``torch.distributed``), and its assigner imports it. So the reference is an
exhaustive enumerator (every assignment of n models to m devices), measured
in this run:

1. **quality**, 300 random instances of up to 8 models on 2 to 4 devices
   (capacities from roomy to tight, random traffic): the plan's largest
   compute load over the optimum's, and, where the loads tie, its
   cross-device traffic over the optimum's. Both for ``plan_placement`` (exact
   up to 8 models) and for its heuristic alone (greedy, moves, swaps: the path
   beyond 8 models), forced on the same instances;
2. **time**, best of 20: ``plan_placement`` for 8 models (exact search)
   beside the enumerator, and for 50 models on 8 devices, with and without
   traffic (goal: under 10 ms).

Run: ``scripts/bench placement`` or ``python benchmarks/bench_placement.py`` (~30 s).
"""

from __future__ import annotations

import itertools
import platform
import random
import statistics
import time
from functools import partial
from typing import Callable, Dict, List, Optional, Tuple

from easycore.torch.placement import plan_placement
from easycore.torch.placement.problem import Problem
from easycore.torch.placement.search import solve

INSTANCES = 300
REPEAT = 20


def cost(plan, devices, compute, traffic) -> Tuple[float, float]:
    loads = {d: 0.0 for d in devices}
    for device, c in zip(plan, compute):
        loads[device] += c
    return max(loads.values()), sum(w for (i, j), w in traffic.items() if plan[i] != plan[j])


def fits(plan, sizes, capacity, reserve) -> bool:
    used = {d: 0.0 for d in capacity}
    for device, size in zip(plan, sizes):
        used[device] += size
    return all(used[d] <= capacity[d] * (1 - reserve) for d in capacity)


def brute_force(sizes, devices, capacity, compute, traffic, reserve) -> Optional[tuple]:
    best = None
    for combo in itertools.product(devices, repeat=len(sizes)):
        if fits(combo, sizes, capacity, reserve):
            load, cross = cost(combo, devices, compute, traffic)
            key = (round(load, 9), round(cross, 9))
            if best is None or key < best:
                best = key
    return best


def instance(rng: random.Random, n: int, m: int):
    sizes = [float(rng.randint(1, 40)) for _ in range(n)]
    compute = [float(rng.randint(1, 20)) for _ in range(n)]
    devices = [f"cuda:{k}" for k in range(m)]
    slack = rng.choice([1.0, 1.3, 2.0, 4.0])
    capacity = {d: rng.uniform(0.7, 1.3) * slack * sum(sizes) / m / 0.9 for d in devices}
    traffic = {}
    for _ in range(rng.randint(0, 2 * n)):
        i, j = rng.sample(range(n), 2)
        traffic[(i, j)] = float(rng.randint(1, 9))
    return sizes, devices, capacity, compute, traffic


def heuristic(sizes, devices, capacity, compute, traffic, reserve) -> Optional[List[str]]:
    problem = Problem.build(sizes, devices, capacity, compute, traffic, reserve, lambda d: 0)
    pos = solve(problem, exact_models=0)
    return None if pos is None else [devices[d] for d in pos]


def best_of(call: Callable[[], object], repeat: int = REPEAT) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def quality() -> None:
    rng = random.Random(2024)
    stats: Dict[str, Dict[str, list]] = {
        name: {"load": [], "traffic": [], "missed": []} for name in ("plan_placement", "heuristic")
    }
    feasible = 0
    for _ in range(INSTANCES):
        n, m = rng.randint(3, 8), rng.choice([2, 3, 4])
        sizes, devices, capacity, compute, traffic = instance(rng, n, m)
        optimum = brute_force(sizes, devices, capacity, compute, traffic, 0.1)
        if optimum is None:
            continue
        feasible += 1
        planners = {
            "plan_placement": partial(plan_placement, sizes, devices, capacity=capacity,
                                      compute=compute, traffic=traffic),
            "heuristic": partial(heuristic, sizes, devices, capacity, compute, traffic, 0.1),
        }
        for name, planner in planners.items():
            plan = planner()
            if plan is None:
                stats[name]["missed"].append(1)
                continue
            assert fits(plan, sizes, capacity, 0.1), name
            load, cross = cost(plan, devices, compute, traffic)
            stats[name]["load"].append(load / optimum[0])
            if abs(load - optimum[0]) <= 1e-9 and optimum[1] > 0:
                stats[name]["traffic"].append(cross / optimum[1])
    print(f"\nQuality vs the exhaustive optimum: {feasible} feasible instances of 3-8 models "
          f"on 2-4 devices (of {INSTANCES}); ratios >= 1, 1.00 is optimal")
    for name, s in stats.items():
        loads, traffic = s["load"], s["traffic"]
        within = sum(r <= 1.05 + 1e-12 for r in loads) / len(loads)
        optimal = sum(r <= 1 + 1e-9 for r in loads) / len(loads)
        line = (f"  {name:15s} load: mean {statistics.mean(loads):.4f}, worst {max(loads):.3f}, "
                f"optimal {optimal:6.1%}, within 5% {within:6.1%}")
        if traffic:
            line += f"; traffic at equal load: mean {statistics.mean(traffic):.3f}, " \
                    f"worst {max(traffic):.3f}"
        if s["missed"]:
            line += f"; found no fitting plan {len(s['missed'])}x"
        print(line)


def timing() -> None:
    rng = random.Random(5)
    sizes, devices, capacity, compute, traffic = instance(rng, 8, 4)
    while brute_force(sizes, devices, capacity, compute, traffic, 0.1) is None:
        sizes, devices, capacity, compute, traffic = instance(rng, 8, 4)
    exact = best_of(lambda: plan_placement(sizes, devices, capacity=capacity, compute=compute,
                                           traffic=traffic))
    enum = best_of(lambda: brute_force(sizes, devices, capacity, compute, traffic, 0.1), 3)
    print(f"\nTime, best of {REPEAT}:")
    print(f"  8 models, 4 devices: plan_placement {exact * 1e3:8.2f} ms; "
          f"exhaustive enumeration {enum * 1e3:8.1f} ms ({enum / exact:.0f}x)")
    rng = random.Random(6)
    sizes = [rng.uniform(1, 100) for _ in range(50)]
    devices = [f"cuda:{k}" for k in range(8)]
    capacity = {d: 1.5 * sum(sizes) / 8 / 0.9 for d in devices}
    pipeline = {(i, i + 1): rng.uniform(0, 5) for i in range(49)}
    for label, tr in (("no traffic", None), ("a 50-stage pipeline's traffic", pipeline)):
        seconds = best_of(partial(plan_placement, sizes, devices, capacity=capacity, traffic=tr))
        plan = plan_placement(sizes, devices, capacity=capacity, traffic=tr)
        load, cross = cost(plan, devices, sizes, tr or {})
        bound = max(sum(sizes) / 8, max(sizes))
        print(f"  50 models, 8 devices, {label}: {seconds * 1e3:6.2f} ms "
              f"(goal < 10 ms: {'met' if seconds < 0.01 else 'NOT met'}); largest load "
              f"{load / bound:.3f}x the lower bound; cross-device traffic {cross:.1f}")


def main() -> None:
    print(f"Python {platform.python_version()}. machin's ModelAssigner, the peer, cannot be "
          "installed here:\nmachin.parallel.distributed calls torch.distributed."
          "broadcast_multigpu, which current torch no longer has,\nand the assigner imports "
          "it; the reference is exhaustive enumeration instead.")
    quality()
    timing()


if __name__ == "__main__":
    main()
