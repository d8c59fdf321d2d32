"""Whose turn it is to pump a pool's engine: its coordinator's, or a blocking caller's.

A pool's coordinator thread pumps its engine: it reads every result and hands
it to the thread that waits for it. For one call after another (``apply`` in a
loop, the kept-alive call of the benchmarks) that hand-over is most of the
cost: the coordinator wakes for the result, then wakes the caller, two threads
woken per call where one would do. So a blocking call whose job is the
engine's only one *leads*: its own thread pumps until its result is there, as
a runner's caller always does, and spins for the answer before it sleeps
(``_os.spin``); the coordinator is parked meanwhile. Measured on two cores,
``Pool.apply`` kept alive took 136-143 µs with the hand-over and 71-79 µs led.

The rules, all under the engine's lock (``state.lock``, this class's condition):

* A caller may lead only while the coordinator is parked or not started, and
  no other job exists (``claim``); the coordinator parks at the next chance
  when a caller asked for it and nothing else runs (``park``). A caller that
  finds the coordinator pumping waits as before and asks it to park: the next
  call leads.
* While a job is led, the dispatcher sends no other job's chunks
  (``state.led``; see ``Dispatcher.reserve``): no result of another job, and
  no callback, ever reaches the leading thread. A job submitted meanwhile
  wakes the leader, which stops leading at once, sends what waits and hands
  the pump back to the coordinator (``leave``); the new job waits one pump.
* The coordinator stays parked for ``LINGER`` seconds after the last leader
  left (the next call of a loop leads without waking it), then pumps again:
  a worker that dies while the pool is idle is replaced ``LINGER`` seconds
  later at most, and a job submitted meanwhile unparks it at once.
* The leader pumps with Ctrl-C held for one ``SLICE`` at most
  (``interrupts.deferred``): a Ctrl-C never cuts a message in half, and it
  lands as promptly as a plain wait's. Whatever ends the lead (its result,
  an error, a close, a Ctrl-C), the coordinator gets its turn back.
"""

from __future__ import annotations

import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from .job import Job
    from .state import EngineState

__all__ = ["LINGER", "Turns"]

#: seconds the coordinator stays parked after the last leader left
LINGER = 0.05

_ABSENT, _PUMPING, _PARKED = "absent", "pumping", "parked"


class Turns:
    """Whose turn it is to pump an engine: the coordinator's, or a leading caller's."""

    def __init__(self, state: EngineState) -> None:
        """
        Args:
            state (EngineState): the engine's state; its lock guards the turns.
        """
        self._state = state
        self._cond = threading.Condition(state.lock)
        #: the coordinator: not started, pumping, or parked
        self.coordinator = _ABSENT
        self._park_asked = False
        self._resume_at = 0.0  # a parked coordinator with no leader pumps again then

    # ------------------------------------------------------------ coordinator
    def park(self, stop: threading.Event) -> None:
        """The coordinator, before each pump: wait while a caller leads; park for
        ``LINGER`` seconds if a caller asked for it and nothing else runs (until
        ``stop``, or a job to pump)."""
        state = self._state
        with self._cond:
            if self._park_asked and not state.jobs:
                self._park_asked = False
                self._resume_at = time.monotonic() + LINGER
            elif state.led is None:
                self.coordinator = _PUMPING
                return
            self.coordinator = _PARKED
            while not stop.is_set():
                if state.led is not None:
                    # (Woken only when the lead ends with work for it; a lead
                    # that ends quietly leaves it to find out at its next look.)
                    self._cond.wait(LINGER)
                    continue
                left = self._resume_at - time.monotonic()
                if left <= 0 or state.jobs:
                    break
                self._cond.wait(left)
            self.coordinator = _PUMPING

    def unpark(self) -> None:
        """Give the coordinator its turn now (a job to pump, a stop); any thread."""
        with self._cond:
            self._resume_at = 0.0
            self._cond.notify_all()

    # --------------------------------------------------------------- callers
    def claim(self, job: Job) -> bool:
        """Whether the blocking call that just made ``job`` leads it (lock held,
        ``job`` made but nothing of it sent); if the coordinator pumps, it is
        asked to park for the next call."""
        state = self._state
        if self.coordinator == _PUMPING:
            self._park_asked = True
            return False
        if len(state.jobs) != 1 or state.led is not None:
            return False  # another job runs: the coordinator pumps them all
        state.led = job
        return True

    def foreign(self, job: Job) -> bool:
        """Whether a job other than ``job`` exists now, to be pumped by the coordinator."""
        state = self._state
        return len(state.jobs) > (0 if job.done else 1)

    def leave(self, job: Job) -> None:
        """The leader of ``job`` stops pumping (lock held): the coordinator parks
        on for ``LINGER`` seconds, or pumps at once if another job waits."""
        state = self._state
        if state.led is job:
            state.led = None
        if self.foreign(job) or state.closing or state.broken is not None:
            self._resume_at = 0.0
            self._cond.notify_all()
        else:
            self._resume_at = time.monotonic() + LINGER

    @property
    def parked(self) -> bool:
        """bool: the coordinator is parked (read under the lock)."""
        return self.coordinator == _PARKED
