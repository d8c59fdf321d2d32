"""A runner's call, on the calling thread: the job, its pump, the consumer's hooks.

Imported when a runner is made, not with its class: a runner's ``spawn`` or
``forkserver`` worker imports the runner's module, and needs none of this
(the engine's job, the progress bar, the lazy copy of ``cfg``).
"""

from __future__ import annotations

import time

from ._os import stacks as _stacks
from .engine.job import ItemError, JobSink
from .errors import RunnerClosedError, TaskTimeoutError
from .progress import Progress

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from collections.abc import Iterable
    from typing import Any, Dict, List, Optional

    from easycore.common.config import CfgNode

    from .engine.core import Engine
    from .insights import Recorder
    from .progress import ProgressOption
    from .runner import BaseRunner

__all__ = ["ConsumerSink", "run_call"]

#: inputs the calling thread may slice without ever blocking
_IN_MEMORY = (list, tuple, range)


class ConsumerSink(JobSink):
    """Delivers a call's results to the runner's consumer hooks."""

    def __init__(self, runner_cls: Any, cfg: CfgNode, progress: Progress,
                 recorder: Optional[Recorder] = None) -> None:
        self._batch = runner_cls.consumer_work_batch
        self._cfg = cfg
        self._progress = progress
        self._recorder = recorder
        self.error: Optional[BaseException] = None
        self.finished = False

    def deliver(self, first_index: int, results: List[Any], failed: Dict[int, ItemError]) -> None:
        if failed:  # a fail-fast job fails before delivering; kept for safety
            raise failed[min(failed)].exc
        recorder = self._recorder
        if recorder is None:
            self._batch(self._cfg, results)
        else:  # insights: the consumer's hooks are the caller's own stage
            t0 = time.perf_counter()
            try:
                self._batch(self._cfg, results)
            finally:
                recorder.consumed(t0)
        self._progress.update(len(results))

    def finish(self, error: Optional[BaseException]) -> None:
        self.error = error
        self.finished = True


def run_call(self: BaseRunner, engine: Engine, data: Iterable,
             progress: Optional[ProgressOption], task_timeout: Optional[float]) -> Any:
    """One call of ``self`` (``BaseRunner.__call__``, which holds its busy lock).

    Args:
        self (BaseRunner): the runner, active.
        engine (Engine): its engine.
        data (Iterable): the call's input: sliced if a list, tuple or range, else read lazily.
        progress (bool or dict or None): the call's ``progress`` (None: the runner's).
        task_timeout (float or None): the call's ``task_timeout`` (None: the runner's).

    Returns:
        Any: what ``consumer_end`` returned.
    """
    cls = type(self)
    lazy = not isinstance(data, _IN_MEMORY)
    source = iter(data) if lazy else data  # fail here if not iterable
    timeout = self._options.timeout_for(task_timeout)
    cfg = self._consumer_cfg()
    bar = None
    job = None
    recorder = self._recorder
    if recorder is not None:
        recorder.reset()
    try:
        cls.consumer_init(cfg)
        bar = Progress(self._options.progress if progress is None else progress, _length(data),
                       cls.__name__, recorder)
        sink = ConsumerSink(cls, cfg, bar, recorder)
        job = engine.submit_job(None, source, sink, ordered=self.ordered, lazy=lazy,
                                timeout=timeout, chunker=self._chunker)
        while not job.done:
            if recorder is not None:  # insights: what is not a stage is moving data
                t0 = time.perf_counter()
                before = recorder.consuming + recorder.reading_input \
                    + recorder.waiting_for_results
            feeding = lazy and engine.feed(job)
            engine.pump(0.0 if feeding and engine.has_credit() else None)
            if recorder is not None:
                recorder.caller_moving += time.perf_counter() - t0 - (
                    recorder.consuming + recorder.reading_input
                    + recorder.waiting_for_results - before)
            if engine.closing:
                raise RunnerClosedError(
                    f"{cls.__name__} was closed while this call ran")
        if job.error is not None:
            raise job.error
    except TaskTimeoutError:
        # Only that worker was replaced; whatever else ran for this call
        # is discarded when it comes back.
        raise
    except RunnerClosedError:
        if not engine.closing:
            self._abort(engine)
        raise
    except BaseException as exc:
        if job is not None:
            engine.cancel(job)
        # A Ctrl-C says where the busy workers were.
        _stacks.note(exc, self._abort(engine, where=isinstance(exc, KeyboardInterrupt)))
        raise
    finally:
        if bar is not None:
            bar.close()
        if recorder is None:
            pass
        elif not (job is not None and job.done and job.error is None):
            self._insights = recorder.snapshot()  # a failed call: up to its failure
    try:
        if recorder is None:
            return cls.consumer_end(cfg)
        t0 = time.perf_counter()
        try:
            return cls.consumer_end(cfg)
        finally:
            recorder.consumed(t0)
            self._insights = recorder.snapshot()
    except BaseException:
        self._abort(engine)
        raise


def _length(data: Iterable) -> Optional[int]:
    try:
        return len(data)  # type: ignore[arg-type]
    except TypeError:
        return None
