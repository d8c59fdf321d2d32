"""What a [`Pool`][easycore.common.parallel.Pool]'s arguments mean: its devices,
its options and what its workers are given.

``Pool.__init__`` reads as these steps; ``BackgroundTask`` and ``JobQueue``
hand their pool an options object already checked (``given_options`` says
which keywords may not come with it).
"""

from __future__ import annotations

from .._os import threads as _threads
from ..engine.door import BackendSpec, DevicePolicy
from ..options import FIELDS, WorkerOptions, check_callable
from .program import PoolProgram

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union

__all__ = [
    "check_per_worker",
    "checked_devices",
    "checked_options",
    "given_options",
    "start_method_of",
    "worker_spec",
    "workers_devices",
]



def workers_devices(processes: Optional[int], devices: Optional[Iterable[str]]) -> List[str]:
    """One device per worker: ``devices`` as given, else ``processes`` (or every
    CPU this process may use) times ``"cpu"``."""
    if devices is not None:
        devices = list(devices)
        if not devices:
            # (as Pool(0) and the runners: an empty pool would wait forever)
            raise ValueError("devices is empty: a pool needs at least one device "
                             "(e.g. fall back to ['cpu'] where no GPU is found)")
        if processes is not None and processes != len(devices):
            raise ValueError(f"processes={processes} but {len(devices)} devices were given")
        return devices
    n = _threads.available_cpus() if processes is None else processes
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError("Number of processes must be at least 1")
    return ["cpu"] * n


def check_per_worker(worker_contexts: Optional[Sequence[Any]], n: int,
                     initializer: Optional[Callable[..., Any]]) -> None:
    """What is given per worker fits: one context each, an initializer that is callable."""
    if worker_contexts is not None and len(worker_contexts) != n:
        raise ValueError(f"worker_contexts has {len(worker_contexts)} entries, not equal to "
                         f"the number of workers ({n})")
    check_callable("initializer", initializer, allow_none=True)


def start_method_of(context: Any, start_method: Optional[str]) -> Optional[str]:
    """``start_method``, or the stdlib's way of saying it: a multiprocessing ``context``."""
    if context is None:
        return start_method
    if start_method is not None and start_method != context.get_start_method():
        raise ValueError("pass context= or start_method=, not both")
    return context.get_start_method()


def given_options(arguments: Mapping[str, Any]) -> List[str]:
    """Pool's option keywords in ``arguments`` that differ from their defaults
    (``WorkerOptions``'s): those that may not come with ``options=``."""
    defaults = WorkerOptions()
    return [name for name in FIELDS
            if name != "backend_options" and name in arguments
            and arguments[name] != getattr(defaults, name)]


def checked_devices(policy: DevicePolicy, options: WorkerOptions,
                    devices: List[str]) -> List[str]:
    """The devices as the device policy validates them, and, for local workers,
    as this machine has them."""
    checked = [policy.validate(d) for d in devices]
    if options.local:
        for device in checked:
            policy.check_available(device)
    return checked


def worker_spec(policy: DevicePolicy, devices: List[str], options: WorkerOptions,
                threads: Optional[int], initializer: Optional[Callable[..., Any]],
                initargs: Sequence[Any], cfg: Optional[Mapping[str, Any]],
                worker_contexts: Optional[Sequence[Any]]) -> BackendSpec:
    """What every worker runs and gets: the program (device set-up, the
    initializer), its device, its ``cfg`` and context, the thread budget."""
    init_blob: Any = None
    if initializer is not None:
        init_blob = (initializer, tuple(initargs))  # pickled only for spawned workers
    cfg_node: Any = None  # none given: made by a worker whose function asks (see PoolProgram)
    if cfg is not None:
        from easycore.common.config import CfgNode

        cfg_node = cfg if isinstance(cfg, CfgNode) else CfgNode(cfg or {})
    quiet = init_blob is None and type(policy).setup_worker is DevicePolicy.setup_worker
    return BackendSpec(
        PoolProgram(policy, init_blob, quiet), devices, cfg_node, policy, options.start_method,
        threads, list(worker_contexts) if worker_contexts is not None else None, True,
    )



def checked_options(backends: Mapping[str, Union[type, str]], options: Optional[WorkerOptions],
                    context: Any, backend_options: Dict[str, Any],
                    given: Dict[str, Any]) -> WorkerOptions:
    """The worker options: ``options`` as given (checked by its maker), or built
    (and checked) from the keywords ``given``; never both.

    Raises:
        TypeError: ``options`` and some of the keywords it holds.
        ValueError: a bad option, or a back-end not in ``backends``.
    """
    if options is None:  # every option checked at once, as every client checks them
        options = WorkerOptions(**given, backend_options=backend_options)
    else:
        both = given_options(given) + sorted(backend_options)
        if context is not None:
            both.append("context")
        if both:
            raise TypeError(f"pass options= or the options themselves, not both: {both}")
    options.check_backend(backends)
    return options
