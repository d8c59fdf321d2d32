"""Placement knobs (issue 27 item 5): device speed, device distances, a size multiplier.

machin's ``ModelAssigner`` weighs the CPU (``cpu_weight``), device distances
and model sizes; easycore's planner takes the same three knobs and stays
deterministic and exact (up to 8 models) with them: checked against brute
force over every assignment.
"""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import pytest

from easycore.torch.placement import device_distances, plan_placement
from easycore.torch.placement.problem import Problem
from easycore.torch.placement.search import solve


def cost(plan, devices, compute, traffic, speed, distance):
    loads = {d: 0.0 for d in devices}
    for device, c in zip(plan, compute):
        loads[device] += c
    top = max(loads[d] / speed.get(d, 1.0) for d in devices)

    def dist(a, b):
        if a == b:
            return 0.0
        return distance.get((a, b), distance.get((b, a), 1.0))

    cross = sum(w * dist(plan[i], plan[j]) for (i, j), w in traffic.items())
    return top, cross


def brute_force(sizes, devices, capacity, compute, traffic, reserve, speed, distance, mult):
    best = None
    for combo in itertools.product(devices, repeat=len(sizes)):
        used = {d: 0.0 for d in devices}
        for d, s, f in zip(combo, sizes, mult):
            used[d] += s * f
        if any(used[d] > capacity[d] * (1 - reserve) for d in devices):
            continue
        top, cross = cost(combo, devices, compute, traffic, speed, distance)
        key = (round(top, 9), round(cross, 9))
        if best is None or key < best:
            best = key
    return best


def random_instance(rng: random.Random):
    n = rng.randint(1, 8)
    gpus = rng.choice([1, 2, 3]) if n <= 7 else rng.choice([1, 2])
    devices = [f"cuda:{k}" for k in range(gpus)] + ["cpu"]
    sizes = [float(rng.randint(1, 40)) for _ in range(n)]
    compute = [float(rng.choice([1, 2, 3, 5, 8, 13])) for _ in range(n)]
    mult = [rng.choice([1.0, 1.5, 2.0]) for _ in range(n)]
    slack = rng.choice([0.9, 1.2, 2.0, 4.0])
    total = sum(s * f for s, f in zip(sizes, mult))
    capacity = {d: rng.uniform(0.5, 1.5) * slack * total / len(devices) / 0.9 for d in devices}
    speed = {"cpu": rng.choice([0.1, 0.25, 0.5])}
    if gpus > 1 and rng.random() < 0.5:
        speed["cuda:1"] = 2.0  # a faster GPU
    nvlink = [("cuda:0", "cuda:1")] if gpus > 1 and rng.random() < 0.5 else []
    distance = device_distances(devices, nvlink)
    traffic = {}
    for _ in range(rng.randint(0, 2 * n)):
        if n > 1:
            i, j = rng.sample(range(n), 2)
            traffic[(i, j)] = float(rng.randint(1, 9))
    return sizes, devices, capacity, compute, traffic, speed, distance, mult


INSTANCES = [random_instance(random.Random(1000 + seed)) for seed in range(80)]


@pytest.mark.parametrize("index", range(len(INSTANCES)))
def test_exact_with_every_knob(index):
    sizes, devices, capacity, compute, traffic, speed, distance, mult = INSTANCES[index]
    reserve = 0.1
    optimum = brute_force(sizes, devices, capacity, compute, traffic, reserve, speed, distance,
                          mult)
    kwargs = dict(capacity=capacity, compute=compute, traffic=traffic, reserve=reserve,
                  device_speed=speed, distance=distance, size_multiplier=mult)
    if optimum is None:
        with pytest.raises(ValueError, match=r"cannot place|fits on no device"):
            plan_placement(sizes, devices, **kwargs)
        return
    plan = plan_placement(sizes, devices, **kwargs)
    assert plan == plan_placement(sizes, devices, **kwargs)  # deterministic
    top, cross = cost(plan, devices, compute, traffic, speed, distance)
    assert top <= optimum[0] + 1e-6
    assert cross <= optimum[1] + 1e-6  # exact: the optimum itself, both levels


@pytest.mark.parametrize("index", range(0, len(INSTANCES), 4))
def test_the_heuristic_alone_keeps_capacity_with_knobs(index):
    sizes, devices, capacity, compute, traffic, speed, distance, mult = INSTANCES[index]
    problem = Problem.build(sizes, devices, capacity, compute, traffic, 0.1, lambda d: 0,
                            speed, distance, mult)
    pos = solve(problem, exact_models=0)
    if pos is not None:
        assert problem.fits(pos)


def test_a_slow_cpu_gets_less_work():
    devices = ["cuda:0", "cpu"]
    cap = {d: 100.0 for d in devices}
    equal = plan_placement([1.0] * 4, devices, capacity=cap, compute=[1.0] * 4, reserve=0)
    assert equal.count("cpu") == 2  # equally fast: half each
    slow = plan_placement([1.0] * 4, devices, capacity=cap, compute=[1.0] * 4, reserve=0,
                          device_speed={"cpu": 0.2})
    assert slow.count("cpu") == 0  # 4 on the GPU beats 1 on a CPU five times slower (5)
    half = plan_placement([1.0] * 6, devices, capacity=cap, compute=[1.0] * 6, reserve=0,
                          device_speed={"cpu": 0.5})
    assert half.count("cpu") == 2  # GPU 4, CPU 2 / 0.5 = 4


def test_distance_keeps_talkers_on_near_devices():
    devices = ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    cap = {d: 10.0 for d in devices}
    # four equal models, 0-1 and 2-3 talk; each device takes one (load)
    traffic = {(0, 1): 5.0, (2, 3): 5.0}
    distance = device_distances(devices, nvlink=[("cuda:0", "cuda:2"), ("cuda:1", "cuda:3")])
    plan = plan_placement([8.0] * 4, devices, capacity=cap, traffic=traffic, reserve=0,
                          distance=distance)
    pairs = {frozenset((plan[0], plan[1])), frozenset((plan[2], plan[3]))}
    assert pairs == {frozenset(("cuda:0", "cuda:2")), frozenset(("cuda:1", "cuda:3"))}
    # and a GPU-CPU hop costs more than a PCIe one
    d = device_distances(["cuda:0", "cuda:1", "cpu"])
    assert 0 < d["cuda:0", "cuda:1"] < d["cuda:0", "cpu"] == d["cpu", "cuda:1"]


def test_size_multiplier_counts_activations():
    cap = {"cuda:0": 10.0, "cuda:1": 10.0}
    assert plan_placement([6.0, 3.0], ["cuda:0", "cuda:1"], capacity=cap, reserve=0,
                          compute=[1.0, 0.0]).count("cuda:0") in (1, 2)
    with pytest.raises(ValueError, match="model 0"):  # 6 * 2 = 12 fits nowhere
        plan_placement([6.0, 3.0], ["cuda:0", "cuda:1"], capacity=cap, reserve=0,
                       size_multiplier=2.0)
    plan = plan_placement([4.0, 4.0], ["cuda:0", "cuda:1"], capacity=cap, reserve=0,
                          compute=[1.0, 0.0], traffic={(0, 1): 1.0}, size_multiplier=[1.0, 1.5])
    assert plan[0] == plan[1]  # 4 + 6 = 10 still fits together
    plan = plan_placement([4.0, 4.0], ["cuda:0", "cuda:1"], capacity=cap, reserve=0,
                          compute=[1.0, 0.0], traffic={(0, 1): 1.0}, size_multiplier=[1.0, 2.0])
    assert plan[0] != plan[1]  # 4 + 8 does not


@pytest.mark.parametrize("kwargs, match", [
    (dict(device_speed={"cpu": 0}), r"device_speed\['cpu'\] must be > 0"),
    (dict(device_speed={"cuda:7": 1.0}), "cuda:7"),
    (dict(device_speed=[1.0]), "device_speed must be a dict"),
    (dict(distance={("cpu", "cuda:9"): 1.0}), "pair of devices"),
    (dict(distance={("cpu", "cpu"): 1.0}), "no distance from itself"),
    (dict(distance={("cpu", "cuda:0"): 1.0, ("cuda:0", "cpu"): 2.0}), "two different"),
    (dict(distance={("cpu", "cuda:0"): -1.0}), "finite number >= 0"),
    (dict(size_multiplier=0.5), "size_multiplier must be >= 1"),
    (dict(size_multiplier=[1.0]), "size_multiplier has 1 entries for 2 models"),
])
def test_bad_knobs_are_named(kwargs, match):
    exc = TypeError if "must be a dict" in match else ValueError
    with pytest.raises(exc, match=match):
        plan_placement([1.0, 1.0], ["cuda:0", "cpu"], capacity={"cuda:0": 9, "cpu": 9},
                       **kwargs)


def test_device_distances_checks_its_devices():
    with pytest.raises(ValueError, match="not a GPU"):
        device_distances(["cuda:0", "cpu"], nvlink=[("cuda:0", "cpu")])
    with pytest.raises(ValueError, match="knows 'cpu' and 'cuda:N'"):
        device_distances(["mps"])


# ------------------------------------------------------------ issue 34, item 10
np = pytest.importorskip("numpy")

REALS = [
    np.float16, np.float32, np.float64, np.longdouble,
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
]


def _knobs(kind):
    """Every number plan_placement takes, as `kind` (a NumPy scalar type or Fraction)."""
    return dict(
        sizes=[kind(4), kind(4), kind(2)],
        devices=["cuda:0", "cuda:1", "cpu"],
        capacity={"cuda:0": kind(16), "cuda:1": kind(16), "cpu": kind(64)},
        compute=[kind(2), kind(1), kind(1)],
        traffic={(np.int64(0), np.int32(1)): kind(3)},
        device_speed={"cuda:0": kind(2), "cpu": kind(1)},
        distance={("cuda:0", "cuda:1"): kind(1), ("cuda:0", "cpu"): kind(3)},
        size_multiplier=kind(1) if kind is not np.float16 else kind(1.5),
    )


def _plain(knobs):
    def plain(value):
        if isinstance(value, dict):
            return {(tuple(int(k) for k in key) if isinstance(key, tuple) and
                     not isinstance(key[0], str) else key): float(v) for key, v in value.items()}
        if isinstance(value, list):
            return [float(v) for v in value]
        return float(value)

    return {k: (v if k == "devices" else plain(v)) for k, v in knobs.items()}


@pytest.mark.parametrize("kind", [*REALS, Fraction], ids=lambda k: k.__name__)
def test_every_real_number_type_is_a_number_for_every_knob(kind):
    knobs = _knobs(kind)
    expected = plan_placement(**_plain(knobs), reserve=0.25)
    assert plan_placement(**knobs, reserve=kind(1) / kind(4)) == expected
    as_list = {**knobs, "size_multiplier": [knobs["size_multiplier"]] * 3}
    assert plan_placement(**as_list, reserve=0.25) == expected


def test_a_numpy_array_is_a_list_of_numbers():
    sizes = np.array([4.0, 4.0, 2.0], dtype=np.float32)
    plan = plan_placement(sizes, ["cuda:0", "cpu"], capacity={"cuda:0": 9, "cpu": 9},
                          size_multiplier=np.array([1.0, 1.0, 1.0]))
    assert plan == plan_placement([4.0, 4.0, 2.0], ["cuda:0", "cpu"],
                                  capacity={"cuda:0": 9, "cpu": 9})


@pytest.mark.parametrize("kwargs, match", [
    (dict(device_speed={"cpu": "fast"}), r"device_speed\['cpu'\] must be a number, got 'fast'"),
    (dict(device_speed={"cpu": np.float32(-2.0)}),
     r"device_speed\['cpu'\] must be a finite number >= 0, got -2.0$"),
    (dict(distance={("cpu", "cuda:0"): np.float64("nan")}),
     r"must be a finite number >= 0, got nan"),
    (dict(size_multiplier=np.float32(0.5)), "size_multiplier must be >= 1"),
    (dict(size_multiplier=True), "size_multiplier must be a list of numbers"),
    (dict(reserve=np.float32(1.0)), r"reserve must be a fraction in \[0, 1\)"),
    (dict(traffic={(np.float32(0), 1): 1.0}), "must be a pair of model indices"),
    (dict(traffic={(0, 1): np.bool_(True)}),
     r"traffic\[\(0, 1\)\] must be a number, got .*\(bool\)"),
    (dict(capacity={"cuda:0": "9", "cpu": 9}), r"capacity\['cuda:0'\] must be a number, got '9'"),
])
def test_a_refused_number_says_what_is_wrong_with_it(kwargs, match):
    exc = TypeError if "list of numbers" in match else ValueError
    args = {"capacity": {"cuda:0": 9, "cpu": 9}, **kwargs}
    with pytest.raises(exc, match=match):
        plan_placement([1.0, 1.0], ["cuda:0", "cpu"], **args)
