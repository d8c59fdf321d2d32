"""What a pool's calls return, and the sinks that fill them.

``apply_async`` returns an [`AsyncResult`][easycore.common.parallel.AsyncResult]
(``ApplyResult``), ``map_async``/``starmap_async`` a
[`MapResult`][easycore.common.parallel.MapResult], ``imap``/``imap_unordered``
an [`IMapIterator`][easycore.common.parallel.IMapIterator], ``submit`` a
``concurrent.futures.Future``: the standard library's types and behaviour.
Each is filled by a [`JobSink`][easycore.common.parallel.engine.job.JobSink]
of its own, on the pool's coordinator thread, as the stdlib's result handler
does; a task's exception is raised as the stdlib raises it (``raise_item``).
"""

from __future__ import annotations

import builtins
import contextlib
import multiprocessing
import threading
import time
import weakref
from collections import deque

from .._hints import Generic, TypeVar
from .._os import interrupts
from ..engine.core import Engine
from ..engine.job import ItemError, Job, JobSink
from ..errors import WorkerError
from ..progress import Progress
from .awaiting import until as await_until
from .awaiting import wake as wake_awaiting
from .reader import ReadAhead

TYPE_CHECKING = False
if TYPE_CHECKING:  # insights are imported when asked for; futures by submit
    import concurrent.futures
    from typing import Any, Callable, Deque, Dict, Generator, List, NoReturn, Optional, Union

    from ..insights import Recorder

__all__ = [
    "ApplyResult",
    "ApplySink",
    "AsyncResult",
    "FutureSink",
    "IMapIterator",
    "IMapSink",
    "IMapState",
    "IMapUnorderedIterator",
    "MapResult",
    "MapSink",
    "TimeoutError",
    "cancel_abandoned",
    "raise_item",
    "task_exception",
]


class TimeoutError(multiprocessing.TimeoutError, builtins.TimeoutError):  # noqa: A001 - the stdlib pool's name
    """``AsyncResult.get(timeout)`` expired; both ``multiprocessing.TimeoutError``
    (as the stdlib raises) and the builtin ``TimeoutError``."""


def raise_item(error: ItemError) -> NoReturn:
    """Raise an item's error as the stdlib would: the task's own exception.

    Except where the task left its process (``SystemExit``, ``KeyboardInterrupt``
    raised by the task): raised in the caller they would end the caller, so
    they come as the [`WorkerError`][easycore.common.parallel.WorkerError]
    that reports them, as from the runners.
    """
    exc = error.exc
    if isinstance(exc, WorkerError):
        # (imported here: multiprocessing.pool, which they subclass, costs a
        # short script 2 ms, and only a failed item needs them)
        from ..pool_errors import RemoteTraceback, ResultEncodingError

        original = exc.__cause__
        if isinstance(original, ResultEncodingError):
            original.item = getattr(exc, "item", None)
        if isinstance(original, Exception):
            # A fresh copy each time it is raised, with the worker's traceback.
            raise original.with_traceback(None) from RemoteTraceback.of(exc.remote_traceback)
    raise exc


def task_exception(error: ItemError) -> BaseException:
    """The exception ``raise_item`` raises for ``error`` (a sink hands it to a result)."""
    try:
        raise_item(error)
    except BaseException as exc:  # noqa: BLE001 - what raise_item raised, whatever it is
        return exc
    raise AssertionError("unreachable")


T = TypeVar("T")


class AsyncResult(Generic[T]):
    """The result of ``apply_async`` (and the base of ``map_async``'s); the stdlib's API."""

    def __init__(self, callback: Optional[Callable] = None,
                 error_callback: Optional[Callable] = None,
                 recorder: Optional[Recorder] = None) -> None:
        self._event = threading.Event()
        self._value: Any = None
        self._error: Optional[BaseException] = None
        self._callback = callback
        self._error_callback = error_callback
        self._job: Optional[Job] = None
        self._recorder = recorder  # insights: callbacks are the caller's stage
        self._wakeups: List[Callable[[], None]] = []  # awaiting event loops

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
        interrupts.sliced(self._event.wait, timeout)

    def get(self, timeout: Optional[float] = None) -> T:
        """The result; re-raises the task's exception.

        Args:
            timeout (float or None): seconds to wait.

        Raises:
            TimeoutError: no result in time (``multiprocessing.TimeoutError`` too).
        """
        recorder = self._recorder
        if recorder is None:
            ready = interrupts.sliced(self._event.wait, timeout)
        else:  # insights: the caller waits for a result
            t0 = time.perf_counter()
            ready = interrupts.sliced(self._event.wait, timeout)
            recorder.waiting_for_results += time.perf_counter() - t0
        if not ready:
            raise TimeoutError(f"no result within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._value

    def __await__(self) -> Generator[Any, None, T]:
        """``await result``: its value (or the task's exception) without blocking the
        event loop; the loop runs other tasks meanwhile."""
        return self._wait_async().__await__()

    async def _wait_async(self) -> T:
        if not self.ready():
            await await_until(self._wakeups, self.ready)
        else:
            import asyncio  # a coroutine runs in a loop: asyncio is loaded already

            await asyncio.sleep(0)  # one turn of the loop, as for a result not there yet
        return self.get(0)

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
            wake_awaiting(self._wakeups)


class ApplyResult(AsyncResult[T]):
    """The stdlib's name for the result of ``apply_async``."""


class ApplySink(JobSink):
    """Fills an ``apply_async``'s result."""

    def __init__(self, result: AsyncResult) -> None:
        self.result = result

    def deliver(self, first_index: int, results: List[Any], failed: Dict[int, ItemError]) -> None:
        if failed:
            self.result._set(None, task_exception(failed[0]))
        else:
            self.result._set(results[0], None)

    def finish(self, error: Optional[BaseException]) -> None:
        if error is not None:
            self.result._set(None, error)


class MapResult(AsyncResult[list[T]]):
    """The result of ``map_async`` / ``starmap_async``: a list in input order."""


class MapSink(JobSink):
    """Fills a ``map_async``'s list; the first failure cancels the job (the stdlib's way)."""

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
                self.engine.cancel(self.job, task_exception(failed[min(failed)]))
            return
        self.values[first_index : first_index + len(results)] = results
        self.progress.update(len(results))

    def finish(self, error: Optional[BaseException]) -> None:
        self.progress.close()
        if error is not None:
            self.result._set(None, error)
        else:
            self.result._set(self.values[0] if self.unpack_one else self.values, None)


class IMapState:
    """What an ``imap``'s sink fills and its iterator empties.

    Apart from the iterator: a job (its sink, its read-ahead thread) never
    holds the iterator, so an iterator its caller dropped is collected, and its
    job cancelled (see ``IMapIterator``).
    """

    def __init__(self) -> None:
        self.cond = threading.Condition()
        # In order: runs of results (a chunk's, in a deque each: a result taken
        # is no longer held) and the errors of failed items between them.
        self.items: Deque[Union[Deque[Any], ItemError]] = deque()
        self.error: Optional[BaseException] = None
        self.done = False
        self.input: Optional[ReadAhead] = None
        self.wakeups: List[Callable[[], None]] = []  # awaiting event loops


class IMapIterator(Generic[T]):
    """Iterates over ``imap`` / ``imap_unordered`` results; ``next(timeout)`` as the stdlib's.

    An iterator its caller dropped (collected) cancels its job: nothing more of
    its input is read. One still referenced when its pool is joined is read to
    the end of its input, its results kept for it (as the stdlib's).
    """

    def __init__(self, engine: Engine, check_owner: Callable[[], None]) -> None:
        """
        Args:
            engine (Engine): the pool's engine.
            check_owner (callable): raises in a process that is not the pool's owner.
        """
        self._engine = engine
        self._check_owner = check_owner
        self._state = IMapState()
        self._items = self._state.items
        self._job: Optional[Job] = None
        self._lazy = False
        self._consumed = 0
        self._run: Deque[Any] = deque()  # what is left of the run being read

    def __iter__(self) -> IMapIterator[T]:
        return self

    def __next__(self) -> T:
        # Results come in runs (a chunk each): within one, an item costs a
        # deque's popleft (~0.1 us in all, against ~0.25 us per item through
        # a queue of single results). Popped, not iterated: the iterator
        # holds no result it handed over (CPython's issue #14406).
        try:
            return self._run.popleft()
        except IndexError:
            return self._next_run(None)

    def next(self, timeout: Optional[float] = None) -> T:
        """The next result; re-raises its task's exception.

        Args:
            timeout (float or None): seconds to wait.

        Raises:
            TimeoutError: nothing arrived in time.
            StopIteration: no results left.
        """
        try:
            return self._run.popleft()
        except IndexError:
            return self._next_run(timeout)

    def _next_run(self, timeout: Optional[float]) -> T:
        """Start the next run of results and return its first (or raise the next
        item's error): a run already there is taken without the lock (deque
        operations are atomic), whatever the input does."""
        while True:
            try:
                entry = self._items.popleft()
            except IndexError:
                entry = self._wait_for_entry(timeout)
            if self._lazy:
                # A run counts as read once it is started: the read-ahead
                # moves on by whole runs, in batches.
                self._consumed += 1 if isinstance(entry, ItemError) else len(entry)
                if self._consumed >= 256:
                    self._move_window()
            if isinstance(entry, ItemError):
                raise_item(entry)
            if entry:
                self._run = entry
                return entry.popleft()

    def _wait_for_entry(self, timeout: Optional[float]) -> Union[Deque[Any], ItemError]:
        state = self._state
        source, job, engine = state.input, self._job, self._engine
        if self._lazy:
            self._move_window()
        with state.cond:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not self._items:
                if state.done:
                    if state.error is not None:
                        job_error, state.error = state.error, None
                        raise job_error
                    raise StopIteration
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"no result within {timeout} s")
                if self._feed_stalled(release=True) and (self._items or state.done):
                    continue
                wait = engine.linger if source is not None and job else 0.5
                state.cond.wait(wait if remaining is None else min(wait, remaining))
            return self._items.popleft()

    def _ready(self) -> bool:
        """Whether a result (or an item's error) is there to take without waiting."""
        return bool(self._items) or bool(self._run)

    def _feed_stalled(self, release: bool) -> bool:
        """If the reader is stuck in the input (it may wait for the very result this
        caller waits for: a feedback loop), send what it read now; runs no user code.
        ``release``: the caller holds the state's lock (it is released meanwhile).

        Returns:
            bool: whether it was stuck.
        """
        state, source, job, engine = self._state, self._state.input, self._job, self._engine
        if source is None or job is None or job.done or not source.stalled(engine.linger):
            return False
        if release:
            state.cond.release()
        try:
            source.feed(engine, job, state.cond, wait=False)
        finally:
            if release:
                state.cond.acquire()
        return True

    def __aiter__(self) -> IMapIterator[T]:
        """``async for result in pool.imap(...)``: results without blocking the event loop."""
        return self

    async def __anext__(self) -> T:
        """The next result, awaited: the loop runs other tasks until it is there, and
        at least once per result (a burst of results does not hold the loop).

        Raises:
            StopAsyncIteration: no results left.
        """
        state = self._state
        if self._ready() or state.done:
            import asyncio  # a coroutine runs in a loop: asyncio is loaded already

            await asyncio.sleep(0)
        while not (self._ready() or state.done):
            if self._lazy:
                self._move_window()  # the read-ahead goes on while this waits
            ready = await await_until(state.wakeups, lambda: self._ready() or state.done,
                                         self._engine.linger if state.input is not None else None)
            if not ready:
                self._feed_stalled(release=False)
        try:
            return self.next()  # there: it does not block
        except StopIteration:
            raise StopAsyncIteration from None

    def _move_window(self) -> None:
        # The read-ahead goes on as results are consumed (in batches: cheap).
        job, n = self._job, self._consumed
        self._consumed = 0
        if job is not None and not job.done:
            if n:
                self._engine.consume(job, n)
            with self._state.cond:
                self._state.cond.notify_all()

    def close(self) -> None:
        """Stop the job: nothing more is sent, results still in flight are dropped."""
        if self._job is not None and not self._job.done:
            self._check_owner()
            self._engine.cancel(self._job)


class IMapUnorderedIterator(IMapIterator[T]):
    """The stdlib's name for the iterator of ``imap_unordered``."""


def cancel_abandoned(engine: Engine, ref: weakref.ReferenceType) -> None:
    """A finalizer of an ``imap`` iterator: its job is cancelled once nobody reads it."""
    # An imap iterator was collected: its job has no reader any more. (A weak
    # reference: a running job is held by its engine; a finished one, with its
    # results, must not be kept by this finalizer.)
    job = ref()
    if job is not None and not job.done:
        # A finalizer must not raise: the pool may be gone already (any error).
        with contextlib.suppress(Exception):
            engine.cancel(job)


class IMapSink(JobSink):
    """Fills an ``imap``'s iterator."""

    def __init__(self, state: IMapState, progress: Progress) -> None:
        self.state = state
        self.progress = progress

    def deliver(self, first_index: int, results: List[Any], failed: Dict[int, ItemError]) -> None:
        state = self.state
        with state.cond:
            if failed:
                state.items.extend(_runs(results, failed))
            elif results:
                state.items.append(deque(results))
            state.cond.notify_all()
            wake_awaiting(state.wakeups)
        self.progress.update(len(results))

    def finish(self, error: Optional[BaseException]) -> None:
        self.progress.close()
        state = self.state
        source = state.input
        if error is None and source is not None and source.error is not None:
            error = source.error  # the input failed: after every result read before it
        with state.cond:
            state.done = True
            if error is not None:
                state.error = error
            state.cond.notify_all()
            wake_awaiting(state.wakeups)


def _runs(results: List[Any], failed: Dict[int, ItemError]) -> List[Any]:
    """A chunk with failed items as an imap iterator reads it: the runs of results
    between them, and each failed item's error in its place."""
    out: List[Any] = []
    start = 0
    for k in sorted(failed):
        if k > start:
            out.append(deque(results[start:k]))
        out.append(failed[k])
        start = k + 1
    if start < len(results):
        out.append(deque(results[start:]))
    return out


class FutureSink(JobSink):
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
            self.future.set_exception(self.exception_for(task_exception(failed[0])))
        else:
            self.future.set_result(results[0])

    def finish(self, error: Optional[BaseException]) -> None:
        future = self.future
        if error is None or future.done():
            return
        if future.running() or future.set_running_or_notify_cancel():
            future.set_exception(self.exception_for(error))

    def exception_for(self, error: BaseException) -> BaseException:
        """The exception the future is given for ``error`` (a seam: ``Executor``'s
        makes a dead worker a ``BrokenProcessPool`` too)."""
        return error
