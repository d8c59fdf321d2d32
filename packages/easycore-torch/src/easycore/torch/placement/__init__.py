"""Placing models on devices: sizes, free memory, and a plan that fits.

* [`module_nbytes`][easycore.torch.placement.module_nbytes]: bytes of a
  module's parameters and buffers, of any dtype;
* [`device_capacity`][easycore.torch.placement.device_capacity]: free
  memory of a GPU (``torch.cuda.mem_get_info``) or of the host;
* [`plan_placement`][easycore.torch.placement.plan_placement]: one device
  per model, never over capacity, with the smallest largest compute load,
  then the least cross-device traffic; deterministic;
* [`place`][easycore.torch.placement.place]: plan, then move the models;
* [`device_distances`][easycore.torch.placement.device_distances]: how far
  apart devices are for traffic (same GPU < NVLink < PCIe < CPU).

Modules: `sizes`, `capacity`, `topology`, `problem` (checked
arguments), `search` (the algorithms), `planner` (the public
functions).
"""

from .capacity import device_capacity
from .planner import place, plan_placement
from .sizes import module_nbytes
from .topology import device_distances

__all__ = ["device_capacity", "device_distances", "module_nbytes", "place", "plan_placement"]
