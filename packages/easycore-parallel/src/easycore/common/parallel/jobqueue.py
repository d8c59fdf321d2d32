"""[`JobQueue`][easycore.common.parallel.JobQueue]: a FIFO of background jobs on reused workers.

elektronn2's ``SharedQ`` on easycore's engine: ``put`` starts a job (any
function and arguments) on a fixed set of workers (never a process per
job), ``get`` returns the result of the oldest job still queued, waiting for
it if needed. Each job is a one-item job of a [`Pool`][easycore.common.parallel.Pool]:
arguments and results travel through its transport (NumPy arrays, and
tensors with easycore-torch, through shared memory both ways), code by value
when it must (lambdas). Failures are those of
[`BackgroundTask`][easycore.common.parallel.BackgroundTask]: a job that
raised raises [`WorkerError`][easycore.common.parallel.WorkerError] from
its ``get`` (its own exception as the ``__cause__``), a dead worker fails
its job with [`WorkerDiedError`][easycore.common.parallel.WorkerDiedError]
and is replaced. On Ray a lost node fails no job: the jobs its workers had
run again elsewhere (see ``max_node_losses``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import queue
import threading
import time
from collections import deque

from ._future import Future
from ._os import interrupts
from .background import (
    BackgroundStats,
    Stager,
    _no_timeout_if_false,
    close_when_collected,
    pool_factory,
)
from .engine.core import ItemError, JobSink
from .errors import RunnerClosedError
from .options import check_callable, check_positive_int
from .pool import Pool, PoolJobs
from .pool import TimeoutError as PoolTimeoutError
from .seeding import RandomStreams

TYPE_CHECKING = False
if TYPE_CHECKING:  # insights are imported when asked for
    from typing import Any, Callable, ClassVar, Deque, Dict, List, Optional, Sequence

    from .insights import Insights

__all__ = ["JobQueue"]


class _QueueCall:
    """A job's function: item ``(k, args, kwargs)`` is ``fn(*args, **kwargs)``, seeded as call k."""

    def __init__(self, fn: Callable[..., Any], streams: Optional[RandomStreams]) -> None:
        self.fn = fn
        self.streams = streams if streams is not None and streams.seed is not None else None

    def __call__(self, item: Any) -> Any:
        k, args, kwargs = item
        if self.streams is not None:
            self.streams.before_call(k)
        return self.fn(*args, **kwargs)


def _settle(future: concurrent.futures.Future, value: Any,
            error: Optional[BaseException]) -> None:
    if future.done():
        return  # cancelled by its owner, or already failed
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
    except concurrent.futures.InvalidStateError:
        pass  # cancelled meanwhile


class _JobFuture(Future):
    """A job's Future whose ``cancel`` keeps its promise (``concurrent.futures``'):
    True only if the job will never run (it was not handed to a worker yet),
    False once it runs."""

    sink: Optional[_QueueSink] = None
    jobs: Optional[PoolJobs] = None  # the pool's jobs it was submitted to

    def cancel(self) -> bool:
        if self.done():
            return super().cancel()  # True if cancelled already, False if finished
        job = self.sink.job if self.sink is not None else None
        if job is None or self.jobs is None or not self.jobs.cancel_unsent(job):
            return False  # handed to a worker: it runs, its result comes
        if not super().cancel():
            return False
        # Cancelled *and notified*: only then does concurrent.futures.wait()
        # (get() waits with it) count it as done; nobody else would notify.
        self.set_running_or_notify_cancel()
        return True


class _QueueSink(JobSink):
    def __init__(self, future: concurrent.futures.Future, stager: Optional[Stager]) -> None:
        self.future = future
        self.stager = stager

    def deliver(self, first_index: int, results: List[Any], failed: Dict[int, ItemError]) -> None:
        error = failed[0].exc if failed else None
        if self.stager is not None:
            self.stager.submit(results[0], error, self._done)
        else:
            _settle(self.future, results[0], error)

    def _done(self, value: Any, error: Optional[BaseException]) -> None:
        _settle(self.future, value, error)

    def finish(self, error: Optional[BaseException]) -> None:
        if error is not None:
            _settle(self.future, None, error)


class JobQueue:
    """A FIFO of jobs run by reused background workers.

    Examples:
        ```python
        import numpy as np
        from easycore.common.parallel import JobQueue

        def load(path, scale=1.0):
            return np.load(path) * scale

        if __name__ == "__main__":
            with JobQueue(workers=2) as jobs:
                for path in paths[:2]:
                    jobs.put(load, path, scale=0.5)        # start loading ahead
                for path in paths[2:] + [None, None]:
                    if path is not None:
                        jobs.put(load, path, scale=0.5)    # keep two jobs ahead
                    array = jobs.get()                     # the oldest job's result
        ```
    """

    pool_class: ClassVar[type] = Pool
    streams_class: ClassVar[type] = RandomStreams
    #: workers when neither ``workers`` nor ``devices`` is given
    default_workers: ClassVar[int] = 2
    #: a transform of each result, run in a thread of the caller (None: none)
    _stage: Optional[Callable[[Any], Any]] = None
    _last_busy: Sequence[float] = ()

    def __init__(
        self,
        workers: Optional[int] = None,
        *,
        maxsize: int = 0,
        initializer: Optional[Callable[..., Any]] = None,
        initargs: Sequence[Any] = (),
        seed: Optional[int] = None,
        task_timeout: Optional[float] = None,
        start_method: Optional[str] = None,
        backend: str = "process",
        **options: Any,
    ) -> None:
        """
        Args:
            workers (int or None): worker processes (None: 2, or one per device).
            maxsize (int): jobs put and not yet got, at most (``put`` waits for
                a ``get`` in another thread; ``put_nowait`` raises ``queue.Full``);
                0: no limit.
            initializer (callable or None): ``initializer(*initargs)`` in each
                worker when it starts (a replacement too).
            initargs (tuple): its arguments.
            seed (int or None): job k (the k-th ``put``) seeds ``random``, NumPy
                and (easycore-torch) torch from ``(seed, k)``, whichever worker runs
                it (see [`seeding`][easycore.common.parallel.seeding]); None:
                each worker starts from fresh entropy.
            task_timeout (float or None): seconds one job may run.
            start_method (str or None): "fork", "spawn" or "forkserver".
            backend (str): "process", "thread" (no ``seed``) or "ray".
            **options: more [`Pool`][easycore.common.parallel.Pool] options
                (``devices``, ``cpu_threads``, ``max_deaths``, ``max_node_losses``,
                ``address``, ``capacity_timeout``, ...);
                ``queue_scale`` is 1 here: a worker holds one job at a time, so
                no job waits behind a slow one while another worker is free.
        """
        check_positive_int("maxsize", maxsize, minimum=0)
        self._closed = True  # until the pool runs, for __del__
        self._owner_pid = os.getpid()
        # One job per worker at a time: a job never waits behind a slow one
        # while another worker is free (jobs differ, unlike a task's calls).
        options.setdefault("queue_scale", 1)
        make_pool, self._streams = pool_factory(
            self, workers, initializer, initargs, seed, task_timeout, start_method, backend,
            dict(options),
        )
        self._pool: Optional[Pool] = make_pool()
        self._closed = False
        self._maxsize = maxsize
        self._futures: Deque[_JobFuture] = deque()
        self._cond = threading.Condition()  # the FIFO, for put and close
        self._get_lock = threading.Lock()  # one get at a time: FIFO across consumer threads
        self._puts = 0
        self._started = time.monotonic()
        self._waited = 0.0
        self._results = 0
        self._stager: Optional[Stager] = None
        if self._stage is not None:
            try:
                self._stager = Stager(self._stage, "easycore-jobqueue-stage")
            except BaseException:  # (a Ctrl-C too) the workers go with the queue never made
                self.close()
                raise

    # ---------------------------------------------------------------- jobs
    def put(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
            ) -> concurrent.futures.Future:
        """Start ``fn(*args, **kwargs)`` on a worker; waits while the queue is full.

        Args:
            fn (callable): the job; lambdas and closures work.
            *args: its positional arguments (arrays travel through shared memory).
            **kwargs: its keyword arguments.

        Returns:
            concurrent.futures.Future: the job's result (or error), also what
            ``get`` returns when this job is the oldest.

        Raises:
            RunnerClosedError: the queue is closed.
        """
        return self._put(fn, args, kwargs, block=True)

    def put_nowait(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
                   ) -> concurrent.futures.Future:
        """``put`` that raises ``queue.Full`` instead of waiting."""
        return self._put(fn, args, kwargs, block=False)

    def _put(self, fn: Callable[..., Any], args: tuple, kwargs: dict,
             block: bool) -> concurrent.futures.Future:
        check_callable("a job", fn)
        with self._cond:
            while True:
                pool = self._open_pool()
                if not self._maxsize or len(self._futures) < self._maxsize:
                    break
                if not block:
                    raise queue.Full(f"the JobQueue holds maxsize={self._maxsize} jobs")
                self._cond.wait(interrupts.slice_of(None))
            future = _JobFuture()
            k = self._puts
            self._puts += 1
            # In the FIFO before the job runs: its result cannot overtake it.
            self._futures.append(future)
        sink = future.sink = _QueueSink(future, self._stager)
        try:
            # A Ctrl-C inside is held until the job is either queued whole or
            # not at all (the engine holds it across handing the job over).
            future.jobs = PoolJobs(pool)
            future.jobs.submit(_QueueCall(fn, self._streams), [(k, args, kwargs)], sink)
        except BaseException as exc:
            # Not queued: nothing of it stays in the FIFO (a later get() must
            # not raise this put's error, Ctrl-C included).
            with self._cond:
                with contextlib.suppress(ValueError):  # close() cleared the FIFO
                    self._futures.remove(future)
                self._cond.notify_all()
            if not self._closed:
                _settle(future, None, exc)
                raise
            closed = RunnerClosedError("the JobQueue is closed")
            _settle(future, None, closed)
            raise closed from None
        return future

    def get(self, timeout: Optional[float] = None) -> Any:
        """The result of the oldest job, which leaves the queue.

        Args:
            timeout (float or None): seconds to wait, for a job to be put (by
                another thread) and for it to finish (``False``, elektronn2's
                "block", means None, with a ``DeprecationWarning``).

        Returns:
            Any: what the job returned.

        Raises:
            TimeoutError: not within ``timeout``; the job stays the oldest.
            WorkerError: the job raised (its exception is the ``__cause__``).
            WorkerDiedError: its worker died (and was replaced).
            TaskTimeoutError: it ran past ``task_timeout``.
            RunnerClosedError: the queue is closed.
            concurrent.futures.CancelledError: the job's Future was cancelled
                before it ran (the job leaves the queue, in its turn).
        """
        timeout = _no_timeout_if_false(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        start = time.perf_counter()
        if not interrupts.sliced(
            lambda seconds: self._get_lock.acquire(timeout=-1 if seconds is None else seconds),
            timeout,
        ):
            self._waited += time.perf_counter() - start
            raise PoolTimeoutError(f"no result within {timeout} s")
        try:
            with self._cond:
                while not self._futures:
                    self._open_pool()
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise PoolTimeoutError(f"no job was put within {timeout} s")
                    self._cond.wait(interrupts.slice_of(remaining))
                self._open_pool()
                future = self._futures[0]
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            # wait(), not result(timeout): a job's own TimeoutError is no wait timeout.
            pool = self._pool
            waited = time.perf_counter()
            done = future.done_within(remaining)
            if pool is not None:  # insights: the caller waited for a result
                PoolJobs(pool).waited(time.perf_counter() - waited)
            if not done:
                self._open_pool()
                raise PoolTimeoutError(f"the oldest job did not finish within {timeout} s")
            with self._cond:
                if self._futures and self._futures[0] is future:
                    self._futures.popleft()
                    self._results += 1
                self._cond.notify_all()
        finally:
            self._get_lock.release()
            self._waited += time.perf_counter() - start
        # A job whose Future was cancelled raises CancelledError here, in its turn.
        return future.result()

    def stacks(self, timeout: float = 1.0) -> Dict[int, str]:
        """Where each worker is now: the first thing to call when a run seems stuck.

        Every live worker's Python stack (every thread, innermost frame
        first: function, file, line), read without stopping it, even while it
        runs C code. Never local variables or data.

        Args:
            timeout (float): seconds to wait for the answers (all at once).

        Returns:
            dict: ``{worker: its stack as text}``.
        """
        return self._open_pool().stacks(timeout)

    def insights(self) -> Insights:
        """Where the time went since the queue started.

        Needs ``insights=True`` (a [`Pool`][easycore.common.parallel.Pool]
        option), counted from the end of the constructor (the workers' first
        start is not in it). The caller's ``waiting_for_results`` is the time
        in ``get``,
        its ``consuming`` the rest (its own code between ``get`` calls).

        Returns:
            Insights:

        Raises:
            RuntimeError: made without ``insights=True``.
        """
        return PoolJobs(self._open_pool()).insights()

    def __len__(self) -> int:
        """Jobs put and not yet got (running, waiting, or finished)."""
        return len(self._futures)

    # ------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Stop the workers now; jobs not yet got fail with ``RunnerClosedError``. Idempotent."""
        pool = getattr(self, "_pool", None)
        if pool is None:
            return
        self._last_busy = PoolJobs(pool).worker_seconds()
        self._closed = True
        self._pool = None
        pool.terminate()  # fails every unfinished job: their futures hold the error
        cond = getattr(self, "_cond", None)
        if cond is not None:
            with cond:
                for future in self._futures:
                    _settle(future, None, RunnerClosedError("the JobQueue was closed"))
                self._futures.clear()
                cond.notify_all()
        stager, self._stager = getattr(self, "_stager", None), None
        if stager is not None:
            stager.close()

    def shutdown(self) -> None:
        """Alias of [`close`][easycore.common.parallel.JobQueue.close] (elektronn2's name)."""
        self.close()

    @property
    def stats(self) -> BackgroundStats:
        """BackgroundStats: per-worker busy and idle seconds, and the caller's wait in ``get``
        (as [`BackgroundTask.stats`][easycore.common.parallel.BackgroundTask.stats];
        elektronn2's ``SharedQ(profile=True)``)."""
        seconds = time.monotonic() - self._started
        pool = self._pool
        busy = PoolJobs(pool).worker_seconds() if pool is not None else list(self._last_busy)
        self._last_busy = busy
        return BackgroundStats(seconds, busy, [max(0.0, seconds - b) for b in busy],
                               self._waited, self._results)

    @property
    def closed(self) -> bool:
        """bool: whether ``close`` was called."""
        return self._closed

    @property
    def workers(self) -> int:
        """int: the number of workers."""
        return len(self._open_pool().devices)

    @property
    def worker_pids(self) -> List[Optional[int]]:
        """list: the workers' process ids (replacements included; None for threads)."""
        return self._open_pool().worker_pids

    def __enter__(self) -> JobQueue:
        self._open_pool()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()

    def __del__(self) -> None:
        close_when_collected(self)

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"jobs={len(self)}"
        return f"<{type(self).__name__} {state}>"

    def _open_pool(self) -> Pool:
        pool = self._pool
        if self._closed or pool is None:
            raise RunnerClosedError("the JobQueue is closed")
        return pool
