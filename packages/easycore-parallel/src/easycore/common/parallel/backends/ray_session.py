"""Ray itself, for the Ray back-end and the Ray-hosted services: importing it, joining or
starting one session shared by all of easycore, and saying when it listens beyond loopback.

If this process is already connected to Ray, that connection is used as it is and
left up. Otherwise
[`acquire_ray`][easycore.common.parallel.backends.ray_session.acquire_ray] calls
``ray.init`` (a Ray it starts is a node at 127.0.0.1 without a dashboard unless told
otherwise) and the last
[`release_ray`][easycore.common.parallel.backends.ray_session.release_ray] shuts it
down. Ray itself (2.60 and before) still binds its GCS, raylet and worker servers to
every interface whatever the node address: a ``RuntimeWarning`` then names the ports.
Ray is imported only when first used.
"""

from __future__ import annotations

import os
import tempfile
import threading
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures

from .._os.lifeline import run_into
from ..errors import ParallelError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Dict, List, Mapping, Optional

__all__ = ["acquire_ray", "bounded_query", "exposed_ports", "import_ray", "is_cuda",
           "release_ray"]

_INSTALL = "pip install 'easycore-parallel[ray]' (or 'easycore[ray]')"


def is_cuda(device: str) -> bool:
    """Whether ``device`` names a GPU (``"cuda"`` or ``"cuda:N"``): it then asks Ray for one."""
    return device == "cuda" or device.startswith("cuda:")


def import_ray() -> Any:
    """The ``ray`` module, or an ``ImportError`` that says which extra installs it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(f"backend='ray' needs Ray, an optional extra: {_INSTALL}") from exc
    return ray


# The Ray this module started, shared by every runner that finds it running:
# shut down when the last of them closes, never when someone else started it.
_session_lock = threading.Lock()
_session: Dict[str, Any] = {"job": None, "users": 0}


def acquire_ray(ray: Any, address: Optional[str], init_kwargs: Mapping[str, Any]) -> bool:
    """Join the Ray session shared by easycore's back-ends and services, starting it if none runs.

    Shared with `easycore.common.parallel.services` (its Ray-hosted services), so that
    one session serves both and the last user shuts it down.

    Args:
        ray (module): the ``ray`` module (from
            [`import_ray`][easycore.common.parallel.backends.ray_session.import_ray]).
        address (str or None): the cluster to join; None starts a local Ray on loopback.
        init_kwargs (Mapping): more keyword arguments for ``ray.init``.

    Returns:
        bool: True when this call counts as a user of easycore's session (pair it with
        [`release_ray`][easycore.common.parallel.backends.ray_session.release_ray]); False when the
        caller's own Ray runs, which is used and left up.
    """
    with _session_lock:
        if not ray.is_initialized():
            kwargs = _local_defaults(address, init_kwargs)
            ray.init(address=address, **kwargs)
            _session.update(job=ray.get_runtime_context().get_job_id(), users=0)
            if kwargs.get("_node_ip_address") == "127.0.0.1":
                _warn_if_exposed()
        elif ray.get_runtime_context().get_job_id() != _session["job"]:
            return False  # the caller's own Ray: use it, leave it up
        _session["users"] += 1
        return True


def exposed_ports(root_pid: Optional[int] = None) -> List[int]:
    """TCP ports that processes below ``root_pid`` listen on on every interface.

    Args:
        root_pid (int or None): default this process.

    Returns:
        list[int]: ports bound to 0.0.0.0 or ``::`` by the process or its
        descendants; empty where the platform does not tell.
    """
    import psutil

    from .._os.lifeline import descendants

    root = root_pid or os.getpid()
    try:
        procs = [psutil.Process(root), *descendants(root)]
    except psutil.Error:
        return []
    ports = set()
    for proc in procs:
        # psutil 6 renamed connections() to net_connections()
        listing = getattr(proc, "net_connections", None) or proc.connections
        try:
            conns = listing(kind="tcp")
        except (psutil.Error, OSError):
            continue
        for conn in conns:
            local = conn.laddr
            if conn.status == psutil.CONN_LISTEN and local and local.ip in ("0.0.0.0", "::"):
                ports.add(local.port)
    return sorted(ports)


def _warn_if_exposed() -> None:
    """Ray asked for 127.0.0.1 may still listen everywhere: say so, once, with the ports."""
    import warnings

    ports = exposed_ports()
    if ports:
        warnings.warn(
            f"the Ray that easycore started was asked to stay on 127.0.0.1, but Ray "
            f"{import_ray().__version__} binds its GCS, raylet and worker servers to every "
            f"network interface (TCP ports {', '.join(map(str, ports))}); Ray has no option "
            f"to prevent it. On a machine reachable from untrusted networks, firewall those "
            f"ports, or start Ray yourself inside a trusted network and pass address=",
            RuntimeWarning,
            stacklevel=_first_caller_outside_easycore(),
        )


def _first_caller_outside_easycore() -> int:
    """The ``stacklevel`` that points a warning at the user's line, not easycore's.

    Runners, pools and services reach Ray through call chains of different depths,
    so no fixed number fits; this counts the frames (from the caller of
    ``warnings.warn``) that live in easycore's own files. Python 3.12's
    ``skip_file_prefixes`` does the same but 3.9-3.11 lack it.
    """
    import sys
    from types import FrameType

    import easycore

    prefixes = tuple(os.path.join(os.path.abspath(p), "") for p in easycore.__path__)
    frame: Optional[FrameType] = sys._getframe(1)  # the function that calls warnings.warn
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(prefixes):
        frame = frame.f_back
        level += 1
    return level


def _local_defaults(address: Optional[str], init_kwargs: Mapping[str, Any]) -> Dict[str, Any]:
    """Keep a Ray that the runner starts itself on loopback, with no dashboard.

    Nothing easycore starts may listen on a non-loopback address by default;
    pass ``ray_init_kwargs={"_node_ip_address": ...}`` to open it up. When
    ``address`` names a cluster, or one is already running on this machine,
    Ray is only joined and the options are left as given.
    """
    kwargs = dict(init_kwargs)
    starts_new = (
        address is None
        and not os.environ.get("RAY_ADDRESS")
        and not os.path.exists(os.path.join(tempfile.gettempdir(), "ray", "ray_current_cluster"))
    )
    if starts_new:
        kwargs.setdefault("_node_ip_address", "127.0.0.1")
        kwargs.setdefault("include_dashboard", False)
    return kwargs


def release_ray(ray: Any) -> None:
    """Leave the session joined by ``acquire_ray``; the last one out stops easycore's Ray."""
    with _session_lock:
        _session["users"] -= 1
        if _session["users"] <= 0 and ray.is_initialized():
            if ray.get_runtime_context().get_job_id() == _session["job"]:
                ray.shutdown()
            _session.update(job=None, users=0)


def bounded_query(ask: Any, timeout: float, what: str) -> Any:
    """``ask()``, or a ``ParallelError`` when it has not answered in ``timeout`` s.

    Ray's state queries wait without a deadline in C++ (where no signal
    reaches them) for a GCS that may never answer; the waiting thread is a
    daemon left behind.
    """
    future: Future = Future()
    threading.Thread(target=run_into, args=(future, ask), name="easycore-ray-query",
                     daemon=True).start()
    if not wait_futures([future], timeout).done:
        raise ParallelError(
            f"Ray's GCS did not answer {what} within {timeout:g} s: the Ray session is not "
            f"healthy (see its logs, under the session folder, by default "
            f"/tmp/ray/session_latest/logs); no actor was started"
        )
    return future.result()
