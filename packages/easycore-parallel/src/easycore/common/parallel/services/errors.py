"""What a service call raises, beyond the runners' errors.

A method that raises in the service raises
[`WorkerError`][easycore.common.parallel.WorkerError] in the caller (with the
service's traceback); a service that dies raises
[`ServiceDiedError`][easycore.common.parallel.services.ServiceDiedError], a
[`WorkerDiedError`][easycore.common.parallel.WorkerDiedError], in every client.
"""

from __future__ import annotations

from typing import Optional

from ..errors import DeathCause, ParallelError, WorkerDiedError

__all__ = ["ServiceClosedError", "ServiceDiedError", "ServiceNotFoundError"]


class ServiceClosedError(ParallelError):
    """The service was closed by its owner, or this handle was closed."""


class ServiceNotFoundError(ParallelError, LookupError):
    """[`lookup`][easycore.common.parallel.services.lookup] found no live service of that name."""


class ServiceDiedError(WorkerDiedError):
    """The process (or Ray actor) hosting a service ended without being asked to.

    Raised in every client of the service, calls in flight included.

    Attributes:
        service (str): the service, as in messages, e.g. ``"service 'store'"``.
        device (str): its device.
        pid (int or None): its process id.
        exitcode (int or None): its exit code where known (the owner's handle
            may know it; other clients do not).
        reason (str): what was seen, e.g. "its connection closed".
        cause (DeathCause or None): on Ray, why its actor is gone, as data: a lost node
            (``cause.kind == "node lost"``, with the node), a kill from outside, or its
            own process; a service's state is gone with it either way.
    """

    def __init__(
        self,
        service: str,
        device: str,
        pid: Optional[int],
        exitcode: Optional[int] = None,
        reason: str = "",
        cause: Optional[DeathCause] = None,
    ) -> None:
        self.service = service
        self.device, self.worker_index, self.pid, self.exitcode = device, 0, pid, exitcode
        self.reason, self.cause = reason, cause
        what = (f"was lost: {cause.describe()}; no call was at fault"
                if cause is not None and cause.infrastructure else "died unexpectedly")
        ParallelError.__init__(
            self,
            f"{service} on device {device!r} (pid {pid}) {what}"
            + (f": {reason}" if reason else ""),
        )

    def __reduce__(self):
        return (type(self), (self.service, self.device, self.pid, self.exitcode, self.reason,
                             self.cause))
