"""The pool's jobs seam: what clients built on a pool (``BackgroundTask``, ``JobQueue``) use.

[`PoolJobs`][easycore.common.parallel.pool.PoolJobs] submits, consumes and
cancels a pool's jobs and reports on its workers, instead of those clients
reaching into the pool's private attributes;
[`pool_options`][easycore.common.parallel.pool.pool_options] splits their
``**options`` into the worker options (checked once) and the pool's own
keywords.
"""

from __future__ import annotations

import inspect

from ..engine import door
from ..engine.job import Job, JobSink
from ..options import FIELDS, WorkerOptions
from .pool import Pool
from .program import MAP

TYPE_CHECKING = False
if TYPE_CHECKING:  # insights are imported when asked for
    from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

    from ..insights import Insights

__all__ = ["PoolJobs", "pool_options"]


def pool_options(pool_class: type, kwargs: Mapping[str, Any]
                 ) -> Tuple[WorkerOptions, Dict[str, Any]]:
    """Split a client's ``**options`` for ``pool_class``: the worker options, checked
    once here, and the pool's own keyword arguments (``devices``, ``cfg``, ...).

    What ``BackgroundTask`` and ``JobQueue`` hand their pool: the options
    object (``Pool(..., options=)``) and the rest. A keyword that is neither an
    option nor a parameter of the pool class is the back-end's (Ray's
    ``address``), refused by the back-end if it does not take it.

    Args:
        pool_class (type): ``Pool`` or a subclass (easycore-torch's takes ``tensor_sharing``).
        kwargs (dict): the keyword arguments, options included.

    Returns:
        tuple: ``(WorkerOptions, the pool's other keyword arguments)``.

    Raises:
        ValueError: a bad option, or a back-end the pool class does not know.
    """
    fields = set(FIELDS) - {"backend_options"}
    params: set = set()
    for klass in (pool_class, Pool):
        params |= {name for name, p in inspect.signature(klass).parameters.items()
                   if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    chosen = {k: v for k, v in kwargs.items() if k in fields}
    rest = {k: v for k, v in kwargs.items() if k not in fields and k in params}
    backend_options = {k: v for k, v in kwargs.items() if k not in fields and k not in params}
    options = WorkerOptions(**chosen, backend_options=backend_options)
    options.check_backend(getattr(pool_class, "backends", door.BACKENDS))
    return options, rest


class PoolJobs:
    """What a client built on a pool does with the pool's jobs: the seam that
    [`BackgroundTask`][easycore.common.parallel.BackgroundTask] and
    [`JobQueue`][easycore.common.parallel.JobQueue] use instead of the pool's
    private attributes.

    Not part of ``multiprocessing.Pool``'s API: ``PoolJobs(pool)`` wraps a
    running pool; each method raises what the pool raises once it is closed.
    """

    __slots__ = ("pool",)

    def __init__(self, pool: Pool) -> None:
        """
        Args:
            pool (Pool): the pool whose jobs these are.
        """
        self.pool = pool

    def submit(self, function: Callable[[Any], Any], items: Sequence[Any], sink: JobSink, *,
               ordered: bool = False, window: Optional[int] = None) -> Job:
        """A job of ``function`` over ``items``, one item per chunk, results to ``sink``.

        Args:
            function (callable): called with each item in a worker (by value
                where it must be, as ``map``'s function).
            items (Sequence): a list, or an endless ``range`` (with ``window``).
            sink (JobSink): receives the results, failures and the end.
            ordered (bool): deliver in input order.
            window (int or None): items handed out but not yet
                [`consume`][easycore.common.parallel.pool.PoolJobs.consume]d, at most.

        Returns:
            Job:
        """
        return self.pool._submit(function, MAP, items, sink, ordered=ordered, lazy=False,
                                 chunksize=1, task_timeout=None, pass_context=False,
                                 window=window)

    def consume(self, job: Job, n: int) -> None:
        """``n`` results of ``job`` were taken by the caller: its window moves on."""
        self.pool._engine.consume(job, n)

    def cancel(self, job: Job) -> None:
        """Stop ``job``: nothing more is sent, results in flight are dropped."""
        self.pool._engine.cancel(job)

    def cancel_unsent(self, job: Job) -> bool:
        """Cancel ``job`` if none of it was handed to a worker yet.

        Returns:
            bool: True if it is cancelled and nothing of it runs; False if it
            ended already or runs.
        """
        return self.pool._engine.cancel_unsent(job)

    @property
    def broken(self) -> bool:
        """bool: the pool can run no more jobs (its workers could not be replaced, or it closes)."""
        engine = self.pool._engine
        return engine.broken is not None or engine.closing

    @property
    def forked(self) -> bool:
        """bool: the workers are forked from this process (they inherit, see ``inherit``)."""
        return door.forked(self.pool._engine)

    def worker_seconds(self) -> List[float]:
        """list[float]: per worker slot, seconds spent running items (replacements included)."""
        return self.pool._engine.worker_seconds()

    def waited(self, seconds: float) -> None:
        """The caller waited ``seconds`` for a result (counted with ``insights=True``)."""
        recorder = self.pool._recorder
        if recorder is not None:
            recorder.waiting_for_results += seconds

    def count_from_now(self) -> None:
        """Start the insights afresh (with ``insights=True``): a client's counting starts
        once its constructor returns."""
        recorder = self.pool._recorder
        if recorder is not None:
            recorder.reset()

    def insights(self) -> Insights:
        """The pool's insights, the caller's own code being what runs between its ``get`` calls.

        Raises:
            RuntimeError: made without ``insights=True``.
        """
        recorder = self.pool._recorder
        if recorder is None:
            raise RuntimeError("insights are off: pass insights=True")
        recorder.between_calls = True
        return self.pool.insights()
