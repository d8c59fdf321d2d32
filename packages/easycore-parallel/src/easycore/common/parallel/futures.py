"""[`Executor`][easycore.common.parallel.Executor]: ``concurrent.futures`` on easycore's engine.

A drop-in for ``concurrent.futures.ProcessPoolExecutor`` (change the import;
``submit``, ``map``, ``shutdown`` and the constructor's arguments are the
stdlib's) that runs on a [`Pool`][easycore.common.parallel.Pool] of its own, so
on the engine every client of easycore-parallel uses: no second worker loop,
transport or error path. It adds what the pool adds: per-task timeouts, workers
replaced when they die, devices, progress bars and insights.

Where it differs from the stdlib, easycore's promise is the better one:

* a worker that dies fails only the task it ran, with an exception that is
  both [`WorkerDiedError`][easycore.common.parallel.WorkerDiedError] (naming
  the worker, its exit code and the item) and
  ``concurrent.futures.process.BrokenProcessPool`` (what the stdlib raises);
  the worker is replaced and the executor keeps working, where the stdlib's
  breaks for good and fails every pending future;
* a task that raises ``SystemExit`` fails alone, as an exception;
* ``max_tasks_per_child`` works under every start method (the stdlib refuses
  ``fork``);
* lambdas, closures and ``__main__`` functions work under every start method;
* ``map`` chunks automatically (``chunksize=None``, the default here: the
  stdlib's default of 1 sends each item alone).
"""

from __future__ import annotations

import concurrent.futures
import os
import pickle
import threading
import time
import weakref
from concurrent.futures import process as _cf_process
from concurrent.futures.process import BrokenProcessPool

from ._future import Future
from ._hints import ParamSpec, TypeVar
from ._os import interrupts
from ._os.threads import ThreadsOption
from .errors import ParallelError, WorkerDiedError
from .insights import Insights
from .pool import Pool
from .pool.program import STAR
from .pool.results import FutureSink
from .pool.results import TimeoutError as ResultTimeout
from .pool_errors import RemoteTraceback, ResultEncodingError
from .progress import ProgressOption

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Sequence, Tuple, Type

__all__ = ["Executor", "broken_pool_error", "futures_exception"]

T = TypeVar("T")
P = ParamSpec("P")

# Interpreter exit (as the stdlib's ``_python_exit``): pending futures finish
# before the workers are stopped, and nothing new is accepted.
_exiting = False
_open: weakref.WeakSet[Executor] = weakref.WeakSet()
_draining: Dict[int, threading.Thread] = {}  # pools shut down without waiting
_registry_lock = threading.Lock()

_BROKEN_TYPES: Dict[Tuple[type, type], type] = {}


class _TextTraceback(Exception):
    """A worker's traceback as an exception's cause, its text in ``tb`` (the stdlib's shape)."""

    def __init__(self, tb: str) -> None:
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


# The cause concurrent.futures' own executor raises from, so that code matching it keeps
# working; a private name, so a standard library without it gets one of the same shape.
_FuturesRemoteTraceback: Any = getattr(_cf_process, "_RemoteTraceback", _TextTraceback)


def broken_pool_error(error: BaseException, kinds: Tuple[type, ...] = (WorkerDiedError,),
                      also: type = BrokenProcessPool) -> BaseException:
    """``error`` as the executor raises it: one of ``kinds`` (a dead worker, by default)
    becomes an error of its class that is also an ``also`` (``BrokenProcessPool``),
    with the same attributes and message; anything else is returned as it is.

    Args:
        error (BaseException): what the pool reported.
        kinds (tuple): the classes to convert.
        also (type): the stdlib's class the copy is an instance of too.

    Returns:
        BaseException:
    """
    if not isinstance(error, kinds) or isinstance(error, also):
        return error
    cls = type(error)
    with _registry_lock:
        both = _BROKEN_TYPES.get((cls, also))
        if both is None:
            both = _BROKEN_TYPES[(cls, also)] = type(cls.__name__, (cls, also), {
                "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                "__doc__": cls.__doc__})
    # A copy, not a cast: the pool's error object may be shared (a Pool's result).
    args: Any = error.__reduce__()[1]
    converted = both(*args)
    converted.__dict__.update(error.__dict__)
    converted.__cause__ = error.__cause__
    converted.__traceback__ = error.__traceback__
    return converted


def futures_exception(error: BaseException) -> BaseException:
    """``error`` as ``concurrent.futures`` raises it: a dead worker a ``BrokenProcessPool``
    too (``broken_pool_error``); a task's exception caused by the worker's traceback as
    ``concurrent.futures.process._RemoteTraceback`` (with ``tb``, and ``text`` as the
    pool's cause has), where the pool's cause is ``multiprocessing.pool``'s.

    Args:
        error (BaseException): what the pool reported.

    Returns:
        BaseException: ``error`` itself (its cause replaced) or its converted copy.
    """
    error = broken_pool_error(error)
    # A result that does not pickle: the stdlib raises the PicklingError itself.
    error = broken_pool_error(error, (ResultEncodingError,), pickle.PicklingError)
    cause = error.__cause__
    if isinstance(cause, RemoteTraceback):
        remote = _FuturesRemoteTraceback(cause.text)
        remote.text = cause.text
        error.__cause__ = remote
    return error


class _FutureSink(FutureSink):
    """The executor's futures raise what ``concurrent.futures`` raises."""

    def exception_for(self, error: BaseException) -> BaseException:
        return futures_exception(error)


def _drain(pool: Pool) -> None:
    """Let ``pool`` finish what was submitted, then stop its workers, in a thread of its
    own (``shutdown(wait=False)``, or an executor dropped without a shutdown)."""
    pool.close()
    key = id(pool)

    def join() -> None:
        try:
            pool.join()
        finally:
            with _registry_lock:
                _draining.pop(key, None)

    thread = threading.Thread(target=join, name="easycore-executor-shutdown", daemon=True)
    with _registry_lock:
        _draining[key] = thread
    thread.start()


def _at_exit() -> None:
    """Interpreter exit: refuse new work, finish pending futures, then let the
    back-ends' own exit handlers stop the workers."""
    global _exiting
    _exiting = True
    for executor in list(_open):
        executor.shutdown(wait=True)
    with _registry_lock:
        threads = list(_draining.values())
    for thread in threads:
        interrupts.join(thread)


def _forget_in_child() -> None:
    # A forked child (a fork-started worker, a user's os.fork) has copies of
    # this process's executors, not their workers: its exit must not wait for them.
    global _open
    _open = weakref.WeakSet()
    _draining.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)

# Before the atexit handlers (the back-ends' stop the workers), as the stdlib's
# executors register; a plain atexit handler where the interpreter has no such hook.
if hasattr(threading, "_register_atexit"):
    threading._register_atexit(_at_exit)
else:  # pragma: no cover - another interpreter
    import atexit

    atexit.register(_at_exit)


class Executor(concurrent.futures.Executor):
    """A ``concurrent.futures.Executor`` on easycore's engine: ``ProcessPoolExecutor``'s API.

    Examples:
        ```python
        import asyncio
        from easycore.common.parallel import Executor

        def square(x):
            return x * x

        if __name__ == "__main__":
            with Executor(max_workers=4, task_timeout=60) as executor:
                print(executor.submit(square, 3).result())   # 9
                print(list(executor.map(square, range(5))))  # [0, 1, 4, 9, 16]

            async def main():
                with Executor(2) as executor:
                    loop = asyncio.get_running_loop()
                    return await loop.run_in_executor(executor, square, 7)

            print(asyncio.run(main()))                        # 49
        ```
    """

    #: the pool class the executor runs on (easycore-torch's brings its own)
    pool_class: Type[Pool] = Pool

    def __init__(
        self,
        max_workers: Optional[int] = None,
        mp_context: Optional[Any] = None,
        initializer: Optional[Callable[..., Any]] = None,
        initargs: Sequence[Any] = (),
        *,
        max_tasks_per_child: Optional[int] = None,
        task_timeout: Optional[float] = None,
        max_deaths: int = 3,
        progress: ProgressOption = False,
        insights: bool = False,
        devices: Optional[Iterable[str]] = None,
        start_method: Optional[str] = None,
        backend: str = "process",
        cpu_threads: ThreadsOption = "auto",
        **backend_options: Any,
    ) -> None:
        """
        Args:
            max_workers (int or None): number of workers (None: the CPUs this
                process may use, or ``len(devices)``).
            mp_context (multiprocessing context or None): its start method is used.
            initializer (callable or None): ``initializer(*initargs)`` runs in each
                worker when it starts (a replacement too).
            initargs (tuple): its arguments.
            max_tasks_per_child (int or None): replace a worker after this many
                tasks (None: never); any start method, ``fork`` too.
            task_timeout (float or None): seconds one task may run: longer fails
                its future with [`TaskTimeoutError`][easycore.common.parallel.TaskTimeoutError];
                only its worker is killed and replaced.
            max_deaths (int): worker deaths one call (a ``submit``, a ``map``) may
                cause before it fails.
            progress (bool or dict): a tqdm bar for each ``map``.
            insights (bool): count where the time goes (see ``insights()``).
            devices (list[str] or None): one worker per device.
            start_method (str or None): "fork", "spawn" or "forkserver" (or
                ``mp_context``, not both).
            backend (str): "process", "thread" or "ray".
            cpu_threads (int or str or None): each worker's thread budget.
            **backend_options: the back-end's own (``backend="ray"``: ``address``,
                ``ray_init_kwargs``).

        Raises:
            ValueError: ``max_workers`` below 1, or another bad option (the Pool's).
            TypeError: an ``initializer`` that is not callable.
            WorkerError: the initializer raised (in the first worker that started);
                also a ``BrokenProcessPool``. The stdlib's executor starts, then
                fails every future with ``BrokenProcessPool``.
        """
        if max_workers is not None and (isinstance(max_workers, bool) or max_workers <= 0):
            raise ValueError("max_workers must be greater than 0")
        self._shutdown_lock = threading.Lock()
        self._shutdown = False
        try:
            self._pool = self.pool_class(
                max_workers, initializer, initargs, max_tasks_per_child, mp_context,
                devices=devices, task_timeout=task_timeout, max_deaths=max_deaths,
                progress=progress, insights=insights, start_method=start_method,
                backend=backend, cpu_threads=cpu_threads, **backend_options)
        except ParallelError as exc:
            # The workers could not start (an initializer raised, a worker died
            # starting): said here, where the stdlib breaks at the first result;
            # a BrokenProcessPool too, as the stdlib's is then.
            raise broken_pool_error(exc, (ParallelError,)) from exc.__cause__
        self._futures: weakref.WeakSet[concurrent.futures.Future] = weakref.WeakSet()
        # Dropped without a shutdown: what was submitted still finishes (as the stdlib's).
        self._finalizer = weakref.finalize(self, _drain, self._pool)
        _open.add(self)

    # ------------------------------------------------------------ the stdlib's
    def submit(self, fn: Callable[P, T], /, *args: P.args,
               **kwargs: P.kwargs) -> concurrent.futures.Future[T]:
        """Schedule ``fn(*args, **kwargs)`` on a worker.

        Args:
            fn (callable): the function (a lambda or closure works too).
            *args: its positional arguments.
            **kwargs: its keyword arguments.

        Returns:
            concurrent.futures.Future: its result or exception; a worker that
            died running it fails it with a ``WorkerDiedError`` that is also a
            ``BrokenProcessPool``.

        Raises:
            RuntimeError: after ``shutdown`` or once the interpreter is exiting.
        """
        with self._shutdown_lock:
            self._check_open()
            future: Future[T] = Future()
            self._pool._submit_call(fn, args, kwargs, _FutureSink(future))
            self._futures.add(future)
            return future

    def map(self, fn: Callable[..., T], *iterables: Iterable[Any],
            timeout: Optional[float] = None, chunksize: Optional[int] = None) -> Iterator[T]:
        """``fn(*args)`` for the ``args`` of ``zip(*iterables)``, in order.

        As the stdlib's, the iterables are read at once and the work is
        submitted before the first result is asked for.

        Args:
            fn (callable): the function.
            *iterables: its arguments, one iterable per parameter.
            timeout (float or None): seconds, from this call, by which each
                result must be there; ``TimeoutError`` from ``next()`` otherwise.
            chunksize (int or None): items sent to a worker at once (None:
                automatic; the stdlib's default is 1).

        Returns:
            Iterator: the results; leaving it early (``close()``, an exception,
            dropping it) cancels what no worker holds yet. What a worker holds
            runs on: the item it runs and those queued behind it (at most 3
            chunks a worker; the stdlib's executor likewise runs the call it
            queued ahead).

        Raises:
            ValueError: ``chunksize`` below 1.
            RuntimeError: after ``shutdown``.
        """
        if chunksize is not None and chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        deadline = None if timeout is None else time.monotonic() + timeout
        items = list(zip(*iterables))
        with self._shutdown_lock:
            self._check_open()
            results = self._pool._imap(fn, items, chunksize, True, None, False, STAR)
        return self._results(results, len(items), deadline)

    @staticmethod
    def _results(results: Any, n: int, deadline: Optional[float]) -> Iterator[Any]:
        # A generator apart from map(): map's errors (shutdown, chunksize) are
        # raised by the call, as the stdlib's, not by the first next().
        try:
            for _ in range(n):
                try:
                    if deadline is None:
                        yield results.next()
                    else:
                        yield results.next(max(0.0, deadline - time.monotonic()))
                except ResultTimeout:
                    # (the builtin TimeoutError since 3.11; its own class before)
                    raise concurrent.futures.TimeoutError() from None
                except Exception as exc:
                    converted = futures_exception(exc)
                    if converted is exc:
                        raise
                    raise converted from exc.__cause__
        finally:
            results.close()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Accept no more work; stop the workers once what was submitted is done.

        Args:
            wait (bool): return once every pending future is done and the workers
                have exited (False: at once; they finish in the background).
            cancel_futures (bool): cancel the futures that have not started.
        """
        with self._shutdown_lock:
            self._shutdown = True
            if cancel_futures:
                for future in list(self._futures):
                    future.cancel()
        _open.discard(self)
        if not self._finalizer.detach():
            if wait:  # shut down already, without waiting: wait now
                with _registry_lock:
                    thread = _draining.get(id(self._pool))
                if thread is not None:
                    interrupts.join(thread)  # as Pool.join waits: a Ctrl-C ends it
            return
        if wait:
            self._pool.close()
            self._pool.join()
        else:
            _drain(self._pool)

    # ------------------------------------------------------------ the extras
    @property
    def max_workers(self) -> int:
        """int: the number of workers."""
        return len(self._pool.devices)

    @property
    def devices(self) -> list:
        """list[str]: one worker per device."""
        return self._pool.devices

    @property
    def worker_pids(self) -> list:
        """list: the workers' process ids (replacements included)."""
        return self._pool.worker_pids

    @property
    def pool(self) -> Pool:
        """Pool: the pool the executor runs on (``broadcast``, ``imap``, ...)."""
        return self._pool

    def insights(self, reset: bool = False) -> Insights:
        """Where the time went (made with ``insights=True``); see ``Pool.insights``.

        Args:
            reset (bool): start counting afresh after taking these.

        Returns:
            Insights:
        """
        return self._pool.insights(reset)

    def _check_open(self) -> None:
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        if _exiting:
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    def __repr__(self) -> str:
        state = "shut down" if self._shutdown else "running"
        return f"<{type(self).__name__} {state} devices={self._pool.devices!r}>"
