"""Ctrl-C around easycore's critical sections.

Python raises ``KeyboardInterrupt`` in the main thread between any two
bytecodes. Two places must not be cut in half by it:

* **Handing work to a worker** (a credit reserved, items encoded, a frame
  written to the pipe): cut there, a credit stays taken by a chunk that was
  never sent, or half a frame sits on the pipe.
  [`deferred`][easycore.common.parallel._os.interrupts.deferred] holds a Ctrl-C
  that lands inside and raises it right after, once the state is whole.
* **Starting a worker process**: a worker that gets the terminal's SIGINT
  before it could ignore it (still in multiprocessing's bootstrap) dies, and
  the caller sees a ``WorkerDiedError`` instead of its own
  ``KeyboardInterrupt``.
  [`blocked_at_start`][easycore.common.parallel._os.interrupts.blocked_at_start]
  blocks SIGINT in the starting thread, so the child inherits it blocked; the
  worker unblocks it
  ([`unblock_in_worker`][easycore.common.parallel._os.interrupts.unblock_in_worker])
  once it ignores it. A Ctrl-C meanwhile reaches the caller as usual.
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Iterator, List

__all__ = ["deferred", "blocked_at_start", "unblock_in_worker"]

_SIGMASK = hasattr(signal, "pthread_sigmask")

# The C functions behind ``signal.signal``/``getsignal``: the module's wrappers
# convert every handler to and from an enum, ~4 us a call, and ``deferred``
# runs three of them around every job a runner or pool submits.
_raw: Any
try:
    _raw = importlib.import_module("_signal")
except ImportError:  # another interpreter: the public functions do the same
    _raw = signal
_SIGINT = int(signal.SIGINT)


class deferred:  # used as a function: ``with interrupts.deferred():``
    """Hold a Ctrl-C (SIGINT) that lands inside; raise it on the way out.

    Only the main thread handles signals; elsewhere this does nothing. A
    handler other than Python's (ignored, default) is left alone. A class
    rather than a generator: it runs around every job a runner or pool
    submits, and a generator's context manager costs several times more.
    """

    __slots__ = ("_held", "_previous")

    def __enter__(self) -> None:
        self._previous: Any = None
        if threading.get_ident() != threading.main_thread().ident:
            return
        previous = _raw.getsignal(_SIGINT)
        if not callable(previous):
            return
        held: List[Any] = []
        self._held = held
        self._previous = previous
        _raw.signal(_SIGINT, lambda signum, frame: held.append(frame))

    def __exit__(self, *exc: Any) -> None:
        previous = self._previous
        if previous is None:
            return
        _raw.signal(_SIGINT, previous)
        if self._held:
            previous(signal.SIGINT, self._held[0])


@contextlib.contextmanager
def blocked_at_start() -> Iterator[None]:
    """Block SIGINT in this thread while a worker process is started.

    The child (fork) or the program it runs (spawn, and the fork server's
    children when the server is started here) inherits the blocked mask.
    """
    if not _SIGMASK:
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if signal.SIGINT not in before:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def unblock_in_worker() -> None:
    """In a worker that now ignores SIGINT: unblock it (a pending one is dropped)."""
    if _SIGMASK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
