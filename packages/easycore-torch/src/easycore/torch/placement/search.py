"""Finding a placement: greedy start, local search, and exact search when small.

The objective, in order: no device above its usable capacity (a hard
constraint); the smallest largest load of any device (its compute divided
by its speed); then the least traffic, each pair's weight times the distance
between their devices. Costs are compared with
a relative tolerance of 1e-9, so float rounding never decides a tie.

* `greedy`: models in decreasing order (of compute, or of size, which
  packs tight capacities better), each onto the device that ends least
  loaded, keeping traffic local on ties;
* `pack`: best fit decreasing by size, for capacities too tight for
  the greedy start;
* `balance`: moves and swaps off the most loaded devices while they
  lower (largest load, number of devices carrying it);
* `untangle`: with the largest load fixed, moves and swaps that cut
  cross-device traffic;
* `exact`: branch and bound over every assignment, for few models,
  seeded with the best of the above; devices of equal capacity that are
  still empty are interchangeable, so only the first is tried; a node
  budget bounds its time (the incumbent is kept when it runs out).

Everything iterates in a fixed order: the same problem gives the same plan.
"""

from __future__ import annotations

import contextlib
from typing import List, Optional, Sequence, Tuple

from .problem import Problem

__all__ = ["EXACT_MODELS", "EXACT_NODES", "balance", "exact", "greedy", "pack", "solve", "untangle"]

#: problems with at most this many models are solved exactly (within the node budget)
EXACT_MODELS = 8
#: search nodes the exact search may visit
EXACT_NODES = 100_000

Cost = Tuple[float, float]


class _Tolerance:
    def __init__(self, p: Problem) -> None:
        self.load = 1e-9 * max(1.0, sum(p.compute) / min(p.speed))
        far = max(max(row) for row in p.distance)
        self.traffic = 1e-9 * max(1.0, far * sum(w for edges in p.neighbours for _, w in edges))

    def better(self, a: Cost, b: Optional[Cost]) -> bool:
        if b is None:
            return True
        if a[0] < b[0] - self.load:
            return True
        return abs(a[0] - b[0]) <= self.load and a[1] < b[1] - self.traffic


class _State:
    """A (partial) assignment with its per-device totals."""

    def __init__(self, p: Problem, pos: Optional[Sequence[int]] = None) -> None:
        self.p = p
        self.pos = [-1] * p.n
        self.loads = [0.0] * p.m
        self.used = [0.0] * p.m
        self.members: List[List[int]] = [[] for _ in range(p.m)]
        for i, d in enumerate(pos or []):
            self.put(i, d)

    def put(self, i: int, d: int) -> None:
        self.pos[i] = d
        self.loads[d] += self.p.compute[i]
        self.used[d] += self.p.sizes[i]
        self.members[d].append(i)

    def take(self, i: int) -> None:
        d = self.pos[i]
        self.pos[i] = -1
        self.loads[d] -= self.p.compute[i]
        self.used[d] -= self.p.sizes[i]
        self.members[d].remove(i)

    def move(self, i: int, d: int) -> None:
        self.take(i)
        self.put(i, d)

    def time(self, d: int, extra: float = 0.0) -> float:
        """Load of device ``d`` with ``extra`` compute added: compute / speed."""
        return (self.loads[d] + extra) / self.p.speed[d]

    def link_cost(self, i: int, d: int) -> float:
        """Traffic cost of model ``i`` on device ``d`` to its placed neighbours."""
        pos, row = self.pos, self.p.distance[d]
        return sum(w * row[pos[j]] for j, w in self.p.neighbours[i] if pos[j] >= 0)

    def traffic_delta(self, i: int, b: int) -> float:
        """Change of traffic cost if model ``i`` moved to device ``b``."""
        a, pos = self.pos[i], self.pos
        to_a, to_b = self.p.distance[a], self.p.distance[b]
        return sum(w * (to_b[pos[j]] - to_a[pos[j]]) for j, w in self.p.neighbours[i])

    def swap_delta(self, i: int, j: int) -> float:
        a, b = self.pos[i], self.pos[j]
        first = self.traffic_delta(i, b)
        self.pos[i] = b  # only the position matters for the second delta
        second = self.traffic_delta(j, a)
        self.pos[i] = a
        return first + second


def greedy(p: Problem, order: Sequence[int]) -> Optional[List[int]]:
    """Place models in ``order``, each on the device that ends least loaded; None if stuck."""
    st = _State(p)
    for i in order:
        best = None
        for d in range(p.m):
            if st.used[d] + p.sizes[i] > p.capacity[d]:
                continue
            key = (st.time(d, p.compute[i]), st.link_cost(i, d), d)
            if best is None or key < best:
                best = key
        if best is None:
            return None
        st.put(i, best[2])
    return st.pos


def pack(p: Problem) -> Optional[List[int]]:
    """Best fit decreasing: largest model first, onto the device it fills most; None if stuck.

    Ignores the loads: a start for tight capacities, where `greedy`
    spreads models out and then finds no room for a big one.
    """
    st = _State(p)
    for i in sorted(range(p.n), key=lambda i: (-p.sizes[i], -p.compute[i], i)):
        room = [(p.capacity[d] - st.used[d] - p.sizes[i], d) for d in range(p.m)]
        fitting = [r for r in room if r[0] >= 0]
        if not fitting:
            return None
        st.put(i, min(fitting)[1])
    return st.pos


def balance(p: Problem, pos: List[int], tol: _Tolerance, rounds: int) -> List[int]:
    """Lower the largest load with moves, then swaps, off the most loaded devices."""
    st = _State(p, pos)
    c, s, cap = p.compute, p.sizes, p.capacity
    for _ in range(rounds):
        top = max(st.time(d) for d in range(p.m))
        limit = top - tol.load  # a device must end below this to make progress
        heavy = [d for d in range(p.m) if st.time(d) > limit]
        best = None
        for d in heavy:
            for i in st.members[d]:
                for e in range(p.m):
                    if e == d or st.used[e] + s[i] > cap[e] or st.time(e, c[i]) >= limit:
                        continue
                    peak = max(st.time(e, c[i]), st.time(d, -c[i]))
                    key = (peak, st.traffic_delta(i, e), i, e, -1)
                    if best is None or key < best:
                        best = key
        if best is None:  # no move helps: try swapping with a smaller model elsewhere
            for d in heavy:
                for i in st.members[d]:
                    for e in range(p.m):
                        if e == d:
                            continue
                        for j in st.members[e]:
                            new_d = st.time(d, c[j] - c[i])
                            new_e = st.time(e, c[i] - c[j])
                            if new_d >= limit or new_e >= limit:
                                continue
                            if (st.used[d] - s[i] + s[j] > cap[d]
                                    or st.used[e] - s[j] + s[i] > cap[e]):
                                continue
                            key = (max(new_d, new_e), st.swap_delta(i, j), i, e, j)
                            if best is None or key < best:
                                best = key
        if best is None:
            break
        _, _, i, e, j = best
        if j < 0:
            st.move(i, e)
        else:
            d = st.pos[i]
            st.move(i, e)
            st.move(j, d)
    return st.pos


def untangle(p: Problem, pos: List[int], tol: _Tolerance, rounds: int) -> List[int]:
    """Cut cross-device traffic without raising the largest load or overfilling a device."""
    if not any(p.neighbours):
        return pos
    st = _State(p, pos)
    c, s, cap = p.compute, p.sizes, p.capacity
    limit = max(st.time(d) for d in range(p.m)) + tol.load
    for _ in range(rounds):
        best = None
        for i in range(p.n):
            if not p.neighbours[i]:
                continue
            a = st.pos[i]
            for e in range(p.m):
                if e == a or st.used[e] + s[i] > cap[e] or st.time(e, c[i]) > limit:
                    continue
                key = (st.traffic_delta(i, e), i, e, -1)
                if key[0] < -tol.traffic and (best is None or key < best):
                    best = key
            # swaps towards a neighbour's device (any device, when distances differ)
            towards = {st.pos[j] for j, _ in p.neighbours[i]} if p.uniform else set(range(p.m))
            for e in sorted(towards - {a}):
                for j in st.members[e]:
                    if (st.time(a, c[j] - c[i]) > limit or st.time(e, c[i] - c[j]) > limit
                            or st.used[a] - s[i] + s[j] > cap[a]
                            or st.used[e] - s[j] + s[i] > cap[e]):
                        continue
                    key = (st.swap_delta(i, j), i, e, j)
                    if key[0] < -tol.traffic and (best is None or key < best):
                        best = key
        if best is None:
            break
        _, i, e, j = best
        if j < 0:
            st.move(i, e)
        else:
            a = st.pos[i]
            st.move(i, e)
            st.move(j, a)
    return st.pos


class _OutOfBudget(Exception):
    pass


def exact(p: Problem, incumbent: Optional[List[int]], tol: _Tolerance,
          budget: int = EXACT_NODES) -> Optional[List[int]]:
    """The best assignment (branch and bound), or the best found within ``budget`` nodes."""
    n, m = p.n, p.m
    c, s, cap, speed = p.compute, p.sizes, p.capacity, p.speed
    floor = sum(c) / sum(speed)  # no plan's largest load is below this
    order = sorted(range(n), key=lambda i: (-c[i], -s[i], i))
    best_pos = list(incumbent) if incumbent is not None else None
    best = p.cost(best_pos) if best_pos is not None else None
    st = _State(p)
    nodes = 0

    def visit(k: int, top: float, cross: float) -> None:
        nonlocal best, best_pos, nodes
        if k == n:
            if tol.better((top, cross), best):
                best, best_pos = (top, cross), list(st.pos)
            return
        nodes += 1
        if nodes > budget:
            raise _OutOfBudget
        i = order[k]
        tried_empty = set()
        for d in sorted(range(m), key=lambda d: (st.time(d, c[i]), d)):
            if st.used[d] + s[i] > cap[d]:
                continue
            if not st.members[d] and p.uniform:
                # empty devices of one capacity and speed are interchangeable
                # (when every pair of devices is equally far apart)
                if (cap[d], speed[d]) in tried_empty:
                    continue
                tried_empty.add((cap[d], speed[d]))
            new_top = max(top, st.time(d, c[i]))
            bound = max(new_top, floor)
            new_cross = cross + st.link_cost(i, d)
            if best is not None:
                if bound > best[0] + tol.load:
                    continue
                if bound >= best[0] - tol.load and new_cross >= best[1] - tol.traffic:
                    continue
            st.put(i, d)
            try:
                visit(k + 1, new_top, new_cross)
            finally:
                st.take(i)

    with contextlib.suppress(_OutOfBudget):  # the best plan found within the budget
        visit(0, 0.0, 0.0)
    return best_pos


def solve(p: Problem, exact_models: int = EXACT_MODELS) -> Optional[List[int]]:
    """The plan as device indices, or None when no assignment fitting the capacities was found."""
    if p.n == 0:
        return []
    tol = _Tolerance(p)
    rounds = 4 * p.n + 10
    incumbent: Optional[List[int]] = None
    by_compute = sorted(range(p.n), key=lambda i: (-p.compute[i], -p.sizes[i], i))
    by_size = sorted(range(p.n), key=lambda i: (-p.sizes[i], -p.compute[i], i))
    for pos in (greedy(p, by_compute), greedy(p, by_size), pack(p)):
        if pos is None:
            continue
        pos = untangle(p, balance(p, pos, tol, rounds), tol, rounds)
        if incumbent is None or tol.better(p.cost(pos), p.cost(incumbent)):
            incumbent = pos
    if p.n <= exact_models:
        incumbent = exact(p, incumbent, tol)
    return incumbent
