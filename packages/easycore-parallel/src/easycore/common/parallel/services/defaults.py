"""Which transport a handle uses when nobody chose one: tensors without asking.

A service's default handle moves NumPy arrays through shared memory
([`SharedMemoryTransport`][easycore.common.parallel.SharedMemoryTransport]).
Tensors need a transport that knows them: easycore-torch's
``TensorTransport``. Rather than asking every user to call
``handle.with_transport(TensorTransport)``, the default is *upgraded* when a
channel opens: if a registered trigger module is imported in this process
(``torch``), and the upgrade's class imports (easycore-torch is installed),
that class is used. easycore-parallel never imports torch itself; a process
that never imported torch keeps the plain transport.

Other packages may register their own upgrade with
[`register_default_transport`][easycore.common.parallel.services.defaults.register_default_transport].
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, List, Optional, Tuple, Union

__all__ = ["register_default_transport", "default_transport"]

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


def _load(transport: Union[type, str]) -> Optional[Any]:
    if isinstance(transport, type):
        return transport
    module, _, qualname = transport.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception:  # not installed, or broken: the plain transport still works
        return None
    return obj
