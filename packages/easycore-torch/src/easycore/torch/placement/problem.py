"""A placement problem, checked and in plain lists: `Problem`.

Everything the planner needs, indexed by model ``i`` and device ``d``:
sizes (times the size multiplier), compute costs, each device's relative
speed, usable capacities (``capacity * (1 - reserve)``), the traffic between
models as adjacency lists, and the distance between devices. Building it
checks every argument and says which one is wrong.

A device's load is its models' compute divided by its speed (the time it
takes); traffic between models ``i`` and ``j`` costs their weight times the
distance between their devices (0 on one device, 1 between any two by default).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

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


def is_real(value: object) -> bool:
    """Whether `value` is a real number: any `numbers.Real` (int, float, Fraction, every
    NumPy integer and floating scalar ...), but not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_index(value: object) -> bool:
    """Whether `value` is an integer index: any `numbers.Integral` (NumPy's too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_list(values: object) -> bool:
    # A list, a tuple, a 1-D NumPy array or tensor: sized and iterable, and not text.
    return (
        not isinstance(values, (str, bytes, Mapping))
        and hasattr(values, "__len__")
        and hasattr(values, "__iter__")
    )


def _numbers(values: Sequence[float], what: str, n: Optional[int] = None) -> List[float]:
    if not _is_list(values):
        raise TypeError(f"{what} must be a list of numbers, got {type(values).__name__}")
    values = list(values)
    if n is not None and len(values) != n:
        raise ValueError(f"{what} has {len(values)} entries for {n} models")
    return [_number(v, f"{what}[{i}]") for i, v in enumerate(values)]


def _number(value: object, what: str) -> float:
    """`value` as a float: a real number, finite and >= 0; else a ValueError naming `what`."""
    if not is_real(value):
        raise ValueError(f"{what} must be a number, got {value!r} ({type(value).__name__})")
    number = float(value)  # type: ignore[arg-type]  # a numbers.Real
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{what} must be a finite number >= 0, got {number!r}")
    return number


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
    speed: List[float] = None  # type: ignore[assignment]  # per device; 1.0 each by default
    distance: List[List[float]] = None  # type: ignore[assignment]  # d -> e; 0 on the diagonal
    uniform: bool = True  # every pair of devices at distance 1: empty devices interchangeable

    def __post_init__(self) -> None:
        m = len(self.devices)
        if self.speed is None:
            self.speed = [1.0] * m
        if self.distance is None:
            self.distance = [[0.0 if d == e else 1.0 for e in range(m)] for d in range(m)]

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
        speed: Optional[Mapping[str, float]] = None,
        distance: Optional[Mapping[Tuple[str, str], float]] = None,
        size_multiplier: Union[float, Sequence[float]] = 1.0,
    ) -> Problem:
        """Check the arguments; ``measure(device)`` gives a capacity not in ``capacity``."""
        size_list = _numbers(sizes, "sizes")
        n = len(size_list)
        scalar = is_real(size_multiplier)
        if scalar:
            factors = [_number(size_multiplier, "size_multiplier")] * n
        else:
            factors = _numbers(size_multiplier, "size_multiplier", n)  # type: ignore[arg-type]
        for i, f in enumerate(factors):
            if f < 1:
                where = "" if scalar else f"[{i}]"
                raise ValueError(f"size_multiplier{where} must be >= 1 (weights plus "
                                 f"activations), got {f!r}")
        size_list = [s * f for s, f in zip(size_list, factors)]
        if isinstance(devices, str) or not isinstance(devices, Sequence) or not devices:
            raise ValueError(f"devices must be a non-empty list of device strings, got {devices!r}")
        names = [str(d) for d in devices]
        duplicates = sorted({d for d in names if names.count(d) > 1})
        if duplicates:
            raise ValueError(f"devices lists {duplicates} more than once")
        if not is_real(reserve) or not 0 <= reserve < 1:
            raise ValueError(f"reserve must be a fraction in [0, 1), got {reserve!r}")
        reserve = float(reserve)
        raw = []
        for d in names:
            value: float
            if capacity is None:
                value = measure(d)
            elif d in capacity:
                value = capacity[d]
            else:
                raise ValueError(f"capacity has no entry for device {d!r}")
            raw.append(_number(value, f"capacity[{d!r}]"))
        compute_list = size_list if compute is None else _numbers(compute, "compute", n)
        neighbours: List[List[Tuple[int, float]]] = [[] for _ in range(n)]
        pair_weight: Dict[Tuple[int, int], float] = {}
        for key, weight in (traffic or {}).items():
            if (
                not isinstance(key, tuple) or len(key) != 2
                or not all(is_index(k) for k in key)
            ):
                raise ValueError(f"traffic key {key!r} must be a pair of model indices (i, j)")
            i, j = int(key[0]), int(key[1])
            if not (0 <= i < n and 0 <= j < n):
                raise ValueError(f"traffic key {key!r} names a model outside 0..{n - 1}")
            if i == j:
                raise ValueError(f"traffic key {key!r} joins a model to itself")
            w = _number(weight, f"traffic[{key!r}]")
            pair = (min(i, j), max(i, j))
            pair_weight[pair] = pair_weight.get(pair, 0.0) + w
        for (i, j), w in sorted(pair_weight.items()):
            if w > 0:
                neighbours[i].append((j, w))
                neighbours[j].append((i, w))
        usable = [c * (1.0 - reserve) for c in raw]
        speeds = _speeds(names, speed)
        matrix, uniform = _distances(names, distance)
        return cls(names, size_list, compute_list, usable, raw, float(reserve), neighbours,
                   speeds, matrix, uniform)

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
        """(largest load of a device: compute / speed, traffic times device distance)."""
        loads = [0.0] * self.m
        for i, d in enumerate(pos):
            loads[d] += self.compute[i]
        dist = self.distance
        cross = sum(
            w * dist[pos[i]][pos[j]] for i, edges in enumerate(self.neighbours) for j, w in edges
            if i < j
        )
        return (max(load / s for load, s in zip(loads, self.speed)) if loads else 0.0), cross

    def fits(self, pos: Sequence[int]) -> bool:
        """Whether no device holds more than its usable capacity."""
        used = [0.0] * self.m
        for i, d in enumerate(pos):
            used[d] += self.sizes[i]
        return all(used[d] <= self.capacity[d] for d in range(self.m))


def _speeds(devices: List[str], speed: Optional[Mapping[str, float]]) -> List[float]:
    if speed is None:
        return [1.0] * len(devices)
    if not isinstance(speed, Mapping):
        raise TypeError(f"device_speed must be a dict {{device: relative speed}}, got "
                        f"{type(speed).__name__}")
    unknown = sorted(str(k) for k in speed if k not in devices)
    if unknown:
        raise ValueError(f"device_speed names devices {unknown} not in devices {devices}")
    out = []
    for d in devices:
        v = _number(speed.get(d, 1.0), f"device_speed[{d!r}]")
        if v <= 0:
            raise ValueError(f"device_speed[{d!r}] must be > 0, got {v!r}")
        out.append(v)
    return out


def _distances(devices: List[str], distance: Optional[Mapping[Tuple[str, str], float]]
               ) -> Tuple[List[List[float]], bool]:
    m = len(devices)
    matrix = [[0.0 if d == e else 1.0 for e in range(m)] for d in range(m)]
    if distance is None:
        return matrix, True
    if not isinstance(distance, Mapping):
        raise TypeError(f"distance must be a dict {{(device, device): distance}}, got "
                        f"{type(distance).__name__}")
    index = {d: k for k, d in enumerate(devices)}
    given: Dict[Tuple[int, int], float] = {}
    for key, value in distance.items():
        if not isinstance(key, tuple) or len(key) != 2 or any(k not in index for k in key):
            raise ValueError(f"distance key {key!r} must be a pair of devices from {devices}")
        a, b = index[key[0]], index[key[1]]
        v = _number(value, f"distance[{key!r}]")
        if a == b:
            if v != 0:
                raise ValueError(f"distance[{key!r}] must be 0: a device is at no distance "
                                 "from itself")
            continue
        pair = (min(a, b), max(a, b))
        if pair in given and given[pair] != v:
            raise ValueError(f"distance gives {key!r} two different values "
                             f"({given[pair]} and {v})")
        given[pair] = v
    for (a, b), v in given.items():
        matrix[a][b] = matrix[b][a] = v
    uniform = all(matrix[d][e] == 1.0 for d in range(m) for e in range(m) if d != e)
    return matrix, uniform
