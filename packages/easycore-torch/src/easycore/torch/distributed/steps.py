"""The caller's side of the steps: run one on each of some ranks, wait, report failures.

`run_steps` submits one job to
an [`Engine`][easycore.common.parallel.engine.core.Engine] whose item k runs on
rank ``ranks[k]`` (the engine's ``targets``), pumps the engine until every
rank answered, and fails fast:

* a rank's step failed (a `Failed` result, see `rank_worker`): ``WorkerError``
  naming the rank, its device and the step, at once, unless the error is
  only a consequence of another rank's failure ("Connection closed by peer"):
  then the likelier cause gets ``settle`` seconds to show up (`failures`);
* a rank died: the engine (``fail_fast``) reports ``WorkerDiedError``;
* the deadline passed: ``TimeoutError`` naming the ranks still running.

The caller then aborts the back-end, which kills every rank.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from easycore.common.parallel import WorkerError
from easycore.common.parallel.extending import Engine, ItemError, JobSink

from .failures import CONSEQUENCE, name_rank, severity
from .rank_worker import Failed, Step

__all__ = ["SETTLE", "TICK", "run_steps"]

#: seconds to wait, after a rank failed only because another did, for the cause
SETTLE = 1.0
#: longest single wait on the engine, so that deadlines are kept
TICK = 0.25
_MISSING = object()


class _Outcomes(JobSink):
    """Every rank's answer, failures in the order they came."""

    def __init__(self, n: int) -> None:
        self.values: List[Any] = [_MISSING] * n
        self.failures: List[Tuple[int, Any]] = []  # (position, Failed or exception)

    def deliver(self, first_index: int, results: List[Any], failed: Dict[int, ItemError]) -> None:
        for k, value in enumerate(results):
            if k in failed:
                self.failures.append((first_index + k, failed[k].exc))
            elif isinstance(value, Failed):
                self.failures.append((first_index + k, value))
            else:
                self.values[first_index + k] = value


def run_steps(
    engine: Engine,
    steps: Sequence[Step],
    ranks: Sequence[int],
    deadline: Optional[float],
    what: str,
    timeout: Optional[float] = None,
    settle: float = SETTLE,
) -> List[Any]:
    """Run ``steps[k]`` on rank ``ranks[k]`` and wait for every answer.

    Args:
        engine (Engine): a started, fail-fast engine whose workers are the ranks.
        steps (list[Step]): one step per rank in ``ranks``.
        ranks (list[int]): the ranks (worker slots) to run them on.
        deadline (float or None): ``time.monotonic()`` value to give up at.
        what (str): what the ranks are doing, for the ``TimeoutError``.
        timeout (float or None): the limit behind ``deadline``, for the message.
        settle (float): seconds to wait for a root cause after a consequence.

    Returns:
        list: each step's result, in the order of ``steps``.

    Raises:
        WorkerError: a rank's step raised (named by rank, device and step).
        WorkerDiedError: a rank died.
        TimeoutError: ``deadline`` passed first.
    """
    world_size = len(engine.devices)
    sink = _Outcomes(len(steps))
    job = engine.submit_job(None, list(steps), sink, targets=list(ranks))
    settle_end: Optional[float] = None
    while True:
        errors = [_error(engine, ranks[k], f) for k, f in sink.failures]
        errors += [e for e in (job.error, engine.broken) if e is not None]
        now = time.monotonic()
        if errors:
            # The likeliest root cause: a death, else a rank's own error,
            # else (after settling) a consequence; the earliest among equals.
            best = min(errors, key=severity)
            if severity(best) < CONSEQUENCE:
                raise name_rank(best, world_size)
            if settle_end is None:
                settle_end = now + settle
            elif now >= settle_end:
                raise name_rank(best, world_size)
        elif job.done:
            return sink.values
        if deadline is not None and now >= deadline:
            failed = {k for k, _ in sink.failures}
            running = [ranks[k] for k, v in enumerate(sink.values)
                       if v is _MISSING and k not in failed]
            raise _timeout_error(engine, running, what, timeout)
        wait = TICK
        for end in (deadline, settle_end):
            if end is not None:
                wait = min(wait, end - now)
        engine.pump(max(0.0, wait))


def _error(engine: Engine, rank: int, failure: Any) -> BaseException:
    if isinstance(failure, Failed):
        return WorkerError.from_report(failure.report, engine.devices[rank], rank,
                                       _pid(engine, rank))
    return failure


def _pid(engine: Engine, rank: int) -> Optional[int]:
    pids = engine.backend.pids
    return pids[rank] if rank < len(pids) else None


def _timeout_error(engine: Engine, ranks: List[int], what: str,
                   timeout: Optional[float]) -> TimeoutError:
    # Where each one is, read before the ranks are killed (half a second at most).
    found = engine.backend.stacks(ranks, 0.5)
    where = {r: s.innermost() for r, s in found.items() if s is not None}
    running = ", ".join(
        f"rank {r} (device {engine.devices[r]!r}"
        + (f", pid {_pid(engine, r)})" if _pid(engine, r) is not None else ")")
        + (f" in {where[r]}" if where.get(r) is not None else "")
        for r in ranks
    )
    return TimeoutError(f"{what} did not finish within {timeout} s: still running: {running}")
