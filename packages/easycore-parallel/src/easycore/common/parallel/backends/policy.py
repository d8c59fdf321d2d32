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
  how worker processes start (``process_context`` asks both);
* ``make_transport()``: how items and results cross (the process back-end);
* ``ray_resources(device)``: what a Ray actor for the device asks for.

This module is also the only place that picks a back-end, a start method and a
transport for a client: every runner and pool builds its back-end (through
the engine's door, [`backend_for`][easycore.common.parallel.engine.door.backend_for])
with ``build_backend`` from one table (``BACKENDS``, which a client class
copies as its ``backends`` and may extend); the process back-end then asks
the spec's policy for the start method and the transport. A runner's
``transport_class`` and ``default_start_method`` are shorthands that
``DevicePolicy.for_client`` folds
into the policy; nothing else chooses.

[`DevicePolicy`][easycore.common.parallel.backends.policy.DevicePolicy] is the
CPU policy of easycore-parallel: a device is a label (``"cpu"``, ``"cpu:1"``,
any non-empty string) handed to the workers' hooks, and each worker is one
process. Two kinds of names mean more, and are checked:

* ``"cuda"`` / ``"cuda:N"``: a GPU the hooks move their data to themselves
  (nothing here sets it up). Local workers need it on this machine (seen
  through the NVIDIA driver's device nodes, ``/dev/nvidiaN``, within
  ``CUDA_VISIBLE_DEVICES``; torch is not imported); Ray places it on a node
  with a GPU. easycore-torch's policy does more for them (checks with torch,
  ``spawn``, ``torch.cuda.set_device``).
* other accelerators' names (``"gpu"``, ``"mps"``, ``"xpu"``, ``"tpu"``, ...)
  are refused: no back-end here, nor easycore-torch, can honour them.
"""

from __future__ import annotations

import multiprocessing
import sys
from multiprocessing.context import BaseContext

from .._os.devices import visible_cuda_devices
from ..defaults import chosen_transport, import_object
from ..transport.interface import Transport
from ..transport.shared_memory import SharedMemoryTransport
from .base import Backend, BackendSpec

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

__all__ = ["BACKENDS", "DevicePolicy", "backend_class", "build_backend", "default_start_method"]

#: back-end name -> class, or ``"module:Class"`` imported on first use (Ray is
#: optional; a worker that unpickles its device policy needs none of them): the
#: one table; runner and pool classes copy it as ``backends``
BACKENDS: Dict[str, Union[type, str]] = {
    "process": "easycore.common.parallel.backends.process:ProcessBackend",
    "thread": "easycore.common.parallel.backends.thread:ThreadBackend",
    "ray": "easycore.common.parallel.backends.ray:RayBackend",
}

_METHODS = ("fork", "spawn", "forkserver")

#: device kinds (what comes before ":") of accelerators no policy here sets up:
#: a worker given one would run on a CPU while its name said otherwise
_ACCELERATORS = frozenset({"gpu", "mps", "xpu", "tpu", "npu", "hpu", "xla", "mtia", "maia",
                           "ipu", "hip", "rocm", "vulkan", "opencl", "opengl", "meta"})
_FOR_GPUS = ("easycore.torch.parallel has the same runners, Pool, BackgroundTask and JobQueue "
             "for GPUs: it checks them with torch, starts their workers with spawn and makes "
             "each worker's GPU its current device")


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
            ValueError: not a non-empty string, or an accelerator's name that
                nothing here honours (``"gpu"``, ``"mps"``, ...; see the module
                docstring); ``"cuda:N"`` must be well formed.
        """
        if not isinstance(device, str) or not device.strip():
            raise ValueError(f"a device must be a non-empty str, got {device!r}")
        device = device.strip()
        kind, index = _kind_and_index(device)
        if kind in _ACCELERATORS:
            hint = (f" (a CUDA GPU is named 'cuda' or 'cuda:N'; {_FOR_GPUS})"
                    if kind == "gpu" else "")
            raise ValueError(
                f"device {device!r}: easycore's workers run on CPUs (any label, e.g. 'cpu') "
                f"and CUDA GPUs ('cuda:N'), not on {device.split(':')[0]!r} devices{hint}")
        if kind == "cuda" and index and not index.isdigit():
            raise ValueError(f"device {device!r}: a CUDA GPU is 'cuda' or 'cuda:N' (N >= 0)")
        return device

    def check_available(self, device: str) -> None:
        """Raise ``ValueError`` unless this machine has ``device``.

        A label is always there; ``"cuda"`` / ``"cuda:N"`` must be a GPU this
        machine shows (the NVIDIA driver's device nodes within
        ``CUDA_VISIBLE_DEVICES``: torch is not imported, CUDA not initialised).

        Args:
            device (str): as returned by ``validate``.

        Raises:
            ValueError: a CUDA GPU this machine does not show, naming it.
        """
        kind, index = _kind_and_index(device)
        if kind != "cuda":
            return
        visible = visible_cuda_devices()
        if int(index or 0) >= visible:
            seen = "no CUDA GPU" if visible == 0 else f"CUDA GPUs 0 to {visible - 1} only"
            raise ValueError(f"device {device!r}: this machine shows {seen} (NVIDIA device "
                             f"nodes within CUDA_VISIBLE_DEVICES). {_FOR_GPUS}.")

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

    def process_context(
        self, devices: Sequence[str], requested: Optional[str], threads: Optional[int]
    ) -> BaseContext:
        """The multiprocessing context worker processes start with: ``start_method``,
        then ``mp_context`` of what it picked.

        Args:
            devices (list[str]): validated devices, one per worker.
            requested (str or None): what the user asked for (None: the default).
            threads (int or None): each worker's thread budget.

        Returns:
            multiprocessing.context.BaseContext:
        """
        return self.mp_context(self.start_method(devices, requested, threads))

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

    def with_transport(self, transport_class: type) -> DevicePolicy:
        """A copy of this policy whose process back-end uses ``transport_class``
        (a choice: never upgraded).

        Args:
            transport_class (type): a [`Transport`][easycore.common.parallel.Transport] class.

        Returns:
            DevicePolicy: a shallow copy; this one is unchanged.
        """
        import copy  # (a client with a transport of its own only)

        policy = copy.copy(self)
        policy.transport_class = transport_class
        return policy

    def for_client(self, client: Any, owner: type) -> DevicePolicy:
        """This policy as ``client`` (a runner) uses it: with the client's own
        ``transport_class`` where its class chose one.

        A runner class may name its transport directly (``transport_class =
        EagerTransport``, as easycore-torch's runners do); that choice wins
        over the policy's and is never upgraded. A client that chose nothing
        uses this policy as it is.

        Args:
            client (Any): an object with a ``transport_class`` attribute.
            owner (type): the library class that holds the default (``BaseRunner``).

        Returns:
            DevicePolicy: this policy, or a copy with the client's transport.
        """
        if _chose(client, owner):
            return self.with_transport(client.transport_class)
        return self

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


def _kind_and_index(device: str) -> Tuple[str, str]:
    """``"cuda:1"`` -> ``("cuda", "1")``; the kind in lower case (``"GPU:0"`` is a GPU too)."""
    kind, *index = device.split(":", 1)
    return kind.lower(), index[0] if index else ""


def _chose(obj: Any, owner: type, attr: str = "transport_class") -> bool:
    # Set on the instance, or on a class between type(obj) and owner.
    if attr in getattr(obj, "__dict__", {}):
        return True
    for klass in type(obj).__mro__:
        if klass is owner:
            return False
        if attr in vars(klass):
            return True
    return False


def backend_class(backends: Mapping[str, Union[type, str]], name: str) -> Any:
    """The back-end class ``name`` stands for in ``backends``, imported if it is a path.

    Args:
        backends (dict): name -> class or ``"module:Class"`` (a client's ``backends``).
        name (str): the ``backend=`` argument.

    Returns:
        type: the class (it has ``from_spec``).

    Raises:
        ValueError: an unknown name, naming the known ones.
    """
    if name not in backends:
        raise ValueError(f"unknown backend {name!r}; known: {sorted(backends)}")
    cls = backends[name]
    return import_object(cls) if isinstance(cls, str) else cls


def build_backend(backends: Mapping[str, Union[type, str]], name: str, spec: BackendSpec,
                  options: Mapping[str, Any]) -> Backend:
    """A fresh, unstarted back-end: ``backends[name].from_spec(spec, **options)``.

    How every runner and pool builds its back-end (``engine.door.backend_for``
    calls it). The process back-end asks
    ``spec.policy`` for the start method (``start_method``, ``mp_context``)
    and the transport (``make_transport``).

    Args:
        backends (dict): the client's table (see ``BACKENDS``).
        name (str): which one.
        spec (BackendSpec): the program, devices, cfg, policy, start method, threads.
        options (dict): the back-end's own keyword arguments (it refuses others).

    Returns:
        Backend:
    """
    cls = backend_class(backends, name)
    if spec.cfg is None and not cls.takes_no_cfg:
        from easycore.common.config import CfgNode

        spec = spec._replace(cfg=CfgNode())
    built: Backend = cls.from_spec(spec, **options)
    return built


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
    except Exception:  # noqa: BLE001 - a half-imported or broken Ray (any error): no driver to protect
        return False
