"""The worker side: what a worker runs, and the loop of a worker process.

A worker runs a *program* (its init and end hooks, and how a job's function
is built) and then chunks of *jobs*:

* [`WorkerProgram`][easycore.common.parallel.worker.WorkerProgram] is the
  interface; [`RunnerProgram`][easycore.common.parallel.worker.RunnerProgram]
  runs a runner's producer hooks (``setup_worker`` and ``producer_init``,
  ``producer_work`` per item, ``producer_end``). ``Pool`` brings its own.
* [`Executor`][easycore.common.parallel.worker.Executor] is the whole worker
  contract for one device and knows nothing about processes or pipes: it runs
  the init hooks, caches each job's function (sent once per job), runs chunks
  item by item (an item that raises fails alone: the others keep their
  results) and the end hook. The process loop, the Ray actor and the thread
  back-end all wrap exactly this class.
* [`process_main`][easycore.common.parallel.worker.process_main] is the entry
  point of a worker process: it reads [`protocol`][easycore.common.parallel.protocol]
  messages from its task pipe in the main thread (no relay thread between
  the pipe and the work), and sends the answers back on its result pipe.

A worker process limits its thread pools before it unpickles anything (see
[`threads`][easycore.common.parallel.threads]), dies with its parent
([`lifeline`][easycore.common.parallel.lifeline]), ignores Ctrl-C (the
caller decides), and on ``SIGTERM`` (how the caller ends a worker after a
failure) exits through the interpreter's normal shutdown, which ends the
daemonic processes it started.
"""

from __future__ import annotations

import _thread
import os
import pickle
import signal
import struct
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from . import interrupts, lifeline, threads
from .errors import ErrorReport, ResultEncodingError
from .protocol import (
    TRACK_TIMES,
    ChunkDone,
    ItemFailure,
    RunChunk,
    WorkerEnded,
    WorkerFailed,
    WorkerReady,
)

__all__ = [
    "HookFailed",
    "Terminated",
    "WorkerContext",
    "WorkerProgram",
    "RunnerProgram",
    "Executor",
    "ProgressSlots",
    "WorkerSpec",
    "process_main",
]

#: exit code of a worker that found its parent gone
EXIT_PARENT_GONE = 75
_DUMP = pickle.HIGHEST_PROTOCOL


class HookFailed(Exception):
    """A hook raised; ``report`` describes the original exception."""

    def __init__(self, report: ErrorReport) -> None:
        super().__init__(report.hook, report.exc_type, report.message)
        self.report = report


class Terminated(SystemExit):
    """Raised in a worker by ``SIGTERM``: unwind and exit, whatever runs."""


@dataclass(frozen=True)
class WorkerContext:
    """What a worker knows about itself, given to functions that ask for it.

    Attributes:
        index (int): the worker's position in the pool (``0 .. processes - 1``).
        device (str): its device, e.g. ``"cpu"`` or ``"cuda:1"``.
        cfg (Any): the pool's ``cfg``: this worker's own copy.
        context (Any): this worker's entry of ``worker_contexts`` (None without).
    """

    index: int
    device: str
    cfg: Any
    context: Any


class WorkerProgram:
    """What a worker runs besides its jobs' functions; subclass it.

    Instances are pickled into the workers, so keep them small and picklable.
    """

    def init(self, ctx: WorkerContext) -> None:
        """Run once in the worker before any chunk (raise to fail the start)."""

    def end(self, ctx: WorkerContext) -> None:
        """Run once when the worker is asked to stop."""

    def function(self, blob: Optional[bytes], ctx: WorkerContext) -> Callable[[Any], Any]:
        """Build a job's per-item function from what the caller sent.

        Args:
            blob (bytes or None): the job's function as the caller encoded it.
            ctx (WorkerContext): this worker.

        Returns:
            callable: ``item -> result``.
        """
        raise NotImplementedError

    def hook_name(self, blob: Optional[bytes]) -> str:
        """The name errors give to a job's per-item function."""
        return "task"


class RunnerProgram(WorkerProgram):
    """A runner's producer hooks: ``setup_worker`` and ``producer_init``,
    ``producer_work`` per item, ``producer_end``."""

    def __init__(self, runner_cls: Any, threads: Optional[int] = None) -> None:
        """
        Args:
            runner_cls (type): the runner class whose static hooks to call.
            threads (int or None): the worker's thread budget (set by the back-end).
        """
        self.runner_cls = runner_cls
        self.threads = threads

    @property
    def by_value(self) -> bool:
        """bool: the runner class lives in ``__main__``: send it by value (cloudpickle)."""
        return getattr(self.runner_cls, "__module__", None) in ("__main__", "__mp_main__")

    def init(self, ctx: WorkerContext) -> None:
        cls = self.runner_cls
        _call_hook("setup_worker", cls.setup_worker, ctx.device)
        _call_hook("producer_init", cls.producer_init, ctx.device, ctx.cfg)

    def end(self, ctx: WorkerContext) -> None:
        _call_hook("producer_end", self.runner_cls.producer_end, ctx.device, ctx.cfg)

    def function(self, blob: Optional[bytes], ctx: WorkerContext) -> Callable[[Any], Any]:
        work, device, cfg = self.runner_cls.producer_work, ctx.device, ctx.cfg
        return lambda item: work(device, cfg, item)

    def hook_name(self, blob: Optional[bytes]) -> str:
        return "producer_work"


def _call_hook(name: str, hook: Callable, *args: Any) -> Any:
    try:
        return hook(*args)
    except Terminated:
        raise
    except BaseException as exc:
        raise HookFailed(ErrorReport.capture(name, exc)) from None


class ProgressSlots:
    """Where each worker says which item it runs (deaths and task timeouts).

    A small shared-memory array, one slot per worker: job, chunk, item index
    and start time (``time.monotonic()``, the same clock in every process of
    a machine). A worker writes its slot when it receives a chunk (item -1)
    and then the index of every item before running it (one 8-byte store);
    jobs with a timeout also write each item's start time. The caller reads
    it, with no messages, to tell which item overran or killed its worker,
    and whether a chunk was ever received by a worker that died.
    """

    _FIELDS = 4  # job, seq, item (int64), started (float64)
    _FMT = struct.Struct("qqqd")

    def __init__(self, buffer: Any) -> None:
        self._buf = buffer
        view = memoryview(buffer)
        self._ints = view.cast("q")
        self._floats = view.cast("d")

    def write(self, slot: int, job: int, seq: int, item: int, started: float) -> None:
        """Record that ``slot``'s worker started ``item`` of chunk ``seq`` of ``job``."""
        base = slot * self._FIELDS
        ints = self._ints
        # The item first: a reader that sees the new chunk never pairs it with
        # the item of the chunk before.
        ints[base + 2] = item
        self._floats[base + 3] = started
        ints[base] = job
        ints[base + 1] = seq

    def item_cell(self, slot: int) -> Tuple[Any, int]:
        """``(cells, index)``: ``cells[index] = item`` records the item ``slot``'s
        worker starts now (one store, inlined in the loop that runs items)."""
        return self._ints, slot * self._FIELDS + 2

    def read(self, slot: int) -> Tuple[int, int, int, float]:
        """``(job, seq, item, started)`` last written to ``slot``."""
        base = slot * self._FIELDS
        ints = self._ints
        return ints[base], ints[base + 1], ints[base + 2], self._floats[base + 3]

    @classmethod
    def nbytes(cls, slots: int) -> int:
        """Bytes needed for ``slots`` slots."""
        return cls._FMT.size * max(1, slots)


class Executor:
    """Runs one worker's program and jobs; back-ends wrap it."""

    def __init__(
        self,
        program: WorkerProgram,
        ctx: WorkerContext,
        progress: Optional[ProgressSlots] = None,
    ) -> None:
        """
        Args:
            program (WorkerProgram): the init/end hooks and the job functions.
            ctx (WorkerContext): this worker (its index, device and own cfg).
            progress (ProgressSlots or None): where to say which item runs.
        """
        self.program = program
        self.ctx = ctx
        self.progress = progress
        self._jobs: Dict[int, Tuple[Callable[[Any], Any], str]] = {}

    @property
    def cfg(self) -> Any:
        """Any: this worker's cfg."""
        return self.ctx.cfg

    def init(self) -> None:
        """Run the program's init.

        Raises:
            HookFailed: it raised ([`HookFailed`][easycore.common.parallel.worker.HookFailed]).
        """
        try:
            self.program.init(self.ctx)
        except (HookFailed, Terminated):
            raise
        except BaseException as exc:
            raise HookFailed(ErrorReport.capture("init", exc)) from None

    def end(self) -> None:
        """Run the program's end.

        Raises:
            HookFailed: it raised ([`HookFailed`][easycore.common.parallel.worker.HookFailed]).
        """
        try:
            self.program.end(self.ctx)
        except (HookFailed, Terminated):
            raise
        except BaseException as exc:
            raise HookFailed(ErrorReport.capture("end", exc)) from None

    def forget(self, jobs: Any) -> None:
        """Drop the functions of finished jobs."""
        for job in jobs:
            self._jobs.pop(job, None)

    def load(self, job: int, function: Optional[bytes]) -> Tuple[Callable[[Any], Any], str]:
        """Job ``job``'s function and hook name, built from ``function`` the first time.

        Raises [`HookFailed`][easycore.common.parallel.worker.HookFailed] if it
        cannot be built.
        """
        entry = self._jobs.get(job)
        if entry is None:
            program = self.program
            name = program.hook_name(function)
            try:
                fn = program.function(function, self.ctx)
            except Terminated:
                raise
            except BaseException as exc:
                raise HookFailed(ErrorReport.capture(f"{name} (receiving it)", exc)) from None
            entry = self._jobs[job] = (fn, name)
        return entry

    def run_chunk(
        self,
        job: int,
        seq: int,
        function: Optional[bytes],
        items: List[Any],
        track_items: int = 0,
    ) -> Tuple[List[Any], List[ItemFailure]]:
        """Run ``items`` with job ``job``'s function, each in turn.

        Args:
            job (int): the job id.
            seq (int): the chunk's number in its job (for the progress slot).
            function (bytes or None): the job's function, the first time this
                worker sees the job.
            items (list): the inputs.
            track_items (int): what to write to the progress slot per item:
                0 nothing, 1 its index, 2 its index and start time (task timeouts).

        Returns:
            tuple: ``(results, failures)``: one result per item (None where it
            failed) and an [`ItemFailure`][easycore.common.parallel.protocol.ItemFailure]
            per failed item. Raises [`HookFailed`][easycore.common.parallel.worker.HookFailed]
            if the job's function cannot be built.
        """
        fn, name = self.load(job, function)
        results: List[Any] = []
        failures: List[ItemFailure] = []
        progress = self.progress
        if progress is not None and track_items:
            if track_items >= TRACK_TIMES:
                self._run_tracked(fn, name, job, seq, items, results, failures)
            else:
                cells, at = progress.item_cell(self.ctx.index)
                self._run_marked(fn, name, cells, at, items, results, failures)
            return results, failures
        append = results.append
        remaining = items
        while True:
            try:
                for item in remaining:
                    append(fn(item))
                return results, failures
            except Terminated:
                raise
            except BaseException as exc:  # this item fails alone; go on after it
                i = len(results)
                append(None)
                failures.append(ItemFailure(i, ErrorReport.capture(name, exc)))
                remaining = items[i + 1 :]

    @staticmethod
    def _run_marked(fn: Callable, name: str, cells: Any, at: int, items: List[Any],
                    results: List[Any], failures: List[ItemFailure]) -> None:
        # Each item's index before it runs (one store): if this worker dies,
        # only that item fails, and its chunk's others run elsewhere.
        append = results.append
        start = 0
        while True:
            try:
                for i, item in enumerate(items[start:] if start else items, start):
                    cells[at] = i
                    append(fn(item))
                return
            except Terminated:
                raise
            except BaseException as exc:  # this item fails alone; go on after it
                i = len(results)
                append(None)
                failures.append(ItemFailure(i, ErrorReport.capture(name, exc)))
                start = i + 1

    def _run_tracked(self, fn: Callable, name: str, job: int, seq: int, items: List[Any],
                     results: List[Any], failures: List[ItemFailure]) -> None:
        progress, slot, monotonic = self.progress, self.ctx.index, time.monotonic
        assert progress is not None
        for i, item in enumerate(items):
            progress.write(slot, job, seq, i, monotonic())
            try:
                results.append(fn(item))
            except Terminated:
                raise
            except BaseException as exc:
                results.append(None)
                failures.append(ItemFailure(i, ErrorReport.capture(name, exc)))


class WorkerSpec(NamedTuple):
    """Everything a worker process needs besides its pipes (pickled as bytes)."""

    program: WorkerProgram
    slot: int
    device: str
    cfg: Any  #: the transport's payload of the cfg
    context: Any  #: this worker's entry of worker_contexts (Pool)
    transport: Any
    progress: Optional[str]  #: shared-memory name of the progress slots


def process_main(
    spec_bytes: Optional[bytes],
    n_threads: Optional[int],
    owner_pid: int,
    start_method: str,
    tasks: Any,
    results: Any,
) -> None:
    """Entry point of a worker process.

    Args:
        spec_bytes (bytes or None): the pickled
            [`WorkerSpec`][easycore.common.parallel.worker.WorkerSpec], unpickled
            only after the thread limits are set (None: it is the first message
            on ``tasks``).
        n_threads (int or None): the thread budget (None: leave it alone).
        owner_pid (int): the process that made the runner.
        start_method (str): how this process was started.
        tasks (Connection): read end of this worker's task pipe.
        results (Connection): write end of this worker's result pipe.
    """
    # Ctrl-C reaches the whole process group; the caller decides what happens.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    interrupts.unblock_in_worker()  # blocked by the caller across the start
    signal.signal(signal.SIGTERM, _on_sigterm)
    if n_threads is not None:
        threads.set_thread_env(n_threads)  # before any library is imported here
    lifeline.arm_parent_death_signal()
    expected_ppid = os.getppid()
    if start_method == "forkserver":
        lifeline.detach_from_forkserver()
    elif expected_ppid != owner_pid:
        os._exit(EXIT_PARENT_GONE)  # the parent died before the signal was armed
    _start_watchdog(expected_ppid)

    def post(message: Any) -> None:
        results.send_bytes(pickle.dumps(message, protocol=_DUMP))

    try:
        _serve(spec_bytes, n_threads, tasks, post)
    except Terminated:
        pass  # asked to go: the interpreter's normal exit cleans up


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated(0)


def _start_watchdog(expected_ppid: int) -> None:
    def watch() -> None:
        while True:
            time.sleep(0.5)
            if lifeline.parent_gone(expected_ppid):
                os._exit(EXIT_PARENT_GONE)

    # Not threading.Thread: its start() waits until the new thread has run,
    # which on a busy machine held every worker's start up by up to tens of
    # milliseconds. A raw thread is daemonic: it never holds up the exit.
    _thread.start_new_thread(watch, ())


def _serve(spec_bytes: Optional[bytes], n_threads: Optional[int], tasks: Any,
           post: Callable) -> None:
    if spec_bytes is None:
        try:
            spec_bytes = tasks.recv_bytes()  # sent right after the start (spawn, forkserver)
        except (EOFError, OSError):
            os._exit(EXIT_PARENT_GONE)
    try:
        spec: WorkerSpec = pickle.loads(spec_bytes)
    except Terminated:
        raise  # SIGTERM: go now, whatever was being received or sent
    except BaseException as exc:
        post(WorkerFailed(None, None, _unpickling_report(exc)))
        return
    transport = spec.transport
    if n_threads is not None:
        threads.limit_threads(n_threads)  # what a fork inherited already loaded
    progress = None
    try:
        transport.bind_worker(spec.slot)
        cfg = transport.decode_cfg(spec.cfg)
        if spec.progress is not None:
            from . import shm

            progress = ProgressSlots(shm.open_existing(spec.progress, ProgressSlots.nbytes(
                spec.slot + 1)))
    except Terminated:
        raise  # SIGTERM: go now, whatever was being received or sent
    except BaseException as exc:
        post(WorkerFailed(None, None, ErrorReport.capture("receiving cfg", exc)))
        return
    executor = Executor(spec.program, WorkerContext(spec.slot, spec.device, cfg, spec.context),
                        progress)
    try:
        executor.init()
    except HookFailed as failed:
        post(WorkerFailed(None, None, failed.report))
        return
    post(WorkerReady(os.getpid()))
    data = message = None
    while True:
        # The last message (a job's function may be a big pickle) must not
        # stay alive while this worker waits for the next one.
        data = message = None
        try:
            data = tasks.recv_bytes()
        except (EOFError, OSError):
            # The caller closes the task pipe only after this worker should be
            # gone, or by dying: either way nobody needs us any more.
            os._exit(EXIT_PARENT_GONE)
        start = time.perf_counter()
        try:
            message = pickle.loads(data)
            if message.feedback is not None:
                transport.on_feedback(message.feedback)
        except Terminated:
            raise  # SIGTERM: go now, whatever was being received or sent
        except BaseException as exc:
            post(WorkerFailed(None, None, ErrorReport.capture("receiving a message", exc)))
            continue
        if type(message) is not RunChunk:  # StopWorker
            break
        if progress is not None:
            # Received, before any of its code runs (the job's function is
            # built next): a death from here on is this chunk's.
            progress.write(spec.slot, message.job, message.seq, -1, time.monotonic())
        if message.forget:
            executor.forget(message.forget)
        if message.function is not None:
            # The function before its items: code of __main__ sent by value
            # puts what it brought (its classes) in this __main__, where items
            # of those classes then find them (pickling._share_main_globals).
            try:
                executor.load(message.job, message.function)
            except HookFailed as failed:
                post(WorkerFailed(message.job, message.seq, failed.report))
                continue
        try:
            items = transport.decode_items(message.items)
        except Terminated:
            raise  # SIGTERM: go now, whatever was being received or sent
        except BaseException as exc:
            report = ErrorReport.capture("receiving items", exc)
            post(WorkerFailed(message.job, message.seq, report))
            continue
        n_items = len(items)
        working = time.perf_counter()  # insights: user code vs moving data
        try:
            out, failures = executor.run_chunk(
                message.job, message.seq, message.function, items, message.track_items
            )
            working = time.perf_counter() - working
        except HookFailed as failed:
            del items
            post(WorkerFailed(message.job, message.seq, failed.report))
            continue
        del items  # input arrays free their segments now
        try:
            try:
                payload, nbytes = transport.encode_results(out)
            except Terminated:
                raise
            except Exception:
                # Some result does not pickle: it fails alone, the others go.
                failures = failures + _drop_unencodable(out)
                payload, nbytes = transport.encode_results(out)
        except Terminated:
            raise  # SIGTERM: go now, whatever was being received or sent
        except BaseException as exc:
            del out
            report = ErrorReport.capture("sending results", exc)
            post(WorkerFailed(message.job, message.seq, report))
            continue
        del out  # results are copied out: free the originals now
        elapsed = time.perf_counter() - start
        post(ChunkDone(message.job, message.seq, payload, n_items, elapsed,
                       nbytes + len(data), failures, transport.worker_feedback(), working))
    try:
        executor.end()
    except HookFailed as failed:
        post(WorkerFailed(None, None, failed.report))
        return
    post(WorkerEnded(transport.worker_feedback()))


def _drop_unencodable(results: List[Any]) -> List[ItemFailure]:
    """Replace each result that does not pickle by None; the failures of those items."""
    failures = []
    for i, value in enumerate(results):
        try:
            # Out-of-band buffers (arrays) are not copied: only whether it pickles counts.
            pickle.dumps(value, protocol=5, buffer_callback=lambda _: True)
        except Exception as exc:
            results[i] = None
            failures.append(ItemFailure(i, ErrorReport.capture(
                "sending results", ResultEncodingError.of(exc, value))))
    return failures


def _unpickling_report(exc: BaseException) -> ErrorReport:
    report = ErrorReport.capture("starting the worker", exc)
    if isinstance(exc, (AttributeError, ImportError)):
        hint = (
            "\n\nThe worker could not import a class or function it was sent. Under the "
            "'spawn' and 'forkserver' start methods (the default for CUDA devices, and "
            "on macOS and Windows) a worker imports your modules anew: define the runner "
            "class, and what its hooks use, at the top level of a module the worker can "
            "import (on its sys.path, not deleted or renamed since), or in the script "
            "itself (code of __main__ is sent by value); or use start_method='fork' "
            "where the platform has it."
        )
        report = report._replace(message=report.message + hint)
    return report

