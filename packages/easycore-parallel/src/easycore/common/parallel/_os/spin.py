"""A short spin before a blocking wait, where the answer is due within microseconds.

A process that sleeps on a pipe and is woken from another CPU pays for the
wake-up twice: the writer's ``write`` sends an interrupt to the sleeping CPU,
and that CPU leaves its idle state before the reader runs. On the 2-core
development VM each costs about 15 us (a virtual CPU's halt), on bare metal a
few microseconds, more from a deep C-state. A kept-alive call wakes two
processes (the worker, then the caller), so its two wake-ups cost more than
the Python that both sides run. A waiter that checks for its answer for a
moment before it sleeps finds it without either: as OpenMP runtimes spin before
they sleep (``OMP_WAIT_POLICY``, ``GOMP_SPINCOUNT``, ``KMP_BLOCKTIME``).

The spin is short and yields the CPU at every turn (``sched_yield``), so a
process that has work on this CPU (the very worker being waited for, on a
machine with fewer free CPUs than processes) runs instead of the spinner. A
[`Spinner`][easycore.common.parallel._os.spin.Spinner] spins only while its
waits are short: after a wait longer than four budgets (a long chunk, an idle
worker) the next waits sleep at once, but for one in eight, which spins again.
A wait that slept is longer by the very wake-ups a spin saves (and so is the
other side's, while it sleeps too): hence four budgets, not one, and the
probe. Where this process may run on one CPU only, nothing spins.

``EASYCORE_SPIN_US``: the budget in microseconds (default 200; ``0``: never
spin). Read by the process back-end's polling thread and its workers, and by
the connections of the services and the ``Queue`` (both ends).
"""

from __future__ import annotations

import os
import time

from .threads import available_cpus

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Callable, Optional, Tuple, TypeVar

    T = TypeVar("T")

__all__ = ["ENV", "Spinner", "budget"]

#: the environment variable that sets the budget, in microseconds
ENV = "EASYCORE_SPIN_US"
#: the budget when the environment does not set one (seconds)
DEFAULT = 200e-6
#: after a long wait, one wait in this many spins anyway
PROBE_EVERY = 8
#: a wait up to this many budgets long is short: the next one spins
SHORT = 4
_INFINITY = float("inf")


def budget() -> float:
    """Seconds a wait may spin in this process: 0 where it may run on one CPU only.

    Returns:
        float: ``EASYCORE_SPIN_US`` in seconds, 200 us by default.

    Raises:
        ValueError: ``EASYCORE_SPIN_US`` is not a finite number of microseconds >= 0.
    """
    raw = os.environ.get(ENV)
    seconds = DEFAULT
    if raw is not None and raw.strip():
        try:
            seconds = float(raw) * 1e-6
        except ValueError:
            seconds = -1.0
        if not 0.0 <= seconds < _INFINITY:  # NaN too
            raise ValueError(f"{ENV}={raw!r}: expected microseconds, a finite number >= 0 "
                             f"(0: never spin before a blocking wait)")
    if seconds and available_cpus() < 2:
        return 0.0
    return seconds


class Spinner:
    """Spins before a blocking wait while this waiter's waits are short.

    One waiting thread uses it: a back-end's polling thread, a worker's main
    loop, a connection's user or its server's serving thread. Each waits through
    [`wait`][easycore.common.parallel._os.spin.Spinner.wait].
    """

    __slots__ = ("_last", "_slept", "budget")

    def __init__(self, seconds: float) -> None:
        """
        Args:
            seconds (float): the longest spin (0: never spin); see
                [`budget`][easycore.common.parallel._os.spin.budget].
        """
        self.budget = seconds
        self._last = 0.0  # how long the last wait took: spin when it was short
        self._slept = 0  # waits that slept at once since the last spin

    def spin(self, ready: Callable[[], T], timeout: Optional[float]) -> Tuple[T, float]:
        """Call ``ready`` until it returns something true, if spinning pays now.

        Args:
            ready (callable): checks without blocking (an ``epoll`` or ``poll``
                with a timeout of 0).
            timeout (float or None): the wait's own limit (seconds); a spin
                never outlasts it.

        Returns:
            tuple: ``ready``'s last result (falsy: the caller now blocks; not
            called at all where spinning does not pay, None then) and when the
            wait started, for [`waited`][easycore.common.parallel._os.spin.Spinner.waited].
        """
        started = time.perf_counter()
        limit = self.budget
        if not limit or (timeout is not None and timeout <= 0.0):
            return None, started  # type: ignore[return-value]
        if self._last > SHORT * limit:
            self._slept += 1
            if self._slept < PROBE_EVERY:
                return None, started  # type: ignore[return-value]
        self._slept = 0
        if timeout is not None:
            limit = min(limit, timeout)
        end = started + limit
        while True:
            got = ready()
            if got or time.perf_counter() >= end:
                return got, started
            os.sched_yield()  # whoever else has work on this CPU runs first

    def waited(self, started: float) -> None:
        """The wait that began at ``started`` (``spin``'s second value) has ended."""
        self._last = time.perf_counter() - started

    def wait(self, ready: Callable[[], T], block: Callable[[Optional[float]], T],
             timeout: Optional[float]) -> T:
        """Spin for ``ready``'s answer while that pays, else ``block`` for the rest.

        Args:
            ready (callable): checks without blocking (see ``spin``).
            block (callable): ``block(seconds)`` waits for the same answer, at
                most ``seconds`` (None: for ever).
            timeout (float or None): the whole wait's limit (seconds).

        Returns:
            What ``ready`` found, or what ``block`` returned.
        """
        got, started = self.spin(ready, timeout)
        if not got:
            if got is not None and timeout is not None:  # spun in vain: the rest
                timeout = max(0.0, timeout - (time.perf_counter() - started))
            got = block(timeout)
        self.waited(started)
        return got
