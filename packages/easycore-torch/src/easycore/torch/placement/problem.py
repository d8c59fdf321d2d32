"""A placement problem, checked and in plain lists: `Problem`.

Everything the planner needs, indexed by model ``i`` and device ``d``:
sizes, compute costs, usable capacities (``capacity * (1 - reserve)``) and
the traffic between models as adjacency lists. Building it checks every
argument and says which one is wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

__all__ = ["Problem", "format_bytes"]


def format_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"``.

    Args:
        n (float): bytes.

    Returns:
        str:
    """
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def _numbers(values: Sequence[float], what: str, n: Optional[int] = None) -> List[float]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{what} must be a list of numbers, got {type(values).__name__}")
    if n is not None and len(values) != n:
        raise ValueError(f"{what} has {len(values)} entries for {n} models")
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{what}[{i}] must be a finite number >= 0, got {v!r}")
        out.append(float(v))
    return out


@dataclass
class Problem:
    """A checked placement problem (see `plan_placement` for the arguments)."""

    devices: List[str]
    sizes: List[float]
    compute: List[float]
    capacity: List[float]  # usable: after the reserve
    raw_capacity: List[float]
    reserve: float
    neighbours: List[List[Tuple[int, float]]]  # i -> [(j, weight)], both directions summed

    @property
    def n(self) -> int:
        return len(self.sizes)

    @property
    def m(self) -> int:
        return len(self.devices)

    @classmethod
    def build(
        cls,
        sizes: Sequence[float],
        devices: Sequence[str],
        capacity: Optional[Mapping[str, float]],
        compute: Optional[Sequence[float]],
        traffic: Optional[Mapping[Tuple[int, int], float]],
        reserve: float,
        measure: Callable[[str], int],
    ) -> Problem:
        """Check the arguments; ``measure(device)`` gives a capacity not in ``capacity``."""
        size_list = _numbers(sizes, "sizes")
        n = len(size_list)
        if isinstance(devices, str) or not isinstance(devices, Sequence) or not devices:
            raise ValueError(f"devices must be a non-empty list of device strings, got {devices!r}")
        names = [str(d) for d in devices]
        duplicates = sorted({d for d in names if names.count(d) > 1})
        if duplicates:
            raise ValueError(f"devices lists {duplicates} more than once")
        if isinstance(reserve, bool) or not isinstance(reserve, (int, float)) or not (
            0 <= reserve < 1
        ):
            raise ValueError(f"reserve must be a fraction in [0, 1), got {reserve!r}")
        raw = []
        for d in names:
            value: float
            if capacity is None:
                value = measure(d)
            elif d in capacity:
                value = capacity[d]
            else:
                raise ValueError(f"capacity has no entry for device {d!r}")
            raw.append(_numbers([value], f"capacity[{d!r}]")[0])
        compute_list = size_list if compute is None else _numbers(compute, "compute", n)
        neighbours: List[List[Tuple[int, float]]] = [[] for _ in range(n)]
        pair_weight: Dict[Tuple[int, int], float] = {}
        for key, weight in (traffic or {}).items():
            if (
                not isinstance(key, tuple) or len(key) != 2
                or not all(isinstance(k, int) and not isinstance(k, bool) for k in key)
            ):
                raise ValueError(f"traffic key {key!r} must be a pair of model indices (i, j)")
            i, j = key
            if not (0 <= i < n and 0 <= j < n):
                raise ValueError(f"traffic key {key!r} names a model outside 0..{n - 1}")
            if i == j:
                raise ValueError(f"traffic key {key!r} joins a model to itself")
            w = _numbers([weight], f"traffic[{key!r}]")[0]
            pair = (min(i, j), max(i, j))
            pair_weight[pair] = pair_weight.get(pair, 0.0) + w
        for (i, j), w in sorted(pair_weight.items()):
            if w > 0:
                neighbours[i].append((j, w))
                neighbours[j].append((i, w))
        usable = [c * (1.0 - reserve) for c in raw]
        return cls(names, size_list, compute_list, usable, raw, float(reserve), neighbours)

    def check_each_fits(self) -> None:
        """Raise ``ValueError`` naming the first model no device can hold."""
        best = max(range(self.m), key=lambda d: (self.capacity[d], -d))
        for i, size in enumerate(self.sizes):
            if size > self.capacity[best]:
                raise ValueError(
                    f"model {i} ({format_bytes(size)}) fits on no device: the largest usable "
                    f"capacity is {format_bytes(self.capacity[best])} on "
                    f"{self.devices[best]!r} ({format_bytes(self.raw_capacity[best])} less "
                    f"the {self.reserve:.0%} reserve)"
                )

    def cost(self, pos: Sequence[int]) -> Tuple[float, float]:
        """(largest compute load of a device, traffic between models on different devices)."""
        loads = [0.0] * self.m
        for i, d in enumerate(pos):
            loads[d] += self.compute[i]
        cross = sum(
            w for i, edges in enumerate(self.neighbours) for j, w in edges
            if i < j and pos[i] != pos[j]
        )
        return (max(loads) if loads else 0.0), cross

    def fits(self, pos: Sequence[int]) -> bool:
        """Whether no device holds more than its usable capacity."""
        used = [0.0] * self.m
        for i, d in enumerate(pos):
            used[d] += self.sizes[i]
        return all(used[d] <= self.capacity[d] for d in range(self.m))
