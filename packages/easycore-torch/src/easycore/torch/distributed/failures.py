"""Which rank's failure to report, and how to name it.

When one rank fails, the others usually fail *because of it*: a rank that
dies or hangs makes its peers' collectives raise gloo's "Connection closed
by peer" or a timeout. Those are consequences; the error worth reporting is
the first death, else the first error of a rank's own code, and only then a
consequence. `severity` ranks errors that way, and `name_rank`
puts the rank in the message (a rank is its worker's index).
"""

from __future__ import annotations

from typing import Optional

from easycore.common.parallel import WorkerDiedError, WorkerError

__all__ = ["CONSEQUENCE", "DEATH", "OWN", "name_rank", "severity"]

DEATH, OWN, CONSEQUENCE = 0, 1, 2

#: exception types torch.distributed raises when the group itself broke
_DIST_TYPES = {"DistBackendError", "DistNetworkError", "DistStoreError", "DistError"}
#: what gloo says when a peer went away or a collective timed out
_DIST_MARKERS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "pair closure",
    "gloo/transport",
    "Timed out waiting",
)


def severity(err: BaseException) -> int:
    """How likely ``err`` is the root cause: lower is likelier.

    Args:
        err (BaseException): an error of one rank.

    Returns:
        int: ``DEATH``, ``OWN`` or ``CONSEQUENCE``.
    """
    if isinstance(err, WorkerDiedError):
        return DEATH
    if isinstance(err, WorkerError):
        text = f"{err.exc_message}\n{err.remote_traceback}"
        if err.exc_type in _DIST_TYPES or any(m in text for m in _DIST_MARKERS):
            return CONSEQUENCE
    return OWN


def name_rank(err: BaseException, world_size: int) -> BaseException:
    """Prefix the message of a worker's error with its rank (once).

    Args:
        err (BaseException): usually a ``WorkerError`` or ``WorkerDiedError``.
        world_size (int):

    Returns:
        BaseException: ``err`` itself, with a ``rank`` attribute where it names a worker.
    """
    rank: Optional[int] = getattr(err, "worker_index", None)
    if rank is None or getattr(err, "rank", None) is not None:
        return err
    err.rank = rank  # type: ignore[attr-defined]
    if err.args and isinstance(err.args[0], str):
        err.args = (f"rank {rank} of {world_size}: {err.args[0]}", *err.args[1:])
    return err
