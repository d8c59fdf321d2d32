"""[`Pool`][easycore.common.parallel.Pool]: ``multiprocessing.Pool``'s API on easycore's engine.

A drop-in for ``multiprocessing.Pool`` (change the import; the methods,
arguments and results are the stdlib's), and what its users keep asking for:

* lambdas, closures and ``__main__`` code work under every start method (by
  value through cloudpickle, once per job per worker, never per item);
* NumPy arrays (and, with easycore-torch, tensors) travel through shared
  memory both ways, and chunk sizes are automatic;
* ``task_timeout``: a task running longer fails with
  [`TaskTimeoutError`][easycore.common.parallel.TaskTimeoutError], only its
  worker is killed and replaced, the other jobs go on;
* a worker that dies fails only the task it ran (naming it) and is replaced;
* several jobs at once from several threads (``submit`` while a ``map``
  runs), ``broadcast`` to every worker, per-worker contexts and devices,
  ``backend="thread"`` (same API, no pickling) and ``backend="ray"``.

Everything runs on the engine the runners use ([`engine`][easycore.common.parallel.engine.core]):
one coordinator thread pumps it; results, callbacks and error callbacks are
delivered from that thread, as the stdlib's result handler does.

(Over 400 lines on purpose: the whole of the standard library's ``Pool`` surface
(``apply``, ``map``, ``imap`` and their async and star forms, ``AsyncResult``,
``MapResult``, ``IMapIterator``, the lazy-input reader) over one engine; every one of
these is a thin client of the same job, and CPython's own ``pool.py`` keeps them
together for the same reason.)
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import inspect
import multiprocessing
import os
import sys
import threading
import time
import warnings
import weakref
from collections import deque
from typing import (
    Any,
    Callable,
    ClassVar,
    Deque,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from easycore.common.config import CfgNode

from ._os import threads as _threads
from ._os.threads import ThreadsOption
from .backends import inherit
from .backends.base import BackendSpec
from .backends.policy import BACKENDS, DevicePolicy, build_backend
from .engine.chunking import AdaptiveChunker
from .engine.core import Engine, ItemError, Job, JobSink
from .errors import RemoteTraceback, ResultEncodingError, RunnerClosedError, WorkerError
from .insights import Insights, Recorder
from .options import WorkerOptions, check_callable, check_chunksize
from .progress import Progress, ProgressOption
from .transport.pickling import dumps_code, loads_code
from .worker.executor import WorkerContext, WorkerProgram

__all__ = [
    "AsyncResult",
    "IMapIterator",
    "MapResult",
    "Pool",
    "PoolJobs",
    "TimeoutError",
    "pool_options",
]


class TimeoutError(multiprocessing.TimeoutError, TimeoutError):  # type: ignore[misc]  # noqa: A001 - the stdlib pool's name
    """``AsyncResult.get(timeout)`` expired; both ``multiprocessing.TimeoutError``
    (as the stdlib raises) and the builtin ``TimeoutError``."""


_MAP, _STAR, _APPLY = "map", "star", "apply"


class PoolProgram(WorkerProgram):
    """A pool worker: device set-up, then ``initializer(*initargs)``; jobs are functions."""

    def __init__(self, policy: DevicePolicy, initializer: Any) -> None:
        """
        Args:
            policy (DevicePolicy): prepares the worker for its device.
            initializer (tuple or bytes or None): ``(initializer, initargs)``,
                or that as [`dumps_code`][easycore.common.parallel.transport.pickling.dumps_code]
                made it.
        """
        self.policy = policy
        self.initializer = initializer

    def __getstate__(self) -> Dict[str, Any]:
        # Code goes by value where it must (dumps_code), made once however
        # many workers it is pickled for. A forked worker inherits the program
        # unpickled (see ``inherit``): the initializer's arguments stay shared.
        if self.initializer is not None and not isinstance(self.initializer, bytes):
            self.initializer = dumps_code(self.initializer)
        return self.__dict__.copy()

    def init(self, ctx: WorkerContext) -> None:
        self.policy.setup_worker(ctx.device)
        if self.initializer is not None:
            initializer, initargs = _load(self.initializer)
            initializer(*initargs)

    def function(self, blob: Any, ctx: WorkerContext) -> Callable[[Any], Any]:
        fn, mode, pass_context = _load(blob)
        if pass_context:
            inner = fn

            def fn(*args: Any, **kwargs: Any) -> Any:
                return inner(ctx, *args, **kwargs)

        if mode == _STAR:
            return lambda args: fn(*args)
        if mode == _APPLY:
            return lambda call: fn(*call[0], **call[1])
        return fn

    def hook_name(self, blob: Any) -> str:
        return "task"


def _load(blob: Any) -> Any:
    return loads_code(bytes(blob)) if isinstance(blob, (bytes, bytearray)) else blob


# ------------------------------------------------------------------ results
def _raise_item(error: ItemError) -> None:
    """Raise an item's error as the stdlib would: the task's own exception.

    Except where the task left its process (``SystemExit``, ``KeyboardInterrupt``
    raised by the task): raised in the caller they would end the caller, so
    they come as the [`WorkerError`][easycore.common.parallel.WorkerError]
    that reports them, as from the runners.
    """
    exc = error.exc
    if isinstance(exc, WorkerError):
        original = exc.__cause__
        if isinstance(original, ResultEncodingError):
            original.item = getattr(exc, "item", None)
        if isinstance(original, Exception):
            # A fresh copy each time it is raised, with the worker's traceback.
            raise original.with_traceback(None) from RemoteTraceback.of(exc.remote_traceback)
    raise exc


def _task_exception(error: ItemError) -> BaseException:
    try:
        _raise_item(error)
    except BaseException as exc:  # noqa: BLE001 - what _raise_item raised, whatever it is
        return exc
    raise AssertionError("unreachable")


class AsyncResult:
    """The result of ``apply_async`` (and the base of ``map_async``'s); the stdlib's API."""

    def __init__(self, callback: Optional[Callable] = None,
                 error_callback: Optional[Callable] = None) -> None:
        self._event = threading.Event()
        self._value: Any = None
        self._error: Optional[BaseException] = None
        self._callback = callback
        self._error_callback = error_callback
        self._job: Optional[Job] = None
        self._recorder: Optional[Recorder] = None  # insights: callbacks are the caller's stage

    def ready(self) -> bool:
        """Whether the call has completed."""
        return self._event.is_set()

    def successful(self) -> bool:
        """Whether the call completed without raising; ``ValueError`` if not ready."""
        if not self.ready():
            raise ValueError(f"{self!r} not ready")
        return self._error is None

    def wait(self, timeout: Optional[float] = None) -> None:
        """Wait until the result is available or ``timeout`` seconds pass."""
        self._event.wait(timeout)

    def get(self, timeout: Optional[float] = None) -> Any:
        """The result; re-raises the task's exception.

        Args:
            timeout (float or None): seconds to wait.

        Raises:
            TimeoutError: no result in time (``multiprocessing.TimeoutError`` too).
        """
        recorder = self._recorder
        if recorder is None:
            ready = self._event.wait(timeout)
        else:  # insights: the caller waits for a result
            t0 = time.perf_counter()
            ready = self._event.wait(timeout)
            recorder.waiting_for_results += time.perf_counter() - t0
        if not ready:
            raise TimeoutError(f"no result within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._value

    # engine side
    def _set(self, value: Any, error: Optional[BaseException]) -> None:
        if self._event.is_set():
            return
        self._value, self._error = value, error
        self._job = None  # done: the job (and its sink's results) is not kept by this
        # As the stdlib: the callback has run by the time get() returns.
        recorder = self._recorder
        t0 = time.perf_counter() if recorder is not None else 0.0
        try:
            if error is None and self._callback is not None:
                self._callback(value)
            elif error is not None and self._error_callback is not None:
                self._error_callback(error)
        except BaseException:  # noqa: BLE001 - see below
            # A callback runs in the coordinator: whatever it raises, even
            # SystemExit or KeyboardInterrupt, must not stop it for every job.
            import traceback

            traceback.print_exc()
        finally:
            if recorder is not None:
                recorder.consumed(t0)
            self._event.set()


class ApplyResult(AsyncResult):
    """The stdlib's name for the result of ``apply_async``."""


class _ApplySink(JobSink):
    def __init__(self, result: AsyncResult) -> None:
        self.result = result

    def deliver(self, first_index: int, results: List[Any], failed: Dict[int, ItemError]) -> None:
        if failed:
            self.result._set(None, _task_exception(failed[0]))
        else:
            self.result._set(results[0], None)

    def finish(self, error: Optional[BaseException]) -> None:
        if error is not None:
            self.result._set(None, error)


class MapResult(AsyncResult):
    """The result of ``map_async`` / ``starmap_async``: a list in input order."""


class _MapSink(JobSink):
    def __init__(self, result: AsyncResult, n: int, engine: Engine, progress: Progress,
                 unpack_one: bool = False) -> None:
        self.result = result
        self.values: List[Any] = [None] * n
        self.engine = engine
        self.progress = progress
        self.unpack_one = unpack_one

    def deliver(self, first_index: int, results: List[Any], failed: Dict[int, ItemError]) -> None:
        if failed:
            # The stdlib's map fails with the first exception it meets.
            if self.job is not None:
                self.engine.cancel(self.job, _task_exception(failed[min(failed)]))
            return
        self.values[first_index : first_index + len(results)] = results
        self.progress.update(len(results))

    def finish(self, error: Optional[BaseException]) -> None:
        self.progress.close()
        if error is not None:
            self.result._set(None, error)
        else:
            self.result._set(self.values[0] if self.unpack_one else self.values, None)


class _IMapState:
    """What an ``imap``'s sink fills and its iterator empties.

    Apart from the iterator: a job (its sink, its read-ahead thread) never
    holds the iterator, so an iterator its caller dropped is collected, and its
    job cancelled (see ``IMapIterator``).
    """

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.items: Deque[Tuple[Any, Optional[ItemError]]] = deque()
        self.error: Optional[BaseException] = None
        self.done = False
        self.input: Optional[_ReadAhead] = None


class _ReadAhead:
    """A lazy ``imap`` input, read by a thread of its own into a small buffer.

    The user's iterator may block (a generator waiting on a queue, on the
    network, or on a result of this very ``imap``), so it is never run by the
    thread that hands results over, nor by the coordinator: this reader runs
    it, one item at a time, and feeds the engine, which takes from the buffer
    without blocking (``take``). The reader reads at most a chunk ahead of
    what the engine took, and the engine takes at most ``window`` items ahead
    of what the caller consumed: the input is read a bounded distance ahead.

    With an explicit ``chunksize`` items are buffered a whole chunk at a time,
    as the stdlib's task handler reads them: an input that raises loses the
    items of the chunk it broke, and the error is raised in its place. With
    the automatic chunk size every item read before the error runs.
    """

    def __init__(self, iterator: Any, chunksize: Optional[int]) -> None:
        self._iterator = iterator
        self._chunksize = chunksize
        self._buffer: Deque[Any] = deque()
        self._lock = threading.Lock()
        self.ended = False
        self.error: Optional[BaseException] = None
        self.thread: Optional[threading.Thread] = None
        # One thread feeds at a time (the reader, or a caller waiting in next()).
        self._feeding = threading.Lock()
        self._oldest = 0.0  # when the oldest item not yet taken was buffered
        self.reading_since = 0.0  # when the reader entered the input's __next__ (0: not in it)

    def __iter__(self) -> _ReadAhead:
        return self

    def __next__(self) -> Any:  # (the engine uses take; a plain iterator for anyone else)
        items, _ended = self.take(1)
        if items:
            return items[0]
        raise StopIteration

    def take(self, n: int) -> Tuple[List[Any], bool]:
        """Up to ``n`` buffered items, never blocking; and whether the input ended."""
        ended = self.ended  # read first: once True, every item is in the buffer
        buffer = self._buffer
        items = []
        pop = buffer.popleft
        try:
            for _ in range(n):
                items.append(pop())
        except IndexError:
            pass
        self._oldest = time.perf_counter()
        return items, ended and not buffer

    def stalled(self, linger: float) -> bool:
        """Whether items wait in the buffer while the reader is stuck in the input."""
        since = self.reading_since
        return bool(self._buffer) and (
            (since and time.perf_counter() - since > linger)
            or time.perf_counter() - self._oldest > linger)

    def read(self, engine: Engine, job: Job, state: _IMapState) -> None:
        """The reader thread's loop: read, buffer, feed; ends with the input or the job."""
        pending: List[Any] = []
        chunk = self._chunksize
        linger = engine.linger
        buffer, iterator, clock = self._buffer, self._iterator, time.perf_counter
        # (deque appends and pops are atomic: no lock per item; ``take`` reads
        # ``ended`` only after the last items are in)
        size = max(1, job.next_size())
        try:
            while not job.done:
                if len(buffer) >= size:  # a chunk ahead: no more reading until it goes
                    self._feed(engine, job, state, wait=False)
                    size = max(1, job.next_size())
                    if len(buffer) >= size:
                        self._wait(job, state)
                    continue
                self.reading_since = now = clock()
                try:
                    item = next(iterator)
                except StopIteration:
                    break
                finally:
                    self.reading_since = 0.0
                if chunk is not None:
                    pending.append(item)
                    if len(pending) < chunk:
                        continue
                    if not buffer:
                        self._oldest = now
                    buffer.extend(pending)
                    pending = []
                else:
                    if not buffer:
                        self._oldest = now
                    buffer.append(item)
                # Send a full chunk; less only when the input is slow (items wait
                # no longer than ``linger``). While this thread is blocked in the
                # input, a caller waiting in next() sends what it read (``stalled``).
                if len(buffer) >= size or now - self._oldest > linger:
                    self._feed(engine, job, state, wait=False)
                    size = max(1, job.next_size())
        except BaseException as exc:  # noqa: BLE001 - the input failed (any error): raised in its place
            self.error = exc
            pending = []
        with self._lock:
            self._buffer.extend(pending)
            self.ended = True
        # The engine sees the end only when it takes again: feed until it did.
        while not job.done and not job.exhausted:
            self._feed(engine, job, state, wait=True)
        self._iterator = None  # the user's input is not kept past its end

    def _feed(self, engine: Engine, job: Job, state: _IMapState, wait: bool) -> None:
        if self._feeding.acquire(blocking=False):
            try:
                engine.feed(job)
            except BaseException as exc:  # noqa: BLE001 - the pool broke or closed (or Ctrl-C): the job fails with it
                if not job.done:
                    engine.cancel(job, exc)
                return
            finally:
                self._feeding.release()
        if wait:
            self._wait(job, state)

    @staticmethod
    def _wait(job: Job, state: _IMapState) -> None:
        # Woken by every delivery of this job (credits came back), or soon
        # (credits freed by other jobs, results consumed: no event for those).
        with state.cond:
            if not job.done:
                state.cond.wait(0.05)


class IMapIterator:
    """Iterates over ``imap`` / ``imap_unordered`` results; ``next(timeout)`` as the stdlib's.

    An iterator its caller dropped (collected) cancels its job: nothing more of
    its input is read. One still referenced when its pool is joined is read to
    the end of its input, its results kept for it (as the stdlib's).
    """

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._state = _IMapState()
        self._items = self._state.items
        self._job: Optional[Job] = None
        self._lazy = False
        self._consumed = 0

    def __iter__(self) -> IMapIterator:
        return self

    def next(self, timeout: Optional[float] = None) -> Any:
        """The next result; re-raises its task's exception.

        Args:
            timeout (float or None): seconds to wait.

        Raises:
            TimeoutError: nothing arrived in time.
            StopIteration: no results left.
        """
        # Results come in chunks; while some wait, take one without the
        # lock (deque operations are atomic): ~0.2 us an item instead of ~1.5.
        # A result already there is handed over first, whatever the input does.
        try:
            value, error = self._items.popleft()
        except IndexError:
            pass
        else:
            if self._lazy:
                self._consumed += 1
                if self._consumed >= 256:
                    self._move_window()
            if error is not None:
                _raise_item(error)
            return value
        state = self._state
        source, job = state.input, self._job
        if self._lazy:
            self._move_window()
        with state.cond:
            deadline = None if timeout is None else _now() + timeout
            while not self._items:
                if state.done:
                    if state.error is not None:
                        job_error, state.error = state.error, None
                        raise job_error
                    raise StopIteration
                remaining = None if deadline is None else deadline - _now()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"no result within {timeout} s")
                if (source is not None and job is not None and not job.done
                        and source.stalled(job.engine.linger)):
                    # The reader is stuck in the input (it may wait for the
                    # very result this caller waits for: a feedback loop):
                    # what it read goes out now. Runs no user code.
                    state.cond.release()
                    try:
                        source._feed(job.engine, job, state, wait=False)
                    finally:
                        state.cond.acquire()
                    if self._items or state.done:
                        continue
                wait = job.engine.linger if source is not None and job else 0.5
                state.cond.wait(wait if remaining is None else min(wait, remaining))
            value, error = self._items.popleft()
        if self._lazy:
            self._consumed += 1
        if error is not None:
            _raise_item(error)
        return value

    __next__ = next  # noqa: A003 - next(timeout) is the stdlib's method

    def _move_window(self) -> None:
        # The read-ahead goes on as results are consumed (in batches: cheap).
        job, n = self._job, self._consumed
        self._consumed = 0
        if job is not None and not job.done:
            if n:
                job.engine.consume(job, n)
            with self._state.cond:
                self._state.cond.notify_all()

    def close(self) -> None:
        """Stop the job: nothing more is sent, results still in flight are dropped."""
        if self._job is not None and not self._job.done:
            self._pool._engine_or_raise().cancel(self._job)


class IMapUnorderedIterator(IMapIterator):
    """The stdlib's name for the iterator of ``imap_unordered``."""


def _cancel_abandoned(ref: weakref.ReferenceType) -> None:
    # An imap iterator was collected: its job has no reader any more. (A weak
    # reference: a running job is held by its engine; a finished one, with its
    # results, must not be kept by this finalizer.)
    job = ref()
    if job is not None and not job.done:
        # A finalizer must not raise: the pool may be gone already (any error).
        with contextlib.suppress(Exception):
            job.engine.cancel(job)


class _IMapSink(JobSink):
    def __init__(self, state: _IMapState, progress: Progress) -> None:
        self.state = state
        self.progress = progress

    def deliver(self, first_index: int, results: List[Any], failed: Dict[int, ItemError]) -> None:
        state = self.state
        with state.cond:
            if failed:
                state.items.extend((r, failed.get(k)) for k, r in enumerate(results))
            else:
                state.items.extend((r, None) for r in results)
            state.cond.notify_all()
        self.progress.update(len(results))

    def finish(self, error: Optional[BaseException]) -> None:
        self.progress.close()
        state = self.state
        source = state.input
        if error is None and source is not None and source.error is not None:
            error = source.error  # the input failed: after every result read before it
        with state.cond:
            state.done = True
            if error is not None and not isinstance(error, _Cancelled):
                state.error = error
            state.cond.notify_all()


class _Cancelled(RunnerClosedError):
    pass


class _FutureSink(JobSink):
    """``submit``'s Future: running once handed to a worker (then ``cancel()`` is False)."""

    def __init__(self, future: concurrent.futures.Future) -> None:
        self.future = future

    def claim(self) -> bool:
        # Engine lock held, just before sending: a cancelled future never runs.
        return self.future.set_running_or_notify_cancel()

    def deliver(self, first_index: int, results: List[Any], failed: Dict[int, ItemError]) -> None:
        if self.future.done():
            return
        if failed:
            self.future.set_exception(_task_exception(failed[0]))
        else:
            self.future.set_result(results[0])

    def finish(self, error: Optional[BaseException]) -> None:
        future = self.future
        if error is None or future.done():
            return
        if future.running() or future.set_running_or_notify_cancel():
            future.set_exception(error)


def _coordinate(engine: Engine, stop: threading.Event) -> None:
    """A pool's coordinator thread: pumps the engine until the pool stops."""
    while not stop.is_set():
        try:
            engine.pump(None)
        except BaseException:  # noqa: BLE001  # pragma: no cover - a bug; keep serving other jobs
            import traceback

            traceback.print_exc()


def _now() -> float:
    import time

    return time.monotonic()


# --------------------------------------------------------------------- Pool
class Pool:
    """A process pool with ``multiprocessing.Pool``'s API, on easycore's engine.

    Examples:
        ```python
        from easycore.common.parallel import Pool

        def square(x):
            return x * x

        if __name__ == "__main__":
            with Pool(4) as pool:
                print(pool.map(square, range(10)))        # [0, 1, 4, ...]
                print(pool.map(lambda x: x + 1, [1, 2]))  # lambdas work: [2, 3]
        ```
    """

    #: back-end name -> class, or "module:Class" imported on first use: a copy
    #: of ``policy.BACKENDS``
    backends: ClassVar[Dict[str, Union[type, str]]] = dict(BACKENDS)
    #: what devices mean (easycore-torch's Pool brings its own)
    device_policy: ClassVar[DevicePolicy] = DevicePolicy()

    def __init__(
        self,
        processes: Optional[int] = None,
        initializer: Optional[Callable[..., Any]] = None,
        initargs: Sequence[Any] = (),
        maxtasksperchild: Optional[int] = None,
        context: Optional[Any] = None,
        *,
        devices: Optional[Iterable[str]] = None,
        cfg: Optional[Mapping[str, Any]] = None,
        worker_contexts: Optional[Sequence[Any]] = None,
        task_timeout: Optional[float] = None,
        progress: ProgressOption = False,
        start_method: Optional[str] = None,
        backend: str = "process",
        cpu_threads: ThreadsOption = "auto",
        queue_scale: float = 3.0,
        max_deaths: int = 3,
        max_node_losses: Optional[int] = 10,
        insights: bool = False,
        options: Optional[WorkerOptions] = None,
        **backend_options: Any,
    ) -> None:
        """
        Args:
            processes (int or None): number of workers (None: the CPUs this
                process may use, or ``len(devices)``).
            initializer (callable or None): run ``initializer(*initargs)`` in
                each worker when it starts (a replacement worker too).
            initargs (tuple): its arguments.
            maxtasksperchild (int or None): replace a worker after it ran this
                many tasks (None: never).
            context (multiprocessing context or None): as the stdlib's: its
                start method is used (same as ``start_method=``).
            devices (list[str] or None): one worker per device (e.g.
                ``["cuda:0", "cuda:1"]`` with easycore-torch); default ``"cpu"``.
            cfg (CfgNode or dict or None): given to functions that ask for a
                context (``pass_context=True``), each worker its own copy.
            worker_contexts (list or None): one object per worker, given as
                ``ctx.context`` (machin's ``CtxPool``).
            task_timeout (float or None): seconds one task may run (each call
                may override it): longer fails it with ``TaskTimeoutError``, its
                worker is killed and replaced.
            progress (bool or dict): a tqdm bar for each ``map`` / ``imap``.
            start_method (str or None): "fork", "spawn" or "forkserver".
            backend (str): "process", "thread" (no pickling) or "ray".
            cpu_threads (int or str or None): each worker's thread budget, as
                for the runners (``"auto"``: ``cpus // workers``).
            queue_scale (float): chunks each worker holds at once (``ceil``).
            max_deaths (int): worker deaths one job may cause before it fails.
            max_node_losses (int or None): with ``backend="ray"``, lost nodes one job may
                see and carry on: a lost node (or a worker killed from outside) blames no
                item and costs no ``max_deaths``; what its workers held runs again on the
                others (at least once). One node more fails the job with
                [`NodesLostError`][easycore.common.parallel.NodesLostError], naming them.
                None: any number.
            insights (bool): count where the time goes, from the start (see
                [`insights`][easycore.common.parallel.Pool.insights]); off by default.
            options (WorkerOptions or None): all of ``task_timeout``,
                ``progress``, ``start_method``, ``backend``, ``cpu_threads``,
                ``queue_scale``, ``max_deaths``, ``max_node_losses``, ``insights``,
                ``maxtasksperchild``
                and the back-end's options at once, already checked (what
                ``BackgroundTask`` and ``JobQueue`` pass); those keywords must
                then be left out.
            **backend_options: for ``backend="ray"``: ``address``, ``ray_init_kwargs``,
                ``capacity_timeout`` (seconds a worker may wait for a node with room; see
                [`RayBackend`][easycore.common.parallel.backends.ray.RayBackend]).
        """
        if devices is not None:
            devices = list(devices)
            if not devices:
                # (as Pool(0) and the runners: an empty pool would wait forever)
                raise ValueError("devices is empty: a pool needs at least one device "
                                 "(e.g. fall back to ['cpu'] where no GPU is found)")
            if processes is not None and processes != len(devices):
                raise ValueError(f"processes={processes} but {len(devices)} devices were given")
            n = len(devices)
        else:
            n = _threads.available_cpus() if processes is None else processes
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError("Number of processes must be at least 1")
            devices = ["cpu"] * n
        if worker_contexts is not None and len(worker_contexts) != n:
            raise ValueError(f"worker_contexts has {len(worker_contexts)} entries, not equal to "
                             f"the number of workers ({n})")
        check_callable("initializer", initializer, allow_none=True)
        if context is not None:
            if start_method is not None and start_method != context.get_start_method():
                raise ValueError("pass context= or start_method=, not both")
            start_method = context.get_start_method()
        if options is None:  # every option checked at once, as every client checks them
            options = WorkerOptions(
                backend=backend, start_method=start_method, task_timeout=task_timeout,
                queue_scale=queue_scale, max_deaths=max_deaths, max_node_losses=max_node_losses,
                maxtasksperchild=maxtasksperchild, cpu_threads=cpu_threads, progress=progress,
                insights=insights, backend_options=backend_options,
            )
        else:
            both = _given_options(locals()) + sorted(backend_options)
            if context is not None:
                both.append("context")
            if both:
                raise TypeError(f"pass options= or the options themselves, not both: {both}")
        options.check_backend(self.backends)
        self._options = options
        policy = self._policy = self.make_policy()
        self._devices = [policy.validate(d) for d in devices]
        if options.local:
            for device in self._devices:
                policy.check_available(device)
        self._threads = _threads.budget(options.cpu_threads, n)
        self._progress = options.progress
        self._state = "RUN"
        self._owner = os.getpid()
        self._chunkers: Dict[Any, AdaptiveChunker] = {}
        self._lock = threading.Lock()
        # Jobs not finished yet (the engine holds those): a finished job, with
        # its sink and results, is not kept by the pool.
        self._jobs: weakref.WeakSet = weakref.WeakSet()
        self._readers: List[threading.Thread] = []
        is_thread = options.backend == "thread"
        init_blob: Any = None
        if initializer is not None:
            init_blob = (initializer, tuple(initargs))  # pickled only for spawned workers
        self._pickle_code = not is_thread
        cfg_node = cfg if isinstance(cfg, CfgNode) else CfgNode(cfg or {})
        spec = BackendSpec(
            PoolProgram(policy, init_blob), self._devices, cfg_node, policy,
            options.start_method, self._threads,
            list(worker_contexts) if worker_contexts is not None else None, True,
        )
        self._backend = build_backend(self.backends, options.backend, spec,
                                      options.backend_options)
        self._engine = Engine(self._backend, credits=options.credits, fail_fast=False,
                              max_deaths=options.max_deaths,
                              max_node_losses=options.max_node_losses,
                              maxtasksperchild=options.maxtasksperchild)
        self._recorder: Optional[Recorder] = Recorder(self._devices) if options.insights else None
        self._engine.recorder = self._recorder  # before start: start-up counts
        # Work goes to the first worker ready; the others join as they are.
        self._engine.start(wait="first")
        self._stop = threading.Event()
        # The thread holds the engine, not the pool: a pool nobody references
        # is collected, and its __del__ stops the workers.
        self._coordinator = threading.Thread(target=_coordinate, args=(self._engine, self._stop),
                                             name="easycore-pool-coordinator", daemon=True)
        self._coordinator.start()

    def make_policy(self) -> DevicePolicy:
        """The device policy of this pool (a seam: easycore-torch's picks its transport here).

        Returns:
            DevicePolicy:
        """
        return self.device_policy

    def _engine_or_raise(self) -> Engine:
        self._check_owner()
        return self._engine

    def _check_owner(self) -> None:
        if os.getpid() != self._owner:
            # The child of an os.fork() has the pool's objects but not its
            # coordinator thread nor its workers: it would wait forever.
            raise RuntimeError(
                f"this {type(self).__name__} belongs to process {self._owner}; it cannot be "
                f"used in process {os.getpid()}, a child made by os.fork() (make a new pool "
                f"in the child)")

    def _check_running(self) -> None:
        self._check_owner()
        if self._state != "RUN":
            raise ValueError("Pool not running")

    def __reduce__(self) -> Any:
        raise NotImplementedError("pool objects cannot be passed between processes or pickled")

    # ------------------------------------------------------------ job making
    def _code(self, func: Callable, mode: str, pass_context: bool) -> Any:
        if not callable(func):
            raise TypeError(f"{func!r} is not callable")  # (the stdlib's words)
        blob = (func, mode, pass_context)
        return dumps_code(blob) if self._pickle_code else blob

    def _chunker(self, func: Callable) -> AdaptiveChunker:
        key: Any = func
        try:
            hash(key)
        except TypeError:
            key = id(func)
        with self._lock:
            chunker = self._chunkers.get(key)
            if chunker is None:
                if len(self._chunkers) > 64:
                    self._chunkers.clear()
                chunker = self._chunkers[key] = AdaptiveChunker()
        return chunker

    def _submit(self, func: Callable, mode: str, source: Any, sink: JobSink, *, ordered: bool,
                lazy: bool, chunksize: Optional[int], task_timeout: Optional[float],
                pass_context: bool, targets: Optional[List[int]] = None,
                window: Optional[int] = None) -> Job:
        # ``window``: results taken but not yet consumed, at most (see
        # ``Engine.submit_job``); endless streams (``BackgroundTask``) need it.
        self._check_running()
        check_chunksize(chunksize)
        timeout = self._options.timeout_for(task_timeout)
        job = self._engine.submit_job(
            self._code(func, mode, pass_context), source, sink, ordered=ordered, lazy=lazy,
            timeout=timeout, chunker=self._chunker(func),
            chunk_size=chunksize, targets=targets, window=window,
        )
        with self._lock:
            if not job.done:
                self._jobs.add(job)
        return job

    def _wait(self, result: AsyncResult) -> Any:
        try:
            return result.get()
        except BaseException:
            # Ctrl-C (or any error) while waiting: stop sending the job's items.
            if result._job is not None and not result._job.done:
                self._engine.cancel(result._job)
            raise

    def _progress_bar(self, total: Optional[int], func: Callable) -> Progress:
        return Progress(self._progress, total, getattr(func, "__name__", "Pool"), self._recorder)

    # ------------------------------------------------------- the stdlib's API
    def apply(self, func: Callable, args: Sequence[Any] = (),
              kwds: Optional[Mapping[str, Any]] = None, *,
              task_timeout: Optional[float] = None, pass_context: bool = False) -> Any:
        """``func(*args, **kwds)`` in a worker; blocks until it returns.

        Args:
            func (callable): the function.
            args (tuple): positional arguments.
            kwds (dict or None): keyword arguments.
            task_timeout (float or None): override the pool's.
            pass_context (bool): call ``func(ctx, *args, **kwds)`` with the
                worker's [`WorkerContext`][easycore.common.parallel.WorkerContext].

        Returns:
            Any: what ``func`` returned.
        """
        return self._wait(self.apply_async(func, args, kwds, task_timeout=task_timeout,
                                           pass_context=pass_context))

    def apply_async(self, func: Callable, args: Sequence[Any] = (),
                    kwds: Optional[Mapping[str, Any]] = None,
                    callback: Optional[Callable[[Any], Any]] = None,
                    error_callback: Optional[Callable[[BaseException], Any]] = None, *,
                    task_timeout: Optional[float] = None,
                    pass_context: bool = False) -> AsyncResult:
        """``apply`` without waiting; see the stdlib for ``callback`` and ``error_callback``.

        Returns:
            AsyncResult:
        """
        result = ApplyResult(callback, error_callback)
        result._recorder = self._recorder
        item = (tuple(args), dict(kwds or {}))
        result._job = self._submit(func, _APPLY, [item], _ApplySink(result), ordered=False,
                                   lazy=False, chunksize=1, task_timeout=task_timeout,
                                   pass_context=pass_context)
        return result

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        """``fn(*args, **kwargs)`` in a worker, as a ``concurrent.futures.Future``.

        Returns:
            concurrent.futures.Future:
        """
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._submit(fn, _APPLY, [(args, kwargs)], _FutureSink(future), ordered=False,
                     lazy=False, chunksize=1, task_timeout=None, pass_context=False)
        return future

    def map(self, func: Callable, iterable: Iterable, chunksize: Optional[int] = None, *,
            task_timeout: Optional[float] = None, pass_context: bool = False) -> List[Any]:
        """``[func(x) for x in iterable]`` across the workers, in order.

        Args:
            func (callable): the function.
            iterable (Iterable): its arguments (read into a list first, as the stdlib does).
            chunksize (int or None): items per chunk (None: automatic).
            task_timeout (float or None): override the pool's.
            pass_context (bool): call ``func(ctx, x)``.

        Returns:
            list:
        """
        return self._wait(self.map_async(func, iterable, chunksize, task_timeout=task_timeout,
                                         pass_context=pass_context))

    def starmap(self, func: Callable, iterable: Iterable[Iterable], chunksize: Optional[int] = None,
                *, task_timeout: Optional[float] = None, pass_context: bool = False) -> List[Any]:
        """``[func(*args) for args in iterable]`` across the workers, in order."""
        return self._wait(self.starmap_async(func, iterable, chunksize,
                                             task_timeout=task_timeout,
                                             pass_context=pass_context))

    def map_async(self, func: Callable, iterable: Iterable, chunksize: Optional[int] = None,
                  callback: Optional[Callable[[Any], Any]] = None,
                  error_callback: Optional[Callable[[BaseException], Any]] = None, *,
                  task_timeout: Optional[float] = None,
                  pass_context: bool = False) -> MapResult:
        """``map`` without waiting.

        Returns:
            MapResult:
        """
        return self._map_async(func, _MAP, iterable, chunksize, callback, error_callback,
                               task_timeout, pass_context)

    def starmap_async(self, func: Callable, iterable: Iterable[Iterable],
                      chunksize: Optional[int] = None,
                      callback: Optional[Callable[[Any], Any]] = None,
                      error_callback: Optional[Callable[[BaseException], Any]] = None, *,
                      task_timeout: Optional[float] = None,
                      pass_context: bool = False) -> MapResult:
        """``starmap`` without waiting.

        Returns:
            MapResult:
        """
        return self._map_async(func, _STAR, iterable, chunksize, callback, error_callback,
                               task_timeout, pass_context)

    def _map_async(self, func: Callable, mode: str, iterable: Iterable,
                   chunksize: Optional[int], callback: Optional[Callable],
                   error_callback: Optional[Callable], task_timeout: Optional[float],
                   pass_context: bool) -> MapResult:
        items = iterable if isinstance(iterable, (list, tuple, range)) else list(iterable)
        result = MapResult(callback, error_callback)
        result._recorder = self._recorder
        sink = _MapSink(result, len(items), self._engine, self._progress_bar(len(items), func))
        job = self._submit(func, mode, items, sink, ordered=False, lazy=False,
                           chunksize=chunksize, task_timeout=task_timeout,
                           pass_context=pass_context)
        sink.job = job
        result._job = job
        return result

    def imap(self, func: Callable, iterable: Iterable, chunksize: Optional[int] = None, *,
             task_timeout: Optional[float] = None, pass_context: bool = False) -> IMapIterator:
        """Lazy ``map``: an iterator of results in input order.

        A lazy input (not a list, tuple or range) is read by a thread of its
        own, a bounded distance ahead of the results consumed (the stdlib reads
        it all at once); a result already there is handed over before the input
        runs again. An exception from the input is raised by ``next()`` in its
        place, after the results of the items read before it. An iterator that
        is dropped cancels its job; ``join()`` reads the input of one still
        referenced to its end (see "Safety and guarantees").

        Returns:
            IMapIterator:
        """
        return self._imap(func, iterable, chunksize, True, task_timeout, pass_context)

    def imap_unordered(self, func: Callable, iterable: Iterable,
                       chunksize: Optional[int] = None, *,
                       task_timeout: Optional[float] = None,
                       pass_context: bool = False) -> IMapIterator:
        """Like ``imap``, results in the order they finish.

        Returns:
            IMapIterator:
        """
        return self._imap(func, iterable, chunksize, False, task_timeout, pass_context)

    def _imap(self, func: Callable, iterable: Iterable, chunksize: Optional[int], ordered: bool,
              task_timeout: Optional[float], pass_context: bool) -> IMapIterator:
        it = IMapIterator(self) if ordered else IMapUnorderedIterator(self)
        lazy = not isinstance(iterable, (list, tuple, range))
        source: Any = iterable
        window = None
        if lazy:
            source = it._state.input = _ReadAhead(iter(iterable), chunksize)
            # Taken, not yet consumed, at most: a couple of rounds of every
            # worker's queue, at the largest chunk size (the read-ahead bound).
            window = 2 * (self._engine.credits + 1) * len(self._devices) * (
                chunksize or AdaptiveChunker().max_items)
        bar = self._progress_bar(None if lazy else len(iterable), func)  # type: ignore[arg-type]
        job = self._submit(func, _MAP, source, _IMapSink(it._state, bar), ordered=ordered,
                           lazy=lazy, chunksize=chunksize, task_timeout=task_timeout,
                           pass_context=pass_context, window=window)
        it._job, it._lazy = job, lazy
        weakref.finalize(it, _cancel_abandoned, weakref.ref(job))
        if lazy and not job.done:
            reader = threading.Thread(target=source.read, args=(self._engine, job, it._state),
                                      name="easycore-pool-input", daemon=True)
            source.thread = reader
            with self._lock:
                self._readers = [t for t in self._readers if t.is_alive()]
                self._readers.append(reader)
            reader.start()
        return it

    # ------------------------------------------------------------ the extras
    def broadcast(self, fn: Callable, *args: Any, task_timeout: Optional[float] = None,
                  pass_context: bool = False) -> List[Any]:
        """Run ``fn(*args)`` once on every worker; their results in worker order.

        Args:
            fn (callable): the function.
            *args: its arguments.
            task_timeout (float or None): override the pool's.
            pass_context (bool): call ``fn(ctx, *args)``.

        Returns:
            list: one result per worker.
        """
        n = len(self._devices)
        result = MapResult()
        sink = _MapSink(result, n, self._engine, Progress(False, None, ""))
        job = self._submit(fn, _STAR, [tuple(args)] * n, sink, ordered=False, lazy=False,
                           chunksize=1, task_timeout=task_timeout, pass_context=pass_context,
                           targets=list(range(n)))
        sink.job = job
        result._job = job
        return self._wait(result)

    @property
    def devices(self) -> List[str]:
        """list[str]: one worker per device."""
        return list(self._devices)

    @property
    def worker_pids(self) -> List[Optional[int]]:
        """list: the workers' process ids (replacements included)."""
        return list(self._backend.pids)

    # ------------------------------------------------------------- lifecycle
    def insights(self, reset: bool = False) -> Insights:
        """Where the time went since the pool started (or the last reset).

        Counted only with ``insights=True``. The workers' columns cover every
        job; the caller's ``consuming`` is the time in ``callback`` and
        ``error_callback``, ``waiting_for_results`` the time in ``get`` of an
        ``AsyncResult`` (``apply``, ``map`` and their ``_async`` forms; not the
        ``imap`` iterators), ``reading_input`` the time reading lazy inputs
        (``imap`` of a generator). The start-up of the workers counts (the
        constructor's and replacements').

        Args:
            reset (bool): start counting afresh after taking these.

        Returns:
            Insights:

        Raises:
            RuntimeError: the pool was made without ``insights=True``.
        """
        recorder = self._recorder
        if recorder is None:
            raise RuntimeError(f"{type(self).__name__} counts no insights: pass insights=True")
        result = recorder.snapshot()
        if reset:
            recorder.reset()
        return result

    def close(self) -> None:
        """Accept no more tasks; the workers exit once the submitted ones are done."""
        if self._state == "RUN":
            self._state = "CLOSE"

    def terminate(self) -> None:
        """Stop the workers now; unfinished tasks fail."""
        if self._state == "TERMINATED":
            return
        self._state = "TERMINATED"
        self._stop.set()
        if sys.is_finalizing():
            # The coordinator (a daemon thread) may have been frozen holding the
            # engine's locks: aborting, or joining it, would hang the exit. The
            # back-end's exit handler has already stopped the workers.
            return
        self._engine.abort()
        if threading.current_thread() is not self._coordinator:
            self._coordinator.join(5.0)
        self._join_readers(5.0)

    def _join_readers(self, timeout: Optional[float]) -> None:
        # A reader ends with its input or its job; one blocked in the user's
        # iterator ends when that yields (it is a daemon thread).
        with self._lock:
            readers, self._readers = self._readers, []
        for reader in readers:
            if reader is not threading.current_thread():
                reader.join(timeout)

    def join(self, timeout: Optional[float] = None) -> None:
        """Wait for the submitted tasks and the workers (after ``close`` or ``terminate``)."""
        if self._state == "RUN":
            raise ValueError("Pool is still running")
        if self._state == "TERMINATED":
            return
        self._check_owner()
        for job in list(self._jobs):
            # A lazy imap still referenced: its input is read to the end now,
            # whether or not its iterator is being read (as the stdlib's).
            job.window = None
            job.finished.wait()
        self._join_readers(None)
        self._stop.set()
        self._coordinator.join()
        self._state = "TERMINATED"
        self._engine.close(timeout)

    def __enter__(self) -> Pool:
        self._check_running()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.terminate()  # as multiprocessing.Pool does

    def __del__(self) -> None:
        # A process forked from the owner (a user's os.fork, a fork-started
        # worker of another pool) may collect its copy: its workers are not ours.
        if getattr(self, "_owner", None) != os.getpid():
            return
        # (At interpreter shutdown terminate() only marks the pool: see there.)
        state = getattr(self, "_state", "TERMINATED")
        if state == "RUN":
            # As the stdlib's: a pool nobody closed is most likely leaked.
            warnings.warn(f"unclosed running multiprocessing pool {self!r}",
                          ResourceWarning, source=self, stacklevel=2)
        if state != "TERMINATED":
            # __del__ must not raise (any error): nobody would see it.
            with contextlib.suppress(Exception):
                self.terminate()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} state={self._state} devices={self._devices!r}>"


def _given_options(arguments: Mapping[str, Any]) -> List[str]:
    # Pool's option keywords that differ from their defaults (``WorkerOptions``'s).
    defaults = WorkerOptions()
    return [f.name for f in dataclasses.fields(WorkerOptions)
            if f.name != "backend_options" and f.name in arguments
            and arguments[f.name] != getattr(defaults, f.name)]


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
    fields = {f.name for f in dataclasses.fields(WorkerOptions)} - {"backend_options"}
    params: set = set()
    for klass in (pool_class, Pool):
        params |= {name for name, p in inspect.signature(klass).parameters.items()
                   if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    chosen = {k: v for k, v in kwargs.items() if k in fields}
    rest = {k: v for k, v in kwargs.items() if k not in fields and k in params}
    backend_options = {k: v for k, v in kwargs.items() if k not in fields and k not in params}
    options = WorkerOptions(**chosen, backend_options=backend_options)
    options.check_backend(getattr(pool_class, "backends", BACKENDS))
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
        return self.pool._submit(function, _MAP, items, sink, ordered=ordered, lazy=False,
                                 chunksize=1, task_timeout=None, pass_context=False,
                                 window=window)

    def consume(self, job: Job, n: int) -> None:
        """``n`` results of ``job`` were taken by the caller: its window moves on."""
        self.pool._engine.consume(job, n)

    def cancel(self, job: Job) -> None:
        """Stop ``job``: nothing more is sent, results in flight are dropped."""
        self.pool._engine.cancel(job)

    @property
    def broken(self) -> bool:
        """bool: the pool can run no more jobs (its workers could not be replaced, or it closes)."""
        engine = self.pool._engine
        return engine.broken is not None or engine.closing

    @property
    def forked(self) -> bool:
        """bool: the workers are forked from this process (they inherit, see ``inherit``)."""
        return inherit.forked(self.pool._engine.backend)

    def worker_seconds(self) -> List[float]:
        """list[float]: per worker slot, seconds spent running items (replacements included)."""
        return self.pool._engine.worker_seconds()

    def waited(self, seconds: float) -> None:
        """The caller waited ``seconds`` for a result (counted with ``insights=True``)."""
        recorder = self.pool._recorder
        if recorder is not None:
            recorder.waiting_for_results += seconds

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

