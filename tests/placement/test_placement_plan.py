"""``plan_placement`` against a brute-force enumerator, and ``place``.

The enumerator below tries every assignment; ``plan_placement`` must never
exceed a capacity, must be deterministic, and must come within 5% of the
enumerator's optimum (largest compute load; then, at that load, the traffic
between devices). Instances are made-up ``cuda:N`` devices and capacities.
"""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from easycore.torch.placement import module_nbytes, place, plan_placement
from easycore.torch.placement.problem import Problem
from easycore.torch.placement.search import solve


def cost(plan, devices, compute, traffic):
    """(largest compute load of a device, traffic between models on different devices)."""
    loads = {d: 0.0 for d in devices}
    for device, c in zip(plan, compute):
        loads[device] += c
    cross = sum(w for (i, j), w in traffic.items() if plan[i] != plan[j])
    return max(loads.values()), cross


def fits(plan, sizes, capacity, reserve):
    used = {d: 0.0 for d in capacity}
    for device, size in zip(plan, sizes):
        used[device] += size
    return all(used[d] <= capacity[d] * (1 - reserve) for d in capacity)


def brute_force(sizes, devices, capacity, compute, traffic, reserve):
    """The optimum over every assignment, or None when none fits."""
    best = None
    for combo in itertools.product(devices, repeat=len(sizes)):
        if not fits(combo, sizes, capacity, reserve):
            continue
        load, cross = cost(combo, devices, compute, traffic)
        key = (round(load, 9), round(cross, 9))
        if best is None or key < best:
            best = key
    return best


def random_instance(rng: random.Random):
    n = rng.randint(1, 8)
    m = rng.choice([1, 2, 2, 3, 3, 4]) if n <= 7 else rng.choice([2, 3])
    sizes = [float(rng.randint(1, 40)) for _ in range(n)]
    compute = [float(rng.choice([1, 2, 3, 5, 8, 13])) for _ in range(n)]
    devices = [f"cuda:{k}" for k in range(m)]
    # from roomy to tight: sometimes nothing fits
    slack = rng.choice([0.6, 0.9, 1.2, 2.0, 4.0])
    capacity = {d: rng.uniform(0.5, 1.5) * slack * sum(sizes) / m / 0.9 for d in devices}
    traffic = {}
    for _ in range(rng.randint(0, 2 * n)):
        i, j = rng.sample(range(n), 2) if n > 1 else (0, 0)
        if i != j:
            traffic[(i, j)] = float(rng.randint(1, 9))
    return sizes, devices, capacity, compute, traffic


INSTANCES = [random_instance(random.Random(seed)) for seed in range(120)]


@pytest.mark.parametrize("index", range(len(INSTANCES)))
def test_within_five_percent_of_brute_force(index):
    sizes, devices, capacity, compute, traffic = INSTANCES[index]
    reserve = 0.1
    optimum = brute_force(sizes, devices, capacity, compute, traffic, reserve)
    kwargs = dict(capacity=capacity, compute=compute, traffic=traffic, reserve=reserve)
    if optimum is None:
        with pytest.raises(ValueError, match=r"cannot place|fits on no device"):
            plan_placement(sizes, devices, **kwargs)
        return
    plan = plan_placement(sizes, devices, **kwargs)
    assert plan == plan_placement(sizes, devices, **kwargs)  # deterministic
    assert len(plan) == len(sizes) and set(plan) <= set(devices)
    assert fits(plan, sizes, capacity, reserve)
    load, cross = cost(plan, devices, compute, traffic)
    assert load <= optimum[0] * 1.05 + 1e-9
    if abs(load - optimum[0]) <= 1e-9:
        assert cross <= optimum[1] * 1.05 + 1e-9


@pytest.mark.parametrize("index", range(0, len(INSTANCES), 3))
def test_the_heuristic_alone_never_exceeds_capacity(index):
    # The path taken beyond 8 models, forced here on small problems.
    sizes, devices, capacity, compute, traffic = INSTANCES[index]
    problem = Problem.build(sizes, devices, capacity, compute, traffic, 0.1, lambda d: 0)
    pos = solve(problem, exact_models=0)
    if pos is not None:
        assert problem.fits(pos)
        assert fits([devices[d] for d in pos], sizes, capacity, 0.1)


def test_traffic_breaks_ties_between_equal_loads():
    gib = 1 << 30
    kwargs = dict(capacity={"cuda:0": 10 * gib, "cuda:1": 10 * gib},
                  traffic={(0, 2): 1.0, (1, 3): 1.0})
    plan = plan_placement([6 * gib, 5 * gib, gib, gib], ["cuda:0", "cuda:1"], **kwargs)
    assert plan == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    # the other way round when the traffic says so
    kwargs["traffic"] = {(0, 3): 1.0, (1, 2): 1.0}
    plan = plan_placement([6 * gib, 5 * gib, gib, gib], ["cuda:0", "cuda:1"], **kwargs)
    assert plan == ["cuda:0", "cuda:1", "cuda:1", "cuda:0"]


def test_compute_balances_the_load_not_the_bytes():
    plan = plan_placement([1, 1, 1, 1], ["cuda:0", "cuda:1"], capacity={"cuda:0": 100,
                          "cuda:1": 100}, compute=[9, 3, 3, 3])
    assert plan[0] != plan[1] == plan[2] == plan[3]


def test_the_reserve_is_kept_free():
    devices, capacity = ["cuda:0"], {"cuda:0": 100}
    assert plan_placement([90], devices, capacity=capacity) == ["cuda:0"]
    with pytest.raises(ValueError, match=r"model 0 .* fits on no device"):
        plan_placement([91], devices, capacity=capacity)
    assert plan_placement([100], devices, capacity=capacity, reserve=0) == ["cuda:0"]


def test_a_model_that_fits_nowhere_is_named():
    with pytest.raises(ValueError) as info:
        plan_placement([10, 20, 500, 30], ["cuda:0", "cuda:1"],
                       capacity={"cuda:0": 100, "cuda:1": 200})
    message = str(info.value)
    assert "model 2 (500 B) fits on no device" in message
    assert "180 B on 'cuda:1'" in message and "10% reserve" in message


def test_models_that_fit_alone_but_not_together():
    devices, capacity = ["cuda:0", "cuda:1"], {"cuda:0": 100, "cuda:1": 100}
    with pytest.raises(ValueError, match=r"cannot place 3 models.*no assignment found fits"):
        plan_placement([60, 60, 60], devices, capacity=capacity)  # 90 usable on each
    with pytest.raises(ValueError, match="together they need 190 B, more than the 180 B"):
        plan_placement([60, 60, 70], devices, capacity=capacity)


def test_fifty_models_on_eight_devices():
    rng = random.Random(7)
    sizes = [rng.uniform(1, 100) for _ in range(50)]
    devices = [f"cuda:{k}" for k in range(8)]
    capacity = {d: 1.5 * sum(sizes) / 8 for d in devices}
    traffic = {(i, i + 1): rng.uniform(0, 5) for i in range(49)}  # a pipeline
    plan = plan_placement(sizes, devices, capacity=capacity, traffic=traffic)
    assert plan == plan_placement(sizes, devices, capacity=capacity, traffic=traffic)
    assert fits(plan, sizes, capacity, 0.1)
    load, _ = cost(plan, devices, sizes, traffic)
    assert load <= 1.05 * max(sum(sizes) / 8, max(sizes))  # close to the lower bound


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        (([1, -2], ["cuda:0"]), {"capacity": {"cuda:0": 9}}, r"sizes\[1\] must be"),
        (([1], []), {}, "devices must be a non-empty list"),
        (([1], ["cuda:0", "cuda:0"]), {"capacity": {"cuda:0": 9}}, "more than once"),
        (([1], ["cuda:0"]), {"capacity": {"cuda:1": 9}}, "no entry for device 'cuda:0'"),
        (([1, 2], ["cuda:0"]), {"capacity": {"cuda:0": 9}, "compute": [1]}, "1 entries for 2"),
        (([1, 2], ["cuda:0"]), {"capacity": {"cuda:0": 9}, "traffic": {(0, 5): 1}},
         r"\(0, 5\) names a model outside 0..1"),
        (([1, 2], ["cuda:0"]), {"capacity": {"cuda:0": 9}, "traffic": {(1, 1): 1}},
         "joins a model to itself"),
        (([1, 2], ["cuda:0"]), {"capacity": {"cuda:0": 9}, "traffic": {"a": 1}},
         "must be a pair of model indices"),
        (([1], ["cuda:0"]), {"capacity": {"cuda:0": 9}, "reserve": 1.0}, "reserve must be"),
    ],
)
def test_bad_arguments_are_named(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        plan_placement(*args, **kwargs)


def test_no_models_no_plan():
    assert plan_placement([], ["cuda:0"], capacity={"cuda:0": 1}) == []


def test_default_capacity_is_measured():
    assert plan_placement([1024, 2048], ["cpu"]) == ["cpu", "cpu"]


def test_place_plans_and_moves():
    models = [torch.nn.Linear(8, 8), torch.nn.Linear(8, 2).to(torch.bfloat16)]
    sizes = [module_nbytes(m) for m in models]
    plan = place(models, ["cpu"], capacity={"cpu": 10 * sum(sizes)})
    assert plan == ["cpu", "cpu"]
    assert all(p.device.type == "cpu" for m in models for p in m.parameters())
    with pytest.raises(TypeError, match=r"models\[1\] is a Tensor"):
        place([models[0], torch.zeros(1)], ["cpu"])


@pytest.mark.cuda
@pytest.mark.skipif(
    not (torch.backends.cuda.is_built() and torch.cuda.device_count()), reason="needs a GPU"
)
def test_place_moves_models_to_gpus():
    models = [torch.nn.Linear(64, 64) for _ in range(4)]
    plan = place(models)  # every GPU, their free memory
    for model, device in zip(models, plan):
        assert str(next(model.parameters()).device) == device
