"""One call of a runner: feed the input, dispatch chunks, consume results.

Threads in the caller's process during a call:

* the **feeder** (a background thread) pulls the input lazily, in chunks sized
  by :class:`~.chunking.AdaptiveChunker`, and hands each chunk to the least
  busy worker that has a free *credit*;
* the **calling thread** waits on the back-end, decodes results and calls
  ``consumer_work`` once per item (so a KeyboardInterrupt, which Python
  delivers to the main thread, lands where it can stop everything).

Credits are what bound memory: a worker holds at most
``ceil(queue_scale)`` chunks that were sent and not yet received back, and an
ordered call additionally keeps at most ``ceil(queue_scale) * workers`` chunks
between "sent" and "handed to the consumer" (the reorder buffer included).
A credit is taken *before* the feeder pulls the items, so the input is never
read further ahead than that, however long (or endless) it is.

Any exception (a hook's, the input's, a dead worker, Ctrl-C) stops the feeder,
aborts the back-end and propagates; the runner then counts as closed.
"""

from __future__ import annotations

import signal
import threading
import time
from itertools import islice
from typing import Any, Dict, Iterable, List, Optional

from .backend import Backend, ChannelBroken
from .chunking import AdaptiveChunker
from .errors import ParallelError
from .progress import Progress, ProgressOption

__all__ = ["Pipeline"]


def _length(data: Iterable) -> Optional[int]:
    try:
        return len(data)  # type: ignore[arg-type]
    except TypeError:
        return None


class Pipeline:
    """Runs one call; build one per call, then :meth:`run` it once."""

    #: seconds a chunk may take to *pull from the input* before it is sent
    #: smaller: a slow generator should not hold finished items back
    linger = 0.02
    #: seconds to wait for the feeder after an abort (it may be stuck in the input)
    feeder_join_timeout = 5.0

    def __init__(
        self,
        runner_cls: type,
        backend: Backend,
        cfg: Any,
        data: Iterable,
        *,
        ordered: bool,
        credits: int,
        chunker: AdaptiveChunker,
        progress: ProgressOption = False,
        desc: str = "",
    ) -> None:
        """
        Args:
            runner_cls (type): the runner class whose consumer hooks to call.
            backend (Backend): started back-end running the producers.
            cfg (CfgNode): the consumer's cfg for this call (a fresh copy).
            data (Iterable): the input.
            ordered (bool): deliver results in input order.
            credits (int): chunks a worker may hold at once.
            chunker (AdaptiveChunker): picks chunk sizes.
            progress (bool or dict): see :class:`~.progress.Progress`.
            desc (str): label of the progress bar.
        """
        self._hooks = runner_cls
        self._backend = backend
        self._cfg = cfg
        self._data = data
        self._ordered = ordered
        self._credits = max(1, int(credits))
        self._chunker = chunker
        self._progress_option = progress
        self._desc = desc
        n = len(backend.devices)
        self._window = self._credits * n
        self._cond = threading.Condition()
        # --- guarded by _cond
        self._outstanding = [0] * n  # chunks sent to each worker, not yet received
        self._next_delivery = 0  # ordered: the next seq the consumer gets
        self._rr = 0  # round-robin start among equally busy workers
        self._sent = 0
        self._feed_done = False
        self._feed_error: Optional[BaseException] = None
        self._stopping = False
        # --- feeder only
        self._pull_cap = chunker.max_items

    # ------------------------------------------------------------------ run
    def run(self) -> Any:
        """Run the call.

        Returns:
            Any: what ``consumer_end`` returned.
        """
        iterator = iter(self._data)  # fail here, not in a thread, if not iterable
        self._hooks.consumer_init(self._cfg)
        progress = Progress(self._progress_option, _length(self._data), self._desc)
        feeder = threading.Thread(
            target=self._feed, args=(iterator,), name="easycore-parallel-feeder", daemon=True
        )
        try:
            feeder.start()
            self._collect(progress)
        except BaseException:
            with self._cond:
                self._stopping = True
                self._cond.notify_all()
            self._backend.abort()  # unblocks a feeder stuck sending to a dead pipe
            feeder.join(self.feeder_join_timeout)
            raise
        finally:
            progress.close()
        feeder.join()
        return self._hooks.consumer_end(self._cfg)

    # ------------------------------------------------------------- consumer
    def _collect(self, progress: Progress) -> None:
        work, cfg, cond = self._hooks.consumer_work, self._cfg, self._cond
        observe = self._chunker.observe
        delivered = 0
        pending: Dict[int, List[Any]] = {}
        while True:
            with cond:
                error, done = self._feed_error, self._feed_done and delivered == self._sent
            if error is not None:
                self._raise_feed_error(error)
            if done:
                return
            for res in self._backend.poll(None):
                observe(res.n_items, res.seconds, res.nbytes)
                with cond:
                    # Released before consuming, so the feeder refills the
                    # worker while this thread runs consumer_work.
                    self._outstanding[res.worker] -= 1
                    cond.notify_all()
                if not self._ordered:
                    for item in res.results:
                        work(cfg, item)
                    progress.update(len(res.results))
                    delivered += 1
                    continue
                pending[res.seq] = res.results
                while delivered in pending:
                    results = pending.pop(delivered)
                    for item in results:
                        work(cfg, item)
                    progress.update(len(results))
                    delivered += 1
                    with cond:
                        self._next_delivery = delivered
                        cond.notify_all()

    def _raise_feed_error(self, error: BaseException) -> None:
        if isinstance(error, ChannelBroken):
            # A pipe broke because a worker died: report the death, which
            # says which device and how, rather than the broken pipe.
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                self._backend.poll(0.1)
            raise ParallelError(str(error)) from error
        raise error

    # --------------------------------------------------------------- feeder
    def _feed(self, iterator: Any) -> None:
        if hasattr(signal, "pthread_sigmask"):
            # Let Ctrl-C go to the calling thread, which can act on it.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        seq = 0
        try:
            while True:
                worker = self._reserve(seq)
                if worker is None:
                    return
                size = min(self._chunker.size, self._pull_cap)
                start = time.perf_counter()
                chunk = list(islice(iterator, size))
                elapsed = time.perf_counter() - start
                if not chunk:
                    with self._cond:
                        self._outstanding[worker] -= 1
                    return
                if elapsed > 0:
                    per_item = elapsed / len(chunk)
                    self._pull_cap = max(1, int(self.linger / per_item))
                self._backend.submit(worker, seq, chunk)
                del chunk
                seq += 1
                with self._cond:
                    self._sent = seq
        except BaseException as exc:
            with self._cond:
                self._feed_error = exc
        finally:
            with self._cond:
                self._feed_done = True
            self._backend.wakeup()

    def _reserve(self, seq: int) -> Optional[int]:
        """Block until some worker may take chunk ``seq``; return its index."""
        cond, credits = self._cond, self._credits
        with cond:
            while True:
                if self._stopping:
                    return None
                if not self._ordered or seq - self._next_delivery < self._window:
                    outstanding = self._outstanding
                    n = len(outstanding)
                    best = None
                    for k in range(n):
                        i = (self._rr + k) % n
                        if outstanding[i] < credits and (
                            best is None or outstanding[i] < outstanding[best]
                        ):
                            best = i
                    if best is not None:
                        outstanding[best] += 1
                        self._rr = (best + 1) % n
                        return best
                cond.wait()
