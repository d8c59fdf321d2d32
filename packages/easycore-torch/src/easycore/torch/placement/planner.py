"""Which model goes on which device: `plan_placement` and `place`."""

from __future__ import annotations

from typing import List, Mapping, Optional, Sequence, Tuple, Union

import torch

from .capacity import device_capacity
from .problem import Problem, format_bytes
from .search import solve
from .sizes import module_nbytes

__all__ = ["place", "plan_placement"]


def plan_placement(
    sizes: Sequence[float],
    devices: Sequence[str],
    *,
    capacity: Optional[Mapping[str, float]] = None,
    compute: Optional[Sequence[float]] = None,
    traffic: Optional[Mapping[Tuple[int, int], float]] = None,
    reserve: float = 0.1,
    device_speed: Optional[Mapping[str, float]] = None,
    distance: Optional[Mapping[Tuple[str, str], float]] = None,
    size_multiplier: Union[float, Sequence[float]] = 1.0,
) -> List[str]:
    """Choose a device for each model.

    A pure function: the same arguments always give the same plan, and
    nothing is measured or moved (unless ``capacity`` is left out, which
    reads the devices' free memory). The plan

    1. never puts more than ``capacity[d] * (1 - reserve)`` bytes on device ``d``
       (each model counting ``size * size_multiplier``);
    2. makes the largest load of any device as small as it can, a device's
       load being its models' compute divided by its ``device_speed``;
    3. among plans with that load, keeps the least traffic: each pair of
       models' weight times the ``distance`` between their devices.

    Up to 8 models the search is exact (branch and bound); beyond, a greedy
    start improved by moves and swaps, which places 50 models in milliseconds.

    Args:
        sizes (list[float]): bytes of each model, e.g. from
            [`module_nbytes`][easycore.torch.placement.module_nbytes].
        devices (list[str]): the devices to use, e.g. ``["cuda:0", "cuda:1"]``.
            All count as equally fast unless ``device_speed`` says otherwise.
        capacity (dict or None): ``{device: bytes}``; None: each device's free
            memory ([`device_capacity`][easycore.torch.placement.device_capacity]).
        compute (list[float] or None): cost of each model (e.g. FLOPs per
            step); None: its size.
        traffic (dict or None): ``{(i, j): weight}``, e.g. bytes sent from
            model ``i`` to model ``j`` per step; both directions add up.
        reserve (float): fraction of each capacity kept free (activations,
            workspace, fragmentation), in [0, 1).
        device_speed (dict or None): ``{device: relative speed}``, e.g.
            ``{"cpu": 0.1}``: the CPU does a tenth of a GPU's work in the same
            time (machin's ``cpu_weight``); devices not named count 1.
        distance (dict or None): ``{(device_a, device_b): distance}``, the cost
            of a unit of traffic between them (either order; a device is at 0
            from itself); pairs not named count 1. From
            [`device_distances`][easycore.torch.placement.device_distances]:
            same device < NVLink pair < PCIe < the CPU.
        size_multiplier (float or list[float]): memory each model takes per
            byte of its ``sizes`` (weights and activations, e.g. 2.0), for all
            models or one per model; >= 1.

    Returns:
        list[str]: the device of each model, in the order of ``sizes``.

    Raises:
        ValueError: a model fits on no device (naming its index), no
            assignment of all models fits, or an argument is malformed (named).

    Examples:
        ```python
        from easycore.torch.placement import plan_placement

        GiB = 1 << 30
        plan = plan_placement(
            [6 * GiB, 5 * GiB, 1 * GiB, 1 * GiB],
            ["cuda:0", "cuda:1"],
            capacity={"cuda:0": 10 * GiB, "cuda:1": 10 * GiB},
            traffic={(0, 2): 1.0, (1, 3): 1.0},  # model 2 talks to 0, model 3 to 1
        )
        # ['cuda:0', 'cuda:1', 'cuda:0', 'cuda:1']: both devices carry 7 GiB
        print(plan)
        ```
    """
    problem = Problem.build(sizes, devices, capacity, compute, traffic, reserve, device_capacity,
                            device_speed, distance, size_multiplier)
    problem.check_each_fits()
    pos = solve(problem)
    if pos is None:
        total = sum(problem.sizes)
        usable = sum(problem.capacity)
        why = (
            f"together they need {format_bytes(total)}, more than the "
            f"{format_bytes(usable)} usable on all devices"
            if total > usable
            else "each fits somewhere, but no assignment found fits them all at once"
        )
        raise ValueError(
            f"cannot place {problem.n} models on {problem.devices}: {why} "
            f"(reserve {problem.reserve:.0%}; lower it, or add devices)"
        )
    return [problem.devices[d] for d in pos]


def _default_devices() -> List[str]:
    if torch.backends.cuda.is_built() and torch.cuda.device_count() > 0:
        return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return ["cpu"]


def place(
    models: Sequence[torch.nn.Module],
    devices: Optional[Sequence[Union[str, torch.device]]] = None,
    **kwargs: object,
) -> List[str]:
    """Plan with [`plan_placement`][easycore.torch.placement.plan_placement], then move each model.

    Args:
        models (list[torch.nn.Module]): the models; their sizes are
            [`module_nbytes`][easycore.torch.placement.module_nbytes].
        devices (list or None): None: every GPU torch sees, else ``["cpu"]``.
        **kwargs: ``capacity``, ``compute``, ``traffic``, ``reserve``,
            ``device_speed``, ``distance``, ``size_multiplier``, as for
            ``plan_placement``. Free memory is measured before anything moves,
            so a model already on a GPU counts against that GPU.

    Returns:
        list[str]: the device of each model; each model was moved there
        (``module.to(device)``, in place).

    Raises:
        ValueError: as ``plan_placement``; nothing has moved then.

    Examples:
        ```python
        # requires: torch
        import torch
        from easycore.torch.placement import place

        models = [torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)]
        print(place(models, ["cpu"]))  # ['cpu', 'cpu']
        ```
    """
    modules = list(models)
    for k, model in enumerate(modules):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"models[{k}] is a {type(model).__name__}, not a torch.nn.Module")
    names = [str(d) for d in (devices if devices is not None else _default_devices())]
    sizes = [module_nbytes(model) for model in modules]
    plan = plan_placement(sizes, names, **kwargs)  # type: ignore[arg-type]
    for model, device in zip(modules, plan):
        model.to(device)
    return plan
