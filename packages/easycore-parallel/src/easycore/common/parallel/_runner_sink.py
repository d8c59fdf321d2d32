"""Where a runner's call delivers its results: the consumer's hooks, on the calling thread."""

from __future__ import annotations

import time

from .engine.job import ItemError, JobSink

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Dict, List, Optional

    from easycore.common.config import CfgNode

    from .insights import Recorder
    from .progress import Progress

__all__ = ["ConsumerSink"]


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
