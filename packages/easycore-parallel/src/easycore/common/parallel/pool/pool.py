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

Everything runs on the engine the runners use, built through its one door
([`engine.door.start`][easycore.common.parallel.engine.door.start]) with the
``ReplaceWorker`` policy: one coordinator thread pumps it; results, callbacks
and error callbacks are delivered from that thread, as the stdlib's result
handler does. What the calls return is in ``results``, ``imap``'s reader in
``reader``, the workers' program in ``program``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
import weakref

from .._lazy import bind
from .._os import interrupts, stacks
from .._os import threads as _threads
from ..engine import door
from ..engine.door import DevicePolicy
from .program import APPLY, MAP, STAR, job_code

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing, the caller's parts, futures (by submit), insights (when asked for)
    import concurrent.futures
    from typing import (
        Any,
        Callable,
        ClassVar,
        Dict,
        Iterable,
        List,
        Literal,
        Mapping,
        Optional,
        ParamSpec,
        Sequence,
        TypeVar,
        Union,
        overload,
    )

    from .._os.threads import ThreadsOption
    from ..engine.chunking import AdaptiveChunker, ChunkersByFunction
    from ..engine.job import Job, JobSink
    from ..insights import Insights, Recorder
    from ..options import WorkerOptions, check_chunksize
    from ..progress import Progress, ProgressOption
    from ..worker.executor import WorkerContext
    from .arguments import (
        check_per_worker,
        checked_devices,
        checked_options,
        start_method_of,
        worker_spec,
        workers_devices,
    )
    from .reader import ReadAhead, Readers
    from .results import (
        ApplyResult,
        ApplySink,
        AsyncResult,
        FutureSink,
        IMapIterator,
        IMapSink,
        IMapUnorderedIterator,
        MapResult,
        MapSink,
        cancel_abandoned,
    )

    # Typed as typeshed types multiprocessing.Pool and concurrent.futures: a
    # result is what the function returns (T), an item what it takes (S); with
    # pass_context=True the function takes the WorkerContext first.
    S = TypeVar("S")
    T = TypeVar("T")
    P = ParamSpec("P")

# The caller's parts are imported by the first ``Pool()``, not with this module:
# a ``spawn`` worker imports your script again, and with it this module. The
# option checks come first, the rest once the back-end is built (see __init__).
_ARGUMENT_PARTS = {".arguments": "check_per_worker checked_devices checked_options "
                                 "start_method_of worker_spec workers_devices"}
_CALLERS_PARTS = {
    "..engine.chunking": "AdaptiveChunker ChunkersByFunction", "..progress": "Progress",
    "..options": "check_chunksize", ".reader": "ReadAhead Readers",
    ".results": "ApplyResult ApplySink FutureSink IMapIterator IMapSink "
                "IMapUnorderedIterator MapResult MapSink cancel_abandoned"}

__all__ = ["Pool"]


class Pool(door.WorkerStacks):
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
    backends: ClassVar[Dict[str, Union[type, str]]] = dict(door.BACKENDS)
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
        max_worker_memory: Optional[Union[int, str]] = None,
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
            max_worker_memory (int or str or None): bytes (or ``"2 GB"``): a
                worker whose resident memory (RSS) passed it after a chunk is
                replaced before its next one; no item fails or is lost. Each
                worker then holds one chunk at a time. Process back-end, Linux.
            options (WorkerOptions or None): all of ``task_timeout``,
                ``progress``, ``start_method``, ``backend``, ``cpu_threads``,
                ``queue_scale``, ``max_deaths``, ``max_node_losses``, ``insights``,
                ``maxtasksperchild`` and the back-end's options at once, already checked (what
                ``BackgroundTask`` and ``JobQueue`` pass); those keywords must
                then be left out.
            **backend_options: for ``backend="ray"``: ``address``, ``ray_init_kwargs``,
                ``capacity_timeout`` (seconds a worker may wait for a node with room; see
                [`RayBackend`][easycore.common.parallel.backends.ray.RayBackend]).
        """
        bind(globals(), _ARGUMENT_PARTS)  # the first Pool imports them
        self._options = checked_options(self.backends, options, context, backend_options, {
            "backend": backend, "start_method": start_method_of(context, start_method),
            "task_timeout": task_timeout, "queue_scale": queue_scale, "max_deaths": max_deaths,
            "max_node_losses": max_node_losses, "maxtasksperchild": maxtasksperchild,
            "cpu_threads": cpu_threads, "progress": progress, "insights": insights,
            "max_worker_memory": max_worker_memory})
        devices = workers_devices(processes, devices)
        check_per_worker(worker_contexts, len(devices), initializer)
        self._policy = self.make_policy()
        self._devices = checked_devices(self._policy, self._options, devices)
        self._threads = _threads.budget(self._options.cpu_threads, len(devices))
        # Built first: a forkserver back-end starts its server, which boots meanwhile.
        spec = worker_spec(self._policy, self._devices, self._options, self._threads,
                           initializer, initargs, cfg, worker_contexts)
        self._quiet = spec.program.quiet  # nothing of the user's in a worker's start
        self._backend = door.backend_for(self.backends, self._options, spec)
        self._backend.launch()  # spawned workers boot while the pool sets up
        try:
            bind(globals(), _CALLERS_PARTS)
            self._open_books()
            self._start_engine()
        except BaseException:
            self._backend.abort()  # (nothing left to do if the engine's start did it)
            self._state = "TERMINATED"  # no "unclosed running pool" warning when collected
            raise
        self._coordinator = door.Coordinator(self._engine, "easycore-pool-coordinator")

    # ------------------------------------------------------ __init__'s steps
    def _open_books(self) -> None:
        """The pool's own state: running, its owner, its chunkers, jobs and readers."""
        self._progress = self._options.progress
        self._state = "RUN"
        self._owner = os.getpid()
        self._chunkers = ChunkersByFunction()
        self._lock = threading.Lock()
        # Jobs not finished yet (the engine holds those): a finished job, with
        # its sink and results, is not kept by the pool.
        self._jobs: weakref.WeakSet = weakref.WeakSet()
        self._readers = Readers()  # the threads that read lazy imap inputs
        self._pickle_code = self._options.backend != "thread"
        self._codes: Dict[Any, bytes] = {}  # job functions pickled by reference (job_code)
        self._submitted = threading.local()  # the sink of the job each thread submits (_wait)

    def _start_engine(self) -> None:
        """The engine over the back-end, through the one door; work goes to the
        first worker ready, the others join as they are (under ``fork``, with
        nothing of the user's in their start, to every worker at once)."""
        options = self._options
        self._recorder: Optional[Recorder] = (
            door.recorder(self._devices) if options.insights else None)
        self._engine = door.start(self._backend, options, door.ReplaceWorker(options.max_deaths,
                                                                     options.max_node_losses),
                                  wait="none" if self._quiet else "first",
                                  recorder=self._recorder)

    def make_policy(self) -> DevicePolicy:
        """The device policy of this pool (a seam: easycore-torch's picks its transport here).

        Returns:
            DevicePolicy:
        """
        return self.device_policy

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
    def _submit(self, func: Callable, mode: str, source: Any, sink: JobSink, *, ordered: bool,
                lazy: bool, chunksize: Optional[int], task_timeout: Optional[float],
                pass_context: bool, targets: Optional[List[int]] = None,
                window: Optional[int] = None) -> Job:
        # ``window``: results taken but not yet consumed, at most (see
        # ``Engine.submit_job``); endless streams (``BackgroundTask``) need it.
        self._check_running()
        check_chunksize(chunksize)
        timeout = self._options.timeout_for(task_timeout)
        code = job_code(func, mode, pass_context, self._pickle_code, self._codes,
                        self._backend.main_code)
        # The engine sets sink.job before a Ctrl-C can land (submit_job defers
        # it): the blocking call that made the job (_wait) finds it there.
        self._submitted.sink = sink
        lead, self._submitted.lead = getattr(self._submitted, "lead", False), False
        if not lead:  # (first: its start waits for the thread, before any item runs)
            self._coordinator.start()
        job = self._engine.submit_job(
            code, source, sink, ordered=ordered, lazy=lazy, timeout=timeout,
            chunker=self._chunkers.get(func), chunk_size=chunksize, targets=targets, window=window,
            lead=lead)
        if lead and self._engine.state.led is not job:  # (refused: the coordinator pumps it)
            self._coordinator.start()
        with self._lock:
            if not job.done:
                self._jobs.add(job)
        return job

    def _wait(self, start: Callable[[], AsyncResult]) -> Any:
        """A blocking call: submit its job (``start()``) and wait for its result
        (see ``door.blocking_call``)."""
        return door.blocking_call(self._engine, self._coordinator, self._submitted, start)

    def _progress_bar(self, total: Optional[int], func: Callable) -> Progress:
        return Progress(self._progress, total, getattr(func, "__name__", "Pool"), self._recorder)

    # ------------------------------------------------------- the stdlib's API
    def apply(self, func: Callable[..., T], args: Sequence[Any] = (),
              kwds: Optional[Mapping[str, Any]] = None, *,
              task_timeout: Optional[float] = None, pass_context: bool = False) -> T:
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
        return self._wait(lambda: self.apply_async(func, args, kwds, task_timeout=task_timeout,
                                                   pass_context=pass_context))

    def apply_async(self, func: Callable[..., T], args: Sequence[Any] = (),
                    kwds: Optional[Mapping[str, Any]] = None,
                    callback: Optional[Callable[[T], Any]] = None,
                    error_callback: Optional[Callable[[BaseException], Any]] = None, *,
                    task_timeout: Optional[float] = None,
                    pass_context: bool = False) -> AsyncResult[T]:
        """``apply`` without waiting; see the stdlib for ``callback`` and ``error_callback``.

        Returns:
            AsyncResult:
        """
        result: ApplyResult[T] = ApplyResult(callback, error_callback, self._recorder)
        item = (tuple(args), dict(kwds or {}))
        result._job = self._submit(func, APPLY, [item], ApplySink(result), ordered=False,
                                   lazy=False, chunksize=1, task_timeout=task_timeout,
                                   pass_context=pass_context)
        return result

    def submit(self, fn: Callable[P, T], /, *args: P.args,
               **kwargs: P.kwargs) -> concurrent.futures.Future[T]:
        """``fn(*args, **kwargs)`` in a worker, as a ``concurrent.futures.Future``.

        Returns:
            concurrent.futures.Future:
        """
        from .._future import Future

        future: Future[T] = Future()
        self._submit_call(fn, args, kwargs, FutureSink(future))
        return future

    def _submit_call(self, fn: Callable, args: Sequence[Any], kwargs: Mapping[str, Any],
                     sink: FutureSink) -> None:
        # ``submit``'s job, filling ``sink``'s future (``Executor`` brings its own sink).
        self._submit(fn, APPLY, [(args, kwargs)], sink, ordered=False, lazy=False,
                     chunksize=1, task_timeout=None, pass_context=False)

    if TYPE_CHECKING:  # what a type checker sees
        @overload
        def map(self, func: Callable[[S], T], iterable: Iterable[S],
                chunksize: Optional[int] = None, *, task_timeout: Optional[float] = None,
                pass_context: Literal[False] = False) -> List[T]: ...
        @overload
        def map(self, func: Callable[[WorkerContext, S], T], iterable: Iterable[S],
                chunksize: Optional[int] = None, *, task_timeout: Optional[float] = None,
                pass_context: Literal[True]) -> List[T]: ...

    def map(self, func: Callable[..., T], iterable: Iterable[Any],
            chunksize: Optional[int] = None, *, task_timeout: Optional[float] = None,
            pass_context: bool = False) -> List[T]:
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
        return self._wait(lambda: self._map_async(func, MAP, iterable, chunksize, None, None,
                                                  task_timeout, pass_context))

    def starmap(self, func: Callable[..., T], iterable: Iterable[Iterable[Any]],
                chunksize: Optional[int] = None, *, task_timeout: Optional[float] = None,
                pass_context: bool = False) -> List[T]:
        """``[func(*args) for args in iterable]`` across the workers, in order."""
        return self._wait(lambda: self.starmap_async(func, iterable, chunksize,
                                                     task_timeout=task_timeout,
                                                     pass_context=pass_context))

    if TYPE_CHECKING:  # what a type checker sees
        @overload
        def map_async(self, func: Callable[[S], T], iterable: Iterable[S],
                      chunksize: Optional[int] = None,
                      callback: Optional[Callable[[List[T]], Any]] = None,
                      error_callback: Optional[Callable[[BaseException], Any]] = None, *,
                      task_timeout: Optional[float] = None,
                      pass_context: Literal[False] = False) -> MapResult[T]: ...
        @overload
        def map_async(self, func: Callable[[WorkerContext, S], T], iterable: Iterable[S],
                      chunksize: Optional[int] = None,
                      callback: Optional[Callable[[List[T]], Any]] = None,
                      error_callback: Optional[Callable[[BaseException], Any]] = None, *,
                      task_timeout: Optional[float] = None,
                      pass_context: Literal[True]) -> MapResult[T]: ...

    def map_async(self, func: Callable[..., T], iterable: Iterable[Any],
                  chunksize: Optional[int] = None,
                  callback: Optional[Callable[[List[T]], Any]] = None,
                  error_callback: Optional[Callable[[BaseException], Any]] = None, *,
                  task_timeout: Optional[float] = None,
                  pass_context: bool = False) -> MapResult[T]:
        """``map`` without waiting.

        Returns:
            MapResult:
        """
        return self._map_async(func, MAP, iterable, chunksize, callback, error_callback,
                               task_timeout, pass_context)

    def starmap_async(self, func: Callable[..., T], iterable: Iterable[Iterable[Any]],
                      chunksize: Optional[int] = None,
                      callback: Optional[Callable[[List[T]], Any]] = None,
                      error_callback: Optional[Callable[[BaseException], Any]] = None, *,
                      task_timeout: Optional[float] = None,
                      pass_context: bool = False) -> MapResult[T]:
        """``starmap`` without waiting.

        Returns:
            MapResult:
        """
        return self._map_async(func, STAR, iterable, chunksize, callback, error_callback,
                               task_timeout, pass_context)

    def _map_async(self, func: Callable, mode: str, iterable: Iterable,
                   chunksize: Optional[int], callback: Optional[Callable],
                   error_callback: Optional[Callable], task_timeout: Optional[float],
                   pass_context: bool) -> MapResult[Any]:
        items = iterable if isinstance(iterable, (list, tuple, range)) else list(iterable)
        result: MapResult[Any] = MapResult(callback, error_callback, self._recorder)
        sink = MapSink(result, len(items), self._engine, self._progress_bar(len(items), func))
        job = self._submit(func, mode, items, sink, ordered=False, lazy=False,
                           chunksize=chunksize, task_timeout=task_timeout,
                           pass_context=pass_context)
        sink.job = job
        result._job = job
        return result

    if TYPE_CHECKING:  # what a type checker sees
        @overload
        def imap(self, func: Callable[[S], T], iterable: Iterable[S],
                 chunksize: Optional[int] = None, *, task_timeout: Optional[float] = None,
                 pass_context: Literal[False] = False) -> IMapIterator[T]: ...
        @overload
        def imap(self, func: Callable[[WorkerContext, S], T], iterable: Iterable[S],
                 chunksize: Optional[int] = None, *, task_timeout: Optional[float] = None,
                 pass_context: Literal[True]) -> IMapIterator[T]: ...

    def imap(self, func: Callable[..., T], iterable: Iterable[Any],
             chunksize: Optional[int] = None, *, task_timeout: Optional[float] = None,
             pass_context: bool = False) -> IMapIterator[T]:
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

    if TYPE_CHECKING:  # what a type checker sees
        @overload
        def imap_unordered(self, func: Callable[[S], T], iterable: Iterable[S],
                           chunksize: Optional[int] = None, *,
                           task_timeout: Optional[float] = None,
                           pass_context: Literal[False] = False) -> IMapIterator[T]: ...
        @overload
        def imap_unordered(self, func: Callable[[WorkerContext, S], T], iterable: Iterable[S],
                           chunksize: Optional[int] = None, *,
                           task_timeout: Optional[float] = None,
                           pass_context: Literal[True]) -> IMapIterator[T]: ...

    def imap_unordered(self, func: Callable[..., T], iterable: Iterable[Any],
                       chunksize: Optional[int] = None, *,
                       task_timeout: Optional[float] = None,
                       pass_context: bool = False) -> IMapIterator[T]:
        """Like ``imap``, results in the order they finish.

        Returns:
            IMapIterator:
        """
        return self._imap(func, iterable, chunksize, False, task_timeout, pass_context)

    def _imap(self, func: Callable, iterable: Iterable, chunksize: Optional[int], ordered: bool,
              task_timeout: Optional[float], pass_context: bool,
              mode: str = MAP) -> IMapIterator:
        # (``mode``: STAR for ``Executor.map``, whose items are argument tuples)
        iterator = IMapIterator if ordered else IMapUnorderedIterator
        it: IMapIterator[Any] = iterator(self._engine, self._check_owner)
        lazy = not isinstance(iterable, (list, tuple, range))
        source: Any = iterable
        window = None
        if lazy:
            source = it._state.input = ReadAhead(iter(iterable), chunksize)
            # Taken, not yet consumed, at most: a couple of rounds of every
            # worker's queue, at the largest chunk size (the read-ahead bound).
            window = 2 * (self._engine.credits + 1) * len(self._devices) * (
                chunksize or AdaptiveChunker().max_items)
        bar = self._progress_bar(None if lazy else len(iterable), func)  # type: ignore[arg-type]
        job = self._submit(func, mode, source, IMapSink(it._state, bar), ordered=ordered,
                           lazy=lazy, chunksize=chunksize, task_timeout=task_timeout,
                           pass_context=pass_context, window=window)
        it._job, it._lazy = job, lazy
        weakref.finalize(it, cancel_abandoned, self._engine, weakref.ref(job))
        if lazy and not job.done:
            self._readers.start(source, self._engine, job, it._state.cond)
        return it

    # ------------------------------------------------------------ the extras
    def broadcast(self, fn: Callable[..., T], *args: Any, task_timeout: Optional[float] = None,
                  pass_context: bool = False) -> List[T]:
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

        def start() -> MapResult[T]:
            result: MapResult[T] = MapResult()
            sink = MapSink(result, n, self._engine, Progress(False, None, ""))
            job = self._submit(fn, STAR, [tuple(args)] * n, sink, ordered=False, lazy=False,
                               chunksize=1, task_timeout=task_timeout,
                               pass_context=pass_context, targets=list(range(n)))
            sink.job = job
            result._job = job
            return result

        return self._wait(start)

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
        constructor's and replacements'). An item running far longer than a
        typical one makes the verdict "stalled", naming the function it is in
        (``insights.stalled``).

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
        result = door.stalled(self._engine, recorder.snapshot())
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
        if sys.is_finalizing():
            # The coordinator (a daemon thread) may have been frozen holding the
            # engine's locks: aborting, or joining it, would hang the exit. The
            # back-end's exit handler has already stopped the workers.
            self._coordinator.stop.set()
            return
        self._coordinator.halt()
        # Where busy workers were goes into their jobs' errors (and a Ctrl-C's note).
        self._stopped_at = self._engine.abort(where=True)
        self._coordinator.join(5.0)
        self._readers.join(5.0)

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
            interrupts.sliced(job.finished.wait)
        self._readers.join(None)
        self._coordinator.halt()
        self._coordinator.join()
        self._state = "TERMINATED"
        self._engine.close(timeout)

    def __enter__(self) -> Pool:
        self._check_running()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.terminate()  # as multiprocessing.Pool does
        if isinstance(exc, KeyboardInterrupt):
            stacks.note(exc, getattr(self, "_stopped_at", {}))

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

