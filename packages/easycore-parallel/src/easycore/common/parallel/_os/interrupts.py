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

And one place where it must get through: **a blocking wait in the main
thread**. The kernel hands a Ctrl-C to any thread that does not block SIGINT:
usually the main thread, but not always (one that has another signal pending
or blocks SIGINT for a moment is passed over for the pool's coordinator, and
a kernel may choose otherwise). Python raises ``KeyboardInterrupt`` in the
main thread only, once it runs Python code again: a main thread waiting on a
lock that another thread releases (a result's event) waited until the work
ended.
[`sliced`][easycore.common.parallel._os.interrupts.sliced] waits in slices
of at most ``SLICE`` seconds there.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable, Iterator, List, Optional

__all__ = [
    "SLICE", "blocked_at_start", "deferred", "held", "join", "slice_of", "sliced",
    "unblock_in_worker",
]

#: seconds a blocking wait in the main thread sleeps at most before it runs
#: Python code again (where a pending Ctrl-C raises): ten wakeups a second of
#: a waiting caller, nothing measurable, against a Ctrl-C that waited for the work
SLICE = 0.1

_SIGMASK = hasattr(signal, "pthread_sigmask")

# The C functions behind ``signal.signal``/``getsignal``: the module's wrappers
# convert every handler to and from an enum, ~4 us a call, and ``deferred``
# runs three of them around every job a runner or pool submits.
_raw: Any
try:
    _raw = __import__("_signal")
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
        _raw.signal(_SIGINT, _Hold(held))

    def __exit__(self, *exc: Any) -> None:
        previous = self._previous
        if previous is None:
            return
        _raw.signal(_SIGINT, previous)
        if self._held:
            previous(signal.SIGINT, self._held[0])


class _Hold:
    """``deferred``'s SIGINT handler: notes the Ctrl-C (its frame) for later."""

    __slots__ = ("_held",)

    def __init__(self, held: List[Any]) -> None:
        self._held = held

    def __call__(self, signum: int, frame: Any) -> None:
        self._held.append(frame)


def held() -> bool:
    """Whether a Ctrl-C is held here now (this thread is inside ``deferred``, and
    it is the main thread): a ``KeyboardInterrupt`` raised meanwhile is not the
    user's Ctrl-C but some code's own (an object's unpickling, say)."""
    return (threading.get_ident() == threading.main_thread().ident
            and isinstance(_raw.getsignal(_SIGINT), _Hold))


@contextlib.contextmanager
def blocked_at_start() -> Iterator[None]:
    """Block SIGINT in this thread while a worker process is started.

    The child (fork) or the program it runs (spawn, and the fork server's
    children when the server is started here) inherits the blocked mask.
    """
    if not _SIGMASK:
        yield
        return
    # The mask is read first, changing nothing, and changed inside the try:
    # ``pthread_sigmask`` runs pending signal handlers after it changed the
    # mask, so a Ctrl-C already received made the blocking call itself raise,
    # and SIGINT stayed blocked in this thread for good (every process it
    # started later inherited that: a Ctrl-C never reached them).
    before = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        yield
    finally:
        if signal.SIGINT not in before:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def unblock_in_worker() -> None:
    """In a worker that now ignores SIGINT: unblock it (a pending one is dropped)."""
    if _SIGMASK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def slice_of(timeout: Optional[float]) -> Optional[float]:
    """How long one wait of a loop that looks again may sleep: ``timeout``, but at
    most ``SLICE`` seconds in the main thread (see ``sliced``).

    Args:
        timeout (float or None): what is left of the whole wait (None: no limit).

    Returns:
        float or None: the seconds for this one wait.
    """
    if threading.current_thread() is not threading.main_thread():
        return timeout
    return SLICE if timeout is None else min(SLICE, timeout)


def sliced(wait: Callable[[Optional[float]], Any], timeout: Optional[float] = None) -> bool:
    """``wait(timeout)``, which a Ctrl-C interrupts whichever thread the kernel handed it to.

    In the main thread the wait goes in slices of at most ``SLICE`` seconds:
    between two, Python runs its signal handlers, and a Ctrl-C that another
    thread received raises ``KeyboardInterrupt`` here. Elsewhere (no Ctrl-C
    is raised there) it is one call.

    Args:
        wait (callable): ``wait(seconds)`` waits at most ``seconds`` (None: no
            limit) and returns whether what it waits for happened (truthy), as
            ``threading.Event.wait`` does.
        timeout (float or None): seconds in all; None waits for ever.

    Returns:
        bool: whether what ``wait`` waits for happened within ``timeout``.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if wait(slice_of(left)):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False


def join(thread: threading.Thread, timeout: Optional[float] = None) -> bool:
    """``thread.join(timeout)`` as ``sliced`` waits; whether the thread has ended.

    Args:
        thread (threading.Thread): a started thread.
        timeout (float or None): seconds; None waits for ever.

    Returns:
        bool: whether ``thread`` ended within ``timeout``.
    """
    def wait(seconds: Optional[float]) -> bool:
        # Each slice holds a Ctrl-C until it returns (``deferred``): CPython
        # 3.10-3.12's ``Thread.join``, interrupted while it waits, releases the
        # lock the running thread holds and marks it ended, and every later join
        # of it returns at once.
        with deferred():
            thread.join(seconds)
            return not thread.is_alive()

    return sliced(wait, timeout)
