"""Device strings of the torch runners: parse them, check them, prepare a worker.

A runner's ``devices`` are checked in the caller when the runner is built, so
that a typo or a GPU that is not there is a ``ValueError`` naming the device,
rather than a worker that crashes (or never starts) later:

* ``"cpu"`` (torch's ``"cpu:N"`` spellings are kept as written: several CPU
  workers are simply several processes);
* ``"cuda:N"``, with ``0 <= N < torch.cuda.device_count()``. ``"cuda"`` alone
  means ``"cuda:0"``, the device torch makes current in a fresh process, and is
  normalised to it, so the hooks, ``runner.devices`` and error messages all say
  which GPU;
* a ``torch.device`` is accepted wherever a string is;
* anything else (``"gpu:0"``, ``"cuda:x"``, ``"mps"``) is a ``ValueError``.

Checking a CUDA device asks torch how many GPUs it sees. torch does that
through NVML when it can, which does not initialise CUDA in the caller; CUDA
workers start with ``spawn`` anyway (see ``context``). CPU-only device lists
never touch CUDA at all.

In the worker, [`setup_device`][easycore.torch.parallel.devices.setup_device]
runs before ``producer_init``:

* a CUDA worker calls ``torch.cuda.set_device(N)``, so that code saying
  ``"cuda"`` or ``torch.cuda.current_device()`` agrees with the ``device`` the
  hooks receive (``.to(device)`` moves a model to the same GPU that
  ``torch.zeros(1, device="cuda")`` allocates on);
* the worker's thread budget (``cpu_threads``: ``max(1, cpus // workers)``
  by default) is set before that, by easycore-parallel, for torch's intra-op
  pool and the BLAS and OpenMP pools alike: torch's default of one thread per
  core in *every* worker would oversubscribe the machine N times over. See
  ``context`` for why a forked worker must run torch on one thread.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

__all__ = ["DeviceLike", "canonical_device", "check_device", "is_cuda", "setup_device"]

#: what a runner accepts as one device
DeviceLike = Union[str, torch.device]

_SUPPORTED = ("cpu", "cuda")


def canonical_device(device: DeviceLike) -> str:
    """Parse one device and return its canonical string; does not look for GPUs.

    Args:
        device (str or torch.device): e.g. "cpu", "cuda", "cuda:1".

    Returns:
        str: e.g. "cpu", "cuda:0" (for "cuda"), "cuda:1".

    Raises:
        ValueError: the string is not a device, or not a CPU or CUDA one.
    """
    if isinstance(device, torch.device):
        parsed = device
    elif isinstance(device, str) and device.strip():
        try:
            parsed = torch.device(device.strip())
        except RuntimeError as exc:  # torch's own message says what is wrong
            raise ValueError(
                f"invalid device {device!r}: {exc}; expected 'cpu' or 'cuda:N'"
            ) from None
    else:
        raise ValueError(f"a device must be a non-empty str or torch.device, got {device!r}")
    if parsed.type not in _SUPPORTED:
        raise ValueError(
            f"unsupported device {device!r}: easycore.torch.parallel runs on 'cpu' and "
            f"'cuda:N' devices (a DevicePolicy of your own can support {parsed.type!r})"
        )
    if parsed.type == "cuda" and parsed.index is None:
        return "cuda:0"
    return str(parsed)


def is_cuda(device: str) -> bool:
    """Whether a canonical device string names a GPU.

    Args:
        device (str): as returned by [`canonical_device`][easycore.torch.parallel.canonical_device].

    Returns:
        bool:
    """
    return device.startswith("cuda")


def cuda_device_count() -> int:
    """The number of GPUs torch sees (0 for a CPU-only build).

    Returns:
        int:
    """
    if not torch.backends.cuda.is_built():
        return 0
    return torch.cuda.device_count()  # NVML first: does not initialise CUDA here


def check_device(device: DeviceLike) -> str:
    """Parse one device and check that this machine has it.

    Args:
        device (str or torch.device): e.g. "cpu", "cuda:0".

    Returns:
        str: the canonical device string (see
            [`canonical_device`][easycore.torch.parallel.canonical_device]).

    Raises:
        ValueError: invalid, unsupported, or a GPU that torch does not see.
    """
    canonical = canonical_device(device)
    if not is_cuda(canonical):
        return canonical
    count = cuda_device_count()
    if count == 0:
        if not torch.backends.cuda.is_built():
            why = f"this PyTorch build ({torch.__version__}) has no CUDA support"
        else:
            why = "torch sees no CUDA GPU (check the driver and CUDA_VISIBLE_DEVICES)"
        raise ValueError(f"device {device!r} is not available: {why}")
    index = torch.device(canonical).index
    if index >= count:
        visible = "cuda:0" if count == 1 else f"cuda:0 ... cuda:{count - 1}"
        raise ValueError(
            f"device {device!r} does not exist: torch sees {count} CUDA "
            f"device{'s' if count > 1 else ''} ({visible})"
        )
    return canonical


def setup_device(device: str, cpu_threads: Optional[int]) -> None:
    """Prepare the current (worker) process for ``device``.

    Args:
        device (str): a canonical device string.
        cpu_threads (int or None): intra-op threads of a CPU worker
            (``torch.set_num_threads``); None keeps torch's default.
    """
    if is_cuda(device):
        # Raises here, in setup_worker, if the GPU cannot be used: the runner's
        # constructor reports it with the device and the worker's traceback.
        torch.cuda.set_device(torch.device(device))
    elif cpu_threads is not None:
        torch.set_num_threads(cpu_threads)
