"""Which CUDA GPUs this machine shows, without importing torch or initialising CUDA.

easycore-parallel's generic runners and pools take ``"cuda:N"`` as a label
for a GPU the machine has (the hooks move their data there themselves); they
must not initialise CUDA in the caller (a forked worker could not use it
then), nor import torch. The NVIDIA driver makes one device node per GPU
(``/dev/nvidia0``, ``/dev/nvidia1``, ...; a container sees the ones it was
given), and ``CUDA_VISIBLE_DEVICES`` narrows and renumbers them as CUDA
does: the entries up to the first invalid one count.
"""

from __future__ import annotations

import os
import re

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Optional

__all__ = ["visible_cuda_devices"]

_NODE = re.compile(r"nvidia[0-9]+")


def visible_cuda_devices(dev: str = "/dev", env: Optional[str] = None) -> int:
    """How many CUDA GPUs a process started now would see (0 where none can be seen).

    Args:
        dev (str): the device directory (a test's stand-in).
        env (str or None): ``CUDA_VISIBLE_DEVICES`` (None: read the environment).

    Returns:
        int: the number of GPUs; 0 without the NVIDIA driver's device nodes
        (no GPU, not Linux).
    """
    try:
        nodes = sum(1 for name in os.listdir(dev) if _NODE.fullmatch(name))
    except OSError:
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if env is None else env
    if visible is None or nodes == 0:
        return nodes
    count = 0
    for entry in visible.split(","):
        entry = entry.strip()
        if (entry.isdigit() and int(entry) < nodes) or entry.startswith(("GPU-", "MIG-")):
            count += 1
        else:
            break  # CUDA ignores everything from an invalid entry on
    return min(count, nodes) if count else 0
