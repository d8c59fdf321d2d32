"""How far apart devices are, for traffic: `device_distances`.

A relative scale, one step per slower link: the same device (no copy) <
a pair of GPUs joined by NVLink < two GPUs over PCIe < a GPU and the host
(through host memory). ``plan_placement(distance=...)`` multiplies each
pair of models' traffic by the distance between their devices.
"""

from __future__ import annotations

from typing import Dict, Iterable, Sequence, Tuple, Union

import torch

__all__ = ["HOST", "NVLINK", "PCIE", "SAME_DEVICE", "device_distances"]

#: a model's traffic to another on its own device costs nothing
SAME_DEVICE = 0.0
#: two GPUs joined by NVLink
NVLINK = 1.0
#: two GPUs over PCIe (no NVLink between them)
PCIE = 2.0
#: a GPU and the CPU, or two CPU devices
HOST = 4.0


def device_distances(
    devices: Sequence[Union[str, torch.device]],
    nvlink: Iterable[Tuple[Union[str, torch.device], Union[str, torch.device]]] = (),
    *,
    nvlink_distance: float = NVLINK,
    pcie_distance: float = PCIE,
    host_distance: float = HOST,
) -> Dict[Tuple[str, str], float]:
    """The distance between every pair of ``devices``, for ``plan_placement(distance=...)``.

    Args:
        devices (list): ``"cpu"`` and ``"cuda:N"`` devices.
        nvlink (iterable of pairs): GPU pairs joined by NVLink (as
            ``nvidia-smi topo -m`` shows ``NV#``); other GPU pairs count as PCIe.
        nvlink_distance (float): distance of an NVLink pair.
        pcie_distance (float): distance of two GPUs over PCIe.
        host_distance (float): distance between the CPU and a GPU.

    Returns:
        dict: ``{(a, b): distance}`` for every ordered pair of different devices.

    Raises:
        ValueError: a device that is not ``cpu`` or ``cuda:N``, or an NVLink
            pair naming a device not in ``devices`` or a CPU.

    Examples:
        ```python
        from easycore.torch.placement import device_distances

        d = device_distances(["cuda:0", "cuda:1", "cuda:2", "cpu"],
                             nvlink=[("cuda:0", "cuda:1")])
        assert d["cuda:0", "cuda:1"] < d["cuda:0", "cuda:2"] < d["cuda:0", "cpu"]
        ```
    """
    names = [str(torch.device(d)) if not isinstance(d, str) else d for d in devices]
    kinds = {}
    for d in names:
        try:
            kinds[d] = torch.device(d).type
        except (RuntimeError, TypeError):
            raise ValueError(f"invalid device {d!r}") from None
        if kinds[d] not in ("cpu", "cuda"):
            raise ValueError(f"device_distances knows 'cpu' and 'cuda:N', not {d!r}")
    linked = set()
    for pair in nvlink:
        a, b = (str(x) for x in pair)
        for x in (a, b):
            if kinds.get(x) != "cuda":
                raise ValueError(f"nvlink pair {pair!r}: {x!r} is not a GPU in {names}")
        linked.add(frozenset((a, b)))
    out: Dict[Tuple[str, str], float] = {}
    for a in names:
        for b in names:
            if a == b:
                continue
            if kinds[a] == "cuda" and kinds[b] == "cuda":
                out[a, b] = nvlink_distance if frozenset((a, b)) in linked else pcie_distance
            else:
                out[a, b] = host_distance
    return out
