"""Which transport is used when nobody chose one: tensors without asking.

The one place that decides it for everything that moves data between
processes: a service's default handle, [`Pool`][easycore.common.parallel.Pool]
(and so [`BackgroundTask`][easycore.common.parallel.BackgroundTask] and
[`JobQueue`][easycore.common.parallel.JobQueue]) and the runners. Their
default moves NumPy arrays through shared memory
([`SharedMemoryTransport`][easycore.common.parallel.SharedMemoryTransport]);
tensors need a transport that knows them: easycore-torch's
``TensorTransport``. Rather than asking every user to pick it, the default is
*upgraded* when a transport is made (a pool's or runner's workers start, a
service channel opens): if a registered trigger module is imported in this
process (``torch``), and the upgrade's class imports (easycore-torch is
installed), that class is used. easycore-parallel never imports torch
itself; a process that never imported torch keeps the plain transport. A
transport the user chose (``handle.with_transport``, a
``DevicePolicy(transport_class)``, a runner's or policy's own
``transport_class``) is never upgraded.

Other packages may register their own upgrade with
[`register_default_transport`][easycore.common.parallel.defaults.register_default_transport].
"""

from __future__ import annotations

import sys

from ._lazy import load

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, List, Optional, Tuple, Union

__all__ = [
    "chosen_transport",
    "default_transport",
    "import_object",
    "register_default_transport",
]

# (module whose import triggers it, the transport class or "module:Class")
_UPGRADES: List[Tuple[str, Union[type, str]]] = [
    ("torch", "easycore.torch.parallel.transport:TensorTransport"),
]


def register_default_transport(trigger: str, transport: Union[type, str]) -> None:
    """Use ``transport`` for default handles of processes that imported ``trigger``.

    Registered last, tried first. ``transport`` must subclass the handle's
    default transport (e.g. ``SharedMemoryTransport``) to be taken.

    Args:
        trigger (str): a module name, e.g. ``"torch"``.
        transport (type or str): the class, or ``"module:Class"`` (imported lazily).
    """
    _UPGRADES.insert(0, (trigger, transport))


def default_transport(base: type) -> type:
    """The class a default handle uses instead of ``base`` in this process.

    Args:
        base (type): the handle's transport class (the service's default).

    Returns:
        type: an upgrade that subclasses ``base``, or ``base``.
    """
    for trigger, transport in list(_UPGRADES):
        if trigger not in sys.modules:
            continue
        cls = _load(transport)
        if isinstance(cls, type) and issubclass(cls, base):
            return cls
    return base


def chosen_transport(obj: Any, owner: type, attr: str = "transport_class") -> type:
    """``obj``'s transport class, upgraded unless someone chose it.

    It counts as chosen when it is set on the instance ``obj`` or on a class
    between ``type(obj)`` and ``owner`` (the library class whose attribute is
    the default): a subclass that names its transport gets that one.

    Args:
        obj (Any): a runner or device policy.
        owner (type): the class that holds the library's default.
        attr (str): the attribute that holds the class.

    Returns:
        type:
    """
    cls: type = getattr(obj, attr)
    if attr in getattr(obj, "__dict__", {}):
        return cls
    for klass in type(obj).__mro__:
        if klass is owner:
            break
        if attr in vars(klass):
            return cls
    return default_transport(cls)


def import_object(path: str) -> Any:
    """The object a ``"module:qualname"`` path names, imported on the spot.

    Optional parts (Ray's back-end, easycore-torch's transports, a service's
    recorded transport) are named by such paths, so that nothing is imported
    before it is used. The one copy of this code: back-end tables
    ([`policy`][easycore.common.parallel.backends.policy]), default transports (here)
    and service handles use it.

    Args:
        path (str): ``"package.module:Name"`` or ``"package.module:Outer.Inner"``.

    Returns:
        Any: the object.

    Raises:
        ImportError: the module cannot be imported.
        AttributeError: the module has no such name.
    """
    module, _, qualname = path.partition(":")
    obj: Any = load(module, "")  # (absolute: a relative name is no module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _load(transport: Union[type, str]) -> Optional[Any]:
    if isinstance(transport, type):
        return transport
    try:
        return import_object(transport)
    except Exception:  # noqa: BLE001 - not installed, or broken on import (any error): the plain transport still works
        return None
