"""Groups and membership, and values paired to a name.

machin's ``RpcGroup`` membership (``get_group_members``, ``is_member``) and
``pair`` / ``get_paired``, on easycore's registry:

* a service started with ``Service.start(..., name=..., groups=[...])`` is a
  member of those groups while it runs;
  [`names`][easycore.common.parallel.services.names] lists the live
  services of a namespace (of one group). Membership is read from the
  registry each time, so a service that dies (or closes) drops out at once:
  its entry is found stale and removed (process back-end), or its Ray
  actor's name is gone;
* [`pair`][easycore.common.parallel.services.pair] serves one value under a
  name, without writing a class, and
  [`get_paired`][easycore.common.parallel.services.get_paired] fetches a
  copy from any process of the user (or of the Ray cluster).
"""

from __future__ import annotations

from ..connection.address import services_dir
from .handle import Service, ServiceHandle, check_backend, lookup
from .naming import live_records

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, List, Mapping, Optional, Sequence, Union

__all__ = ["PairedValue", "get_paired", "is_member", "names", "pair"]


def names(
    group: Optional[str] = None,
    *,
    namespace: Optional[str] = None,
    backend: str = "process",
    address: Optional[str] = None,
) -> List[str]:
    """The names of the live services of ``namespace``, or of one ``group`` in it.

    Args:
        group (str or None): only the members of this group (None: every named service).
        namespace (str or None): as given to ``Service.start``.
        backend (str): ``"process"`` (this user's local registry) or ``"ray"``.
        address (str or None): Ray only, when not connected yet (see ``lookup``).

    Returns:
        list of str: sorted.
    """
    check_backend(backend)
    if backend == "ray":
        from .ray_service import ray_names

        return ray_names(group, namespace, address)
    records = live_records(services_dir(), namespace)
    return [r["name"] for r in records if group is None or group in (r.get("groups") or [])]


def is_member(name: str, group: str, *, namespace: Optional[str] = None,
              backend: str = "process") -> bool:
    """Whether the service ``name`` runs and is a member of ``group``."""
    return name in names(group, namespace=namespace, backend=backend)


class PairedValue:
    """The service [`pair`][easycore.common.parallel.services.pair] starts: holds one value.

    Args:
        value (Any): what ``get`` returns.
    """

    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self) -> Any:
        """The value."""
        return self.value

    def set(self, value: Any) -> None:
        """Replace the value."""
        self.value = value


def pair(
    name: str,
    value: Any,
    *,
    namespace: Optional[str] = None,
    groups: Union[str, Sequence[str], None] = None,
    backend: str = "process",
    backend_options: Optional[Mapping[str, Any]] = None,
) -> ServiceHandle:
    """Serve ``value`` under ``name`` until the returned handle is closed.

    Args:
        name (str): unique per namespace, as for ``Service.start``.
        value (Any): sent by value (cloudpickle), so lambdas and models work.
        namespace (str or None):
        groups (str, list of str or None): groups it is a member of.
        backend (str): ``"process"`` or ``"ray"``.
        backend_options (dict or None): as for ``Service.start``.

    Returns:
        ServiceHandle: the owner's handle: ``call("get")``, ``call("set", v)``;
        closing it ends the pairing.

    Raises:
        ValueError: the name is taken.
    """
    return Service.start(PairedValue, value, name=name, namespace=namespace, groups=groups,
                         backend=backend, backend_options=backend_options)


def get_paired(
    name: str,
    *,
    namespace: Optional[str] = None,
    backend: str = "process",
    timeout: float = 10.0,
) -> Any:
    """A copy of the value paired to ``name`` (waits up to ``timeout`` s for it to appear).

    Raises:
        ServiceNotFoundError: nothing is paired to ``name``.
    """
    with lookup(name, backend=backend, namespace=namespace, timeout=timeout) as handle:
        return handle.call("get", timeout=timeout)
