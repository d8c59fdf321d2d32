"""Results that stay in the service: [`RemoteRef`][easycore.common.parallel.services.RemoteRef].

machin's ``RRef`` role: ``handle.run(fn, remote=True)`` (and
``ref.call(method, remote=True)``) keep the result in the service's process
and hand back a small reference: ``.get()`` copies the value here,
``.call(method, ...)`` calls one of its public methods there.

The service holds the value until the reference is released: when the last
``RemoteRef`` on it is garbage-collected (its finalizer queues the release;
the channel sends it without taking a lock a caller may hold), when
``release()`` is called, when the client that made it disconnects or dies
(process back-end), or when the service stops. A ``RemoteRef`` pickled into
another process becomes a reference of its own there (the service keeps the
value until both are released): loading the pickle *claims* it for the
loading process's connection, which releases it like its own references.
A pickle that is never loaded (a failed send, a size check) pins the value
only as long as the original reference lives, and ``RemoteRef.pickle_lease``
seconds after it is released (time for a pickle in flight to be loaded);
then the copy is dropped, and loading it later gives a reference whose
calls raise ``LookupError`` (as a ``WorkerError``). A ``RemoteRef`` holds
its handle: an owner's handle (and so its service) stays alive while
references made through it do.
"""

from __future__ import annotations

import concurrent.futures
import os
import weakref

from .._future import Future
from .dispatch import REF, RefToken

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, ClassVar, Optional

__all__ = ["RemoteRef", "resolve", "resolve_future"]

_CLAIM_TIMEOUT = 30.0  # seconds loading a pickled reference waits to claim it


def _release(state: Any, ref_id: int, pid: int) -> None:
    # A finalizer: no locks, no waiting. A forked copy owns nothing.
    if os.getpid() != pid or state.closed:
        return
    channel = state.channel
    if channel is not None and channel.pid == pid:
        channel.release(ref_id)


class RemoteRef:
    """A value kept in a service's process.

    Made by [`ServiceHandle.run`][easycore.common.parallel.services.ServiceHandle.run]
    with ``remote=True``, never directly.

    Attributes:
        ref_id (int): its number in the service.
        type_name (str): the value's type, for messages.
    """

    #: seconds a pickled copy that was never loaded outlives the original
    #: reference's release (while the original lives, so does the copy)
    pickle_lease: ClassVar[float] = 60.0

    def __init__(self, handle: Any, token: RefToken) -> None:
        self._handle = handle
        self.ref_id = token.ref_id
        self.type_name = token.type_name
        state = handle._state
        track = getattr(state.channel, "track_refs", None)
        if track is not None:
            track()
        self._finalizer = weakref.finalize(self, _release, state, self.ref_id, os.getpid())

    def get(self, timeout: Optional[float] = None) -> Any:
        """A copy of the value, here.

        Args:
            timeout (float or None): seconds to wait.

        Returns:
            Any:

        Raises:
            LookupError: (as a ``WorkerError``) the reference was released.
        """
        return self._handle.call(REF, "get", self.ref_id, timeout=timeout)

    def call(self, method: str, *args: Any, timeout: Optional[float] = None,
             remote: bool = False, **kwargs: Any) -> Any:
        """Call ``value.method(*args, **kwargs)`` in the service.

        Args:
            method (str): a public method of the value.
            *args: its arguments (lambdas and closures travel by value).
            timeout (float or None): seconds to wait.
            remote (bool): keep the result there too: returns a ``RemoteRef``.
            **kwargs: its keyword arguments.

        Returns:
            Any: the result, or a ``RemoteRef`` on it.
        """
        result = self._handle.call(REF, "call", self.ref_id, method, remote, *args,
                                   timeout=timeout, **kwargs)
        return resolve(self._handle, result)

    def release(self) -> None:
        """Let the service drop the value now (also done, soon, when this is collected).

        Idempotent; waits until the service has dropped it.
        """
        if self._finalizer.detach() is not None:
            self._handle.call(REF, "release", self.ref_id)

    @property
    def released(self) -> bool:
        """bool: whether ``release()`` was called."""
        return not self._finalizer.alive

    def __reduce__(self) -> Any:
        # A copy for another process is a reference of its own in the
        # service, claimed when it is loaded (see the module docstring).
        token = self._handle.call(REF, "dup", self.ref_id, float(self.pickle_lease))
        return (_rebuild, (self._handle, token))

    def __repr__(self) -> str:
        return (f"<RemoteRef #{self.ref_id} {self.type_name} in "
                f"{self._handle._state.target.label}>")


def _rebuild(handle: Any, token: RefToken) -> RemoteRef:
    ref = RemoteRef(handle, token)
    try:  # noqa: SIM105 - the except below says why it is broad
        handle.call(REF, "claim", token.ref_id, timeout=_CLAIM_TIMEOUT)
    except Exception:  # noqa: BLE001
        # Released before it was loaded (its lease ended), or the service is
        # gone: the reference still loads, and its first use says which.
        pass
    return ref


def resolve(handle: Any, result: Any) -> Any:
    """``result``, or a ``RemoteRef`` when the service kept it."""
    if isinstance(result, RefToken):
        return RemoteRef(handle, result)
    return result


def resolve_future(handle: Any, inner: concurrent.futures.Future) -> Future:
    """A future of ``inner``'s result, passed through ``resolve``."""
    outer: Future = Future()
    outer.set_running_or_notify_cancel()

    def done(f: concurrent.futures.Future) -> None:
        error = f.exception()
        if error is not None:
            outer.set_exception(error)
        else:
            outer.set_result(resolve(handle, f.result()))

    inner.add_done_callback(done)
    return outer
