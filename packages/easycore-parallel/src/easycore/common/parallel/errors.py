"""Errors raised by the runners, pools and services.

Every error that comes from a worker names the device it ran on, so that with
``devices=["cuda:0", "cuda:1"]`` you know which card failed. A hook's
exception travels back as an [`ErrorReport`][easycore.common.parallel.ErrorReport]
(plain data, picklable even when the exception itself is not) and is re-raised
in the caller as a [`WorkerError`][easycore.common.parallel.WorkerError]
whose message holds the worker's traceback and whose ``__cause__`` is the
original exception when it could be unpickled. Pools re-raise the task's own
exception instead, with a [`RemoteTraceback`][easycore.common.parallel.RemoteTraceback]
as its ``__cause__``.

A service's method that raises raises a ``WorkerError`` in the caller (with
the service's traceback); a service that dies raises
[`ServiceDiedError`][easycore.common.parallel.services.ServiceDiedError], a
``WorkerDiedError``, in every client.
"""

from __future__ import annotations

import pickle
import signal

from ._lazy import exports
from ._named_tuples import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Dict, Optional, Sequence, Tuple

__all__ = [
    "ParallelError",
    "RunnerClosedError",
    "WorkerError",
    "WorkerDiedError",
    "DeathCause",
    "NodesLostError",
    "TaskTimeoutError",
    "ErrorReport",
    "ServiceClosedError",
    "ServiceDiedError",
    "ServiceNotFoundError",
    "QueueClosedError",
    "QueuePeerDiedError",
]


class ParallelError(RuntimeError):
    """Base class of the errors raised by the runners and pools of `easycore.common.parallel`."""


class RunnerClosedError(ParallelError):
    """The runner is closed: after [`close`][easycore.common.parallel.BaseRunner.close],
    or after a call that failed; or a pool's workers were stopped
    ([`terminate`][easycore.common.parallel.Pool.terminate]) before a result came.

    Call [`activate`][easycore.common.parallel.BaseRunner.activate] to start a
    runner's workers again.
    """


class ErrorReport(NamedTuple):
    """A hook's exception as plain data, built in the worker.

    Back-ends send this instead of the exception itself: the traceback text
    always survives, the exception object only when it pickles both ways.
    """

    hook: str
    exc_type: str
    message: str
    traceback: str
    exc_pickle: Optional[bytes]

    @classmethod
    def capture(cls, hook: str, exc: BaseException) -> ErrorReport:
        """Describe ``exc``, raised by ``hook``; call it inside the ``except`` block.

        Args:
            hook (str): name of the hook (or step) that raised.
            exc (BaseException): the exception.

        Returns:
            ErrorReport:
        """
        # Here, not at the top: traceback (with linecache, tokenize and textwrap,
        # about 2 ms) is needed once a hook fails, never by a call that succeeds.
        import traceback

        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        blob: Optional[bytes]
        try:
            data = pickle.dumps(exc)
            pickle.loads(data)  # exceptions with custom __init__ often fail only here
            blob = data
        except Exception:  # noqa: BLE001 (a user's exception may fail to pickle any way)
            blob = None
        try:
            message = str(exc)
        except Exception:  # noqa: BLE001 (a user's __str__ may raise anything)
            message = "<unprintable>"
        return cls(hook, type(exc).__qualname__, message, text, blob)

    def original(self) -> Optional[BaseException]:
        """The worker's exception object, or None when it could not travel."""
        blob = self.exc_pickle
        if blob is None:
            return None
        try:
            return pickle.loads(blob)
        except Exception:  # noqa: BLE001 (rebuilding a user's exception may raise anything)
            return None


class WorkerError(ParallelError):
    """A producer hook raised in a worker (or its result could not be sent back).

    Attributes:
        device (str): the worker's device.
        hook (str): the hook that raised, e.g. ``"producer_work"``.
        worker_index (int): position of the worker in ``devices``.
        pid (int or None): the worker's process id (None for back-ends without one).
        exc_type (str): name of the original exception class.
        remote_traceback (str): the traceback as formatted in the worker.
    """

    def __init__(
        self,
        device: str,
        hook: str,
        worker_index: int,
        pid: Optional[int],
        exc_type: str,
        exc_message: str,
        remote_traceback: str,
    ) -> None:
        self.device = device
        self.hook = hook
        self.worker_index = worker_index
        self.pid = pid
        self.exc_type = exc_type
        self.exc_message = exc_message
        self.remote_traceback = remote_traceback
        where = f"worker {worker_index}" + (f", pid {pid}" if pid is not None else "")
        super().__init__(
            f"{hook} raised {exc_type} on device {device!r} ({where}): {exc_message}\n\n"
            f"Worker traceback:\n{remote_traceback.rstrip()}"
        )

    @classmethod
    def from_report(
        cls, report: ErrorReport, device: str, worker_index: int, pid: Optional[int]
    ) -> WorkerError:
        """Build the caller-side error from a worker's report.

        Args:
            report (ErrorReport): what the worker captured.
            device (str):
            worker_index (int):
            pid (int or None):

        Returns:
            WorkerError: with ``__cause__`` set to the original exception when available.
        """
        err = cls(
            device, report.hook, worker_index, pid, report.exc_type, report.message,
            report.traceback,
        )
        err.__cause__ = report.original()
        return err

    def __reduce__(self):
        args = (
            self.device, self.hook, self.worker_index, self.pid, self.exc_type,
            self.exc_message, self.remote_traceback,
        )
        return (type(self), args)


def _describe_exitcode(exitcode: Optional[int], oom_kills: Optional[int] = None) -> str:
    if exitcode is None:
        return "an unknown exit code"
    if exitcode >= 0:
        return f"exit code {exitcode}"
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = f"signal {-exitcode}"
    hint = {
        # Who sent it is unknown: a user, a scheduler, the kernel. The
        # out-of-memory killer is named only when it killed something meanwhile.
        "SIGKILL": "; killed by a signal it cannot catch, sent from outside",
        "SIGSEGV": "; a segmentation fault in native code",
        "SIGBUS": "; a bus error in native code (shared memory full?)",
        "SIGABRT": "; aborted by native code",
    }.get(name, "")
    if name == "SIGKILL" and oom_kills:
        noun = "process" if oom_kills == 1 else "processes"
        hint += (f"; the out-of-memory killer ended {oom_kills} {noun} on this machine "
                 f"while it ran: perhaps this one")
    return f"exit code {exitcode} ({name}{hint})"


def _describe_items(items: Optional[Sequence[int]]) -> str:
    if not items:
        return ""
    shown = ", ".join(str(i) for i in list(items)[:10])
    more = f" and {len(items) - 10} more" if len(items) > 10 else ""
    noun = "item" if len(items) == 1 else "items"
    return f" while running {noun} {shown}{more}"


class WorkerDiedError(ParallelError):
    """A worker process ended without being asked to.

    Attributes:
        device (str): the worker's device.
        worker_index (int): position of the worker in ``devices``.
        pid (int or None): the worker's process id.
        exitcode (int or None): the process exit code; negative means killed by that signal.
        items (list[int] or None): indices (in the input) of the items the
            worker was running when it died, where known.
        oom_kills (int or None): processes the kernel's out-of-memory killer
            ended on this machine while the worker ran (None: not known); the
            message names it as a possible cause of a ``SIGKILL`` only when
            this is above 0.
    """

    def __init__(
        self,
        device: str,
        worker_index: int,
        pid: Optional[int],
        exitcode: Optional[int],
        items: Optional[Sequence[int]] = None,
        oom_kills: Optional[int] = None,
    ) -> None:
        self.device = device
        self.worker_index = worker_index
        self.pid = pid
        self.exitcode = exitcode
        self.items = list(items) if items is not None else None
        self.oom_kills = oom_kills
        super().__init__(
            f"worker {worker_index} on device {device!r} (pid {pid}) died unexpectedly "
            f"with {_describe_exitcode(exitcode, oom_kills)}{_describe_items(self.items)}"
        )

    def __reduce__(self):
        return (type(self), (self.device, self.worker_index, self.pid, self.exitcode, self.items,
                             self.oom_kills))


class DeathCause(NamedTuple):
    """Why a worker's process or actor is gone, as far as its back-end can tell.

    Carried by the back-end's report of the death and by the errors that name it
    ([`RayWorkerDiedError`][easycore.common.parallel.backends.ray.RayWorkerDiedError],
    [`NodesLostError`][easycore.common.parallel.NodesLostError], a Ray service's
    ``ServiceDiedError``). What it decides: a death that is
    [`infrastructure`][easycore.common.parallel.errors.DeathCause.infrastructure]
    blames no item and counts against no ``max_deaths``; pools run the items it had
    again elsewhere.

    Attributes:
        kind (str): ``"node lost"`` (the worker's node died, was preempted or could no
            longer be reached), ``"killed"`` (killed from outside, e.g. ``ray.kill`` by
            another process) or ``"worker died"`` (its own process ended: a crash,
            ``os._exit``, a signal such as the out-of-memory killer's).
        detail (str): what the back-end said about it, in a few words.
        node_id (str or None): the node the worker ran on, where known.
        node_ip (str or None): that node's address, where known.
    """

    kind: str
    detail: str = ""
    node_id: Optional[str] = None
    node_ip: Optional[str] = None

    @property
    def infrastructure(self) -> bool:
        """bool: the worker was taken away (its node lost, or killed from outside): the
        item it ran is not at fault."""
        return self.kind != "worker died"

    def describe(self) -> str:
        """The cause in words, e.g. ``"its node 5a1f... at 10.0.0.7 was lost (preempted)"``.

        Returns:
            str:
        """
        node = f"node {self.node_id} at {self.node_ip}"
        detail = f" ({self.detail})" if self.detail else ""
        if self.kind == "node lost":
            return f"its {node} was lost{detail}"
        if self.kind == "killed":
            return f"it was killed from outside{detail}, on {node}"
        return f"its process died{detail}, on {node}"


class NodesLostError(ParallelError):
    """A job lost workers on more nodes than ``max_node_losses`` allows.

    A lost node blames no item: the items its workers had run again on the other
    workers. A job whose nodes keep dying fails with this error once it lost workers on
    one node more than its ``max_node_losses`` (see
    [`Pool`][easycore.common.parallel.Pool]).

    Attributes:
        nodes (dict): node id -> the [`DeathCause`][easycore.common.parallel.errors.DeathCause]
            of its loss, in the order they were lost.
        limit (int): the ``max_node_losses`` that was passed.
    """

    def __init__(self, nodes: Dict[Optional[str], DeathCause], limit: int) -> None:
        self.nodes = dict(nodes)
        self.limit = limit
        lines = "".join(f"\n  node {c.node_id} at {c.node_ip}: {c.kind}"
                        + (f" ({c.detail})" if c.detail else "") for c in self.nodes.values())
        super().__init__(
            f"the job lost workers on {len(self.nodes)} nodes, more than max_node_losses="
            f"{limit} allows (each lost node's items ran again elsewhere; none was at fault). "
            f"Nodes lost:{lines}"
        )

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.nodes, self.limit))


class TaskTimeoutError(ParallelError, TimeoutError):
    """A task ran longer than its ``task_timeout``; its worker was killed and replaced.

    Before the worker was killed its Python stack was read (every thread; see
    [`stacks`][easycore.common.parallel.Pool.stacks]): the message names the
    innermost frame of your code and lists every frame, innermost first.

    Attributes:
        device (str): the worker's device.
        worker_index (int): position of the worker.
        pid (int or None): the killed worker's process id.
        item (int or None): index (in the input) of the item that overran.
        timeout (float): the limit, in seconds.
        stack (Stack or None): where the worker was when it was killed
            (``stack.threads``: ``(name, frames)``, the thread that ran the
            task first; ``stack.user_frame()``: the innermost frame of your
            code); None where it could not be read (Ray, Windows).
    """

    def __init__(
        self,
        device: str,
        worker_index: int,
        pid: Optional[int],
        item: Optional[int],
        timeout: float,
        stack: Any = None,
    ) -> None:
        self.device = device
        self.worker_index = worker_index
        self.pid = pid
        self.item = item
        self.timeout = timeout
        self.stack = stack
        what = f"item {item}" if item is not None else "a task"
        where = stack.where() if stack is not None else ""
        super().__init__(
            f"{what} ran longer than task_timeout={timeout:g} s on device {device!r} "
            f"(worker {worker_index}, pid {pid}){where}; the worker was killed "
            f"and replaced{stack_text(stack)}"
        )

    def __reduce__(self):
        args = (self.device, self.worker_index, self.pid, self.item, self.timeout, self.stack)
        return (type(self), args)


def stack_text(stack: Any) -> str:
    """A captured stack as the end of an error message (every thread, innermost first)."""
    if stack is None or not stack.threads:
        return ""
    return "\nIts stack when it was stopped:\n" + "\n".join(
        "  " + line for line in str(stack).splitlines())


# --------------------------------------------------------------- services
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


# ------------------------------------------------------------------ Queue
class QueueClosedError(ParallelError):
    """The queue was closed, or its owner process died."""


class QueuePeerDiedError(ParallelError):
    """A process using the queue ended without closing it, while the queue was empty.

    Attributes:
        pid (int): that process's id.
    """

    def __init__(self, message: str, pid: int = 0) -> None:
        super().__init__(message)
        self.pid = pid

    def __reduce__(self) -> Any:
        return (QueuePeerDiedError, (str(self), self.pid))


# The two classes that are the stdlib pool's own (``pool_errors``): imported when
# asked for, so that what uses no Pool never imports ``multiprocessing.pool``.
__getattr__, __dir__ = exports(__name__, dict.fromkeys(
    ("RemoteTraceback", "ResultEncodingError"), f"{__package__}.pool_errors"))
