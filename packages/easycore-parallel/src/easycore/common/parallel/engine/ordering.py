"""How results are ordered: the one place that decides when a chunk's results reach their sink.

Every job says ``ordered=`` when it is submitted
([`Engine.submit_job`][easycore.common.parallel.engine.core.Engine.submit_job]): a
runner passes its class attribute ``ordered``, ``Pool`` passes True for
``map``/``imap``/``starmap`` and False for ``imap_unordered``. Workers finish
chunks in any order; what the sink sees is decided here, by
[`deliver`][easycore.common.parallel.engine.ordering.deliver], on the thread that
pumps:

* **Unordered**: a chunk's results go to the sink the moment they arrive.
* **Ordered**: results are keyed by the input index of their first item and
  held in an [`InputOrder`][easycore.common.parallel.engine.ordering.InputOrder]
  until every item before them was delivered; then the run of consecutive
  pieces goes out at once. A chunk that is retried after a worker death comes
  back in pieces (one item alone, the items before and after it), so the
  buffer is keyed by item index, never by chunk number.

How far an ordered job may run ahead of its slowest chunk is bounded by the
bytes its buffer holds (``reorder_bytes``, each item counting at least 64
bytes), not by a number of chunks: one slow item does not stall every worker,
and a stream of big results cannot fill the memory.
[`may_run_ahead`][easycore.common.parallel.engine.ordering.may_run_ahead] is the test
the dispatcher makes before it gives such a job another credit.
"""

from __future__ import annotations

from .._hints import Protocol

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Dict, List, Optional, Tuple

    #: an item's failure as a sink receives it (``job.ItemError``; this module
    #: imports nothing of the engine, which imports it)
    _Failures = Dict[int, Any]
    _Piece = Tuple[List[Any], _Failures, int]

__all__ = ["InputOrder", "Ordered", "deliver", "may_run_ahead"]


class InputOrder:
    """An ordered job's reorder buffer: pieces that wait for an earlier one."""

    __slots__ = ("_held", "_next", "bytes")

    def __init__(self) -> None:
        self._held: Dict[int, _Piece] = {}  # input index of a piece's first item -> piece
        self._next = 0  # input index of the next item to deliver
        self.bytes = 0  # what the held pieces cost (see reorder_bytes)

    def hold(self, first: int, results: List[Any], failed: _Failures, cost: int) -> None:
        self._held[first] = (results, failed, cost)
        self.bytes += cost

    def pop_next(self) -> Optional[Tuple[int, List[Any], _Failures]]:
        """The piece that starts at the next index to deliver, or None if it did not come yet."""
        piece = self._held.pop(self._next, None)
        if piece is None:
            return None
        results, failed, cost = piece
        first, self._next = self._next, self._next + len(results)
        self.bytes -= cost
        return first, results, failed

    def __bool__(self) -> bool:
        """Whether results wait for an earlier piece."""
        return bool(self._held)


class Ordered(Protocol):
    """What ordering reads of a job (a [`Job`][easycore.common.parallel.engine.job.Job])."""

    #: its reorder buffer (None: unordered)
    order: Optional[InputOrder]
    #: where results go (a ``JobSink``)
    sink: Any
    #: it ended: nothing more is delivered
    done: bool


def deliver(job: Ordered, first: int, results: List[Any], failed: _Failures,
            cost: int = 0) -> None:
    """Hand results to ``job``'s sink, in input order if the job is ordered.

    Args:
        job (Job): the job (see ``Ordered``).
        first (int): input index of ``results[0]``.
        results (list): one per item.
        failed (dict): position in ``results`` -> the item's error.
        cost (int): bytes the results count against ``reorder_bytes`` while held.
    """
    order = job.order
    if order is None:
        job.sink.deliver(first, results, failed)
        return
    order.hold(first, results, failed, cost)
    while not job.done:  # a sink may end its job (a cancel) while it receives
        piece = order.pop_next()
        if piece is None:
            return
        job.sink.deliver(*piece)


def may_run_ahead(job: Ordered, reorder_bytes: int) -> bool:
    """Whether ``job`` may have another chunk sent: an ordered job holding more than
    ``reorder_bytes`` waits until its late chunk came back."""
    return job.order is None or job.order.bytes <= reorder_bytes
