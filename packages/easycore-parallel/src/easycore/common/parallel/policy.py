"""Device policies: what a device string means, in the caller and in the worker.

One object answers every device question for every back-end, so that a
framework (easycore-torch) changes devices in one place:

* ``validate(device)``: check and normalise a device string (the caller, when
  a runner or pool is built);
* ``check_available(device)``: does this machine have it (local back-ends:
  Ray places devices on its own nodes);
* ``setup_worker(device)``: prepare a worker for its device, before its init
  hooks (e.g. ``torch.cuda.set_device``);
* ``start_method(devices, requested, threads)`` and ``mp_context(method)``:
  how worker processes start;
* ``make_transport()``: how items and results cross (the process back-end);
* ``ray_resources(device)``: what a Ray actor for the device asks for.

[`DevicePolicy`][easycore.common.parallel.policy.DevicePolicy] is the
CPU-only policy of easycore-parallel: any non-empty string is a device (it
is only a label: ``"cpu"``, ``"cpu:1"``) and each worker is one process.
"""

from __future__ import annotations

import multiprocessing
import sys
from multiprocessing.context import BaseContext
from typing import Any, Optional, Sequence, Tuple

from .defaults import chosen_transport
from .transport import SharedMemoryTransport, Transport

__all__ = ["DevicePolicy"]

_METHODS = ("fork", "spawn", "forkserver")


class DevicePolicy:
    """The devices of easycore-parallel: labels for CPU worker processes."""

    #: the transport the process back-end uses
    transport_class: type = SharedMemoryTransport

    def __init__(self, transport_class: Optional[type] = None) -> None:
        """
        Args:
            transport_class (type or None): the process back-end's transport
                (None: the class's ``transport_class``).
        """
        if transport_class is not None:
            self.transport_class = transport_class

    def validate(self, device: Any) -> str:
        """Check one device string and normalise it.

        Args:
            device (str): e.g. ``"cpu"``.

        Returns:
            str: the device, stripped.

        Raises:
            ValueError: not a non-empty string.
        """
        if not isinstance(device, str) or not device.strip():
            raise ValueError(f"a device must be a non-empty str, got {device!r}")
        return device.strip()

    def check_available(self, device: str) -> None:
        """Raise ``ValueError`` unless this machine has ``device`` (CPU: always).

        Args:
            device (str): as returned by ``validate``.
        """

    def setup_worker(self, device: str) -> None:
        """Runs in each worker before its init hooks.

        Args:
            device (str): the worker's device.
        """

    def start_method(
        self, devices: Sequence[str], requested: Optional[str], threads: Optional[int]
    ) -> str:
        """Pick how worker processes start.

        Args:
            devices (list[str]): validated devices, one per worker.
            requested (str or None): what the user asked for (None: the default).
            threads (int or None): each worker's thread budget.

        Returns:
            str: ``"fork"``, ``"spawn"`` or ``"forkserver"``.

        Raises:
            ValueError: an unknown start method.
        """
        if requested is not None and requested not in _METHODS:
            raise ValueError(f"unknown start_method {requested!r}; expected one of {_METHODS}")
        if requested is not None:
            return requested
        return default_start_method()

    def mp_context(self, method: str) -> BaseContext:
        """The multiprocessing context for a start method.

        Args:
            method (str):

        Returns:
            multiprocessing.context.BaseContext:
        """
        return multiprocessing.get_context(method)

    def make_transport(self) -> Transport:
        """A fresh transport for one activation.

        The class is ``transport_class``; when nobody chose it (neither the
        constructor nor a subclass), it is upgraded in a process that
        imported torch (see [`defaults`][easycore.common.parallel.defaults]).

        Returns:
            Transport:
        """
        return chosen_transport(self, DevicePolicy)()

    def ray_resources(self, device: str) -> Tuple[float, float, str]:
        """What a Ray actor for ``device`` asks for, and the device it sees.

        Args:
            device (str):

        Returns:
            tuple: ``(num_cpus, num_gpus, device inside the actor)``.
        """
        if device == "cuda" or device.startswith("cuda:"):
            # Ray picks the GPU and makes it the only one the actor sees.
            return 1.0, 1.0, "cuda:0"
        return 1.0, 0.0, device


def default_start_method() -> str:
    """The start method when none is asked for: what ``set_start_method`` chose,
    else the platform's default, but never ``fork`` while a Ray driver is up.

    Ray's gRPC client does not survive a fork of its process: workers forked
    from a Ray driver left its later calls to the GCS waiting forever. Then
    ``forkserver`` (the default from Python 3.14) starts them instead; only an
    explicit ``start_method="fork"`` on the runner or pool forks.

    Returns:
        str: ``"fork"``, ``"spawn"`` or ``"forkserver"``.
    """
    methods = multiprocessing.get_all_start_methods()
    # Not a sign the user chose: many libraries fix the default by asking for it.
    method = multiprocessing.get_start_method(allow_none=True) or methods[0]
    if method == "fork" and "forkserver" in methods and _ray_driver_is_up():
        return "forkserver"
    return method


def _ray_driver_is_up() -> bool:
    ray = sys.modules.get("ray")  # never imported here: only a caller's Ray counts
    try:
        return bool(ray is not None and ray.is_initialized())
    except Exception:
        return False
