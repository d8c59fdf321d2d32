"""What a worker does with each message, whoever carries it.

A worker runs a *program* (its init and end hooks, and how a job's function
is built) and then chunks of *jobs*:

* [`WorkerProgram`][easycore.common.parallel.worker.executor.WorkerProgram] is the
  interface; [`RunnerProgram`][easycore.common.parallel.worker.executor.RunnerProgram]
  runs a runner's producer hooks (``setup_worker`` and ``producer_init``,
  ``producer_work`` per item, ``producer_end``). ``Pool`` brings its own.
* [`WorkerHandler`][easycore.common.parallel.worker.executor.WorkerHandler] answers the
  [`protocol`][easycore.common.parallel.worker.protocol]'s messages for one device:
  ``start()`` runs the init hooks (``WorkerReady``), ``handle(message)``
  answers a ``RunChunk`` (``ChunkDone``) or a ``StopWorker`` (``WorkerEnded``),
  and either says ``WorkerFailed`` when something raised. In between it caches
  each job's function, decodes items and encodes results with the worker half
  of a transport, marks each item in its [item slot][easycore.common.parallel.worker.slots]
  as the chunk asks, and turns every error into an ``ErrorReport`` (an item
  that raises fails alone).

The carriers (the process loop in ``worker``, the thread back-end, the Ray
actor) only move messages, and start and stop workers.
"""

from __future__ import annotations

import os
import pickle
import time

from .._named_tuples import NamedTuple
from ..errors import ErrorReport
from .protocol import (
    ChunkDone,
    ItemFailure,
    RunChunk,
    StopWorker,
    WorkerEnded,
    WorkerFailed,
    WorkerReady,
)
from .slots import MARK_INDEX, MARK_NONE, ItemSlots

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable, Dict, List, Optional, Tuple, Union

__all__ = ["WorkerHandler", "HookFailed", "PassThrough", "RunnerProgram", "Terminated",
           "WorkerContext", "WorkerProgram", "reported"]

#: what [`WorkerHandler.handle`][easycore.common.parallel.worker.executor.WorkerHandler.handle]
#: answers
Reply = ChunkDone | WorkerFailed | WorkerEnded


class HookFailed(Exception):
    """A hook raised; ``report`` describes the original exception."""

    def __init__(self, report: ErrorReport) -> None:
        super().__init__(report.hook, report.exc_type, report.message)
        self.report = report


class Terminated(SystemExit):
    """Raised in a worker by ``SIGTERM``: unwind and exit, whatever runs."""


def reported(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``; what it raises becomes a ``HookFailed`` whose report names ``what``.

    ``Terminated`` (``SIGTERM``: the worker must go now) and a ``HookFailed``
    (a report already made, naming its own hook) pass through as they are.
    """
    try:
        return fn(*args)
    except (Terminated, HookFailed):
        raise
    except BaseException as exc:  # noqa: BLE001 - user code and payloads may raise anything
        raise HookFailed(ErrorReport.capture(what, exc)) from None


class WorkerContext(NamedTuple):
    """What a worker knows about itself, given to functions that ask for it.

    A frozen record (a named tuple, whose class costs a spawned worker no
    import of ``dataclasses`` and ``inspect``; its ``index`` field hides the
    tuple's method of that name).

    Attributes:
        index (int): the worker's position in the pool (``0 .. processes - 1``).
        device (str): its device, e.g. ``"cpu"`` or ``"cuda:1"``.
        cfg (Any): the pool's ``cfg``: this worker's own copy.
        context (Any): this worker's entry of ``worker_contexts`` (None without).
    """

    index: int  # type: ignore[assignment]  # (tuple.index: see above)
    device: str
    cfg: Any
    context: Any


class WorkerProgram:
    """What a worker runs besides its jobs' functions; subclass it.

    Instances are pickled into the workers, so keep them small and picklable.
    """

    #: True when neither ``init`` nor ``end`` runs code of the user's (no hook, no
    #: initializer, no device set-up): a worker still starting when its client
    #: stops has nothing to run, and is ended at once rather than waited for
    #: (see ``ProcessBackend.stop``). Set by the client that knows; False: unknown.
    quiet: bool = False

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

    def __init__(self, runner_cls: Any, threads: Optional[int] = None,
                 quiet: bool = False) -> None:
        """
        Args:
            runner_cls (type): the runner class whose static hooks to call.
            threads (int or None): the worker's thread budget (set by the back-end).
            quiet (bool): the class overrides none of the set-up and end hooks
                (see ``WorkerProgram.quiet``).
        """
        self.runner_cls = runner_cls
        self.threads = threads
        self.quiet = quiet

    @property
    def by_value(self) -> bool:
        """bool: the runner class lives in ``__main__``: send it by value (cloudpickle)."""
        return getattr(self.runner_cls, "__module__", None) in ("__main__", "__mp_main__")

    def init(self, ctx: WorkerContext) -> None:
        cls = self.runner_cls
        reported("setup_worker", cls.setup_worker, ctx.device)
        reported("producer_init", cls.producer_init, ctx.device, ctx.cfg)

    def end(self, ctx: WorkerContext) -> None:
        reported("producer_end", self.runner_cls.producer_end, ctx.device, ctx.cfg)

    def function(self, blob: Optional[bytes], ctx: WorkerContext) -> Callable[[Any], Any]:
        work, device, cfg = self.runner_cls.producer_work, ctx.device, ctx.cfg
        return lambda item: work(device, cfg, item)

    def hook_name(self, blob: Optional[bytes]) -> str:
        return "producer_work"


class PassThrough:
    """The worker half of a transport that hands objects over as they are
    (threads; Ray, whose object store moves them)."""

    def on_feedback(self, data: Any) -> None:
        """Nothing to learn from the caller."""

    def decode_items(self, payload: Any) -> List[Any]:
        """The items themselves."""
        return payload

    def encode_results(self, results: List[Any]) -> Tuple[Any, int]:
        """The results themselves; no bytes moved."""
        return results, 0

    def worker_feedback(self) -> Any:
        """Nothing to tell the caller."""
        return None


class WorkerHandler:
    """Answers one worker's messages: its program's hooks and its jobs' chunks."""

    def __init__(
        self,
        program: WorkerProgram,
        ctx: WorkerContext,
        slots: Optional[ItemSlots] = None,
        transport: Any = None,
    ) -> None:
        """
        Args:
            program (WorkerProgram): the init/end hooks and the job functions.
            ctx (WorkerContext): this worker (its index, device and own cfg).
            slots (ItemSlots or None): where to say which item runs (its slot
                is ``ctx.index``); None: nowhere.
            transport (Transport or None): decodes items and encodes results
                on the worker's side (its ``decode_items``, ``encode_results``,
                ``on_feedback`` and ``worker_feedback``); None: a
                [`PassThrough`][easycore.common.parallel.worker.executor.PassThrough].
        """
        self.program = program
        self.ctx = ctx
        self.slots = slots
        self.transport = PassThrough() if transport is None else transport
        self._jobs: Dict[int, Tuple[Callable[[Any], Any], str]] = {}

    @property
    def cfg(self) -> Any:
        """Any: this worker's cfg."""
        return self.ctx.cfg

    # ------------------------------------------------------------- messages
    def start(self) -> Union[WorkerReady, WorkerFailed]:
        """Run the program's init hooks.

        Returns:
            WorkerReady or WorkerFailed: the answer to send the caller.
        """
        try:
            self.init()
        except HookFailed as failed:
            return WorkerFailed(None, None, failed.report)
        return WorkerReady(os.getpid())

    def handle(self, message: Union[RunChunk, StopWorker], received: Optional[float] = None,
               nbytes: int = 0) -> Reply:
        """Answer one message from the caller.

        Args:
            message (RunChunk or StopWorker): what the caller sent.
            received (float or None): ``time.perf_counter()`` when it arrived
                (None: now), so that ``ChunkDone.seconds`` counts its reading.
            nbytes (int): the bytes it arrived in, counted in ``ChunkDone.nbytes``.

        Returns:
            ChunkDone, WorkerFailed or WorkerEnded: the answer to send the
            caller. After a ``StopWorker`` the worker exits, whatever the answer.
        """
        if received is None:
            received = time.perf_counter()
        if message.feedback is not None:
            try:
                reported("receiving a message", self.transport.on_feedback, message.feedback)
            except HookFailed as failed:
                return WorkerFailed(None, None, failed.report)
        if type(message) is not RunChunk:  # StopWorker
            try:
                self.end()
            except HookFailed as failed:
                return WorkerFailed(None, None, failed.report)
            return WorkerEnded(self.transport.worker_feedback())
        try:
            return self._chunk(message, received, nbytes)
        except HookFailed as failed:
            return WorkerFailed(message.job, message.seq, failed.report)

    def _chunk(self, message: RunChunk, received: float, nbytes: int) -> ChunkDone:
        job, seq, function = message.job, message.seq, message.function
        if self.slots is not None:
            # Received, before any of its code runs (the job's function is
            # built next): a death from here on is this chunk's.
            self.slots.write(self.ctx.index, job, seq, -1, time.monotonic())
        if message.forget:
            self.forget(message.forget)
        if function is not None:
            # The function before its items: code of __main__ sent by value
            # puts what it brought (its classes) in this __main__, where items
            # of those classes then find them (pickling._share_main_globals).
            self.load(job, function)
        transport = self.transport
        items = reported("receiving items", transport.decode_items, message.items)
        n_items = len(items)
        working = time.perf_counter()  # insights: user code vs moving data
        out, failures = self.run_chunk(job, seq, function, items, message.mark)
        working = time.perf_counter() - working
        del items  # input arrays free their segments now
        try:
            payload, sent = transport.encode_results(out)
        except Exception:  # noqa: BLE001 - a result's pickling may raise anything
            # Some result does not pickle: it fails alone, the others go.
            failures = failures + _drop_unencodable(out)
            payload, sent = reported("sending results", transport.encode_results, out)
        del out  # results are copied out: free the originals now
        return ChunkDone(job, seq, payload, n_items, time.perf_counter() - received,
                         sent + nbytes, failures, transport.worker_feedback(), working)

    # ------------------------------------------------------------ the steps
    def init(self) -> None:
        """Run the program's init.

        Raises:
            HookFailed: it raised
                ([`HookFailed`][easycore.common.parallel.worker.executor.HookFailed]).
        """
        reported("init", self.program.init, self.ctx)

    def end(self) -> None:
        """Run the program's end.

        Raises:
            HookFailed: it raised
                ([`HookFailed`][easycore.common.parallel.worker.executor.HookFailed]).
        """
        reported("end", self.program.end, self.ctx)

    def forget(self, jobs: Any) -> None:
        """Drop the functions of finished jobs."""
        for job in jobs:
            self._jobs.pop(job, None)

    def load(self, job: int, function: Optional[bytes]) -> Tuple[Callable[[Any], Any], str]:
        """Job ``job``'s function and hook name, built from ``function`` the first time.

        Raises [`HookFailed`][easycore.common.parallel.worker.executor.HookFailed] if it
        cannot be built.
        """
        entry = self._jobs.get(job)
        if entry is None:
            program = self.program
            name = program.hook_name(function)
            fn = reported(f"{name} (receiving it)", program.function, function, self.ctx)
            entry = self._jobs[job] = (fn, name)
        return entry

    def run_chunk(
        self,
        job: int,
        seq: int,
        function: Optional[bytes],
        items: List[Any],
        mark: int = MARK_NONE,
    ) -> Tuple[List[Any], List[ItemFailure]]:
        """Run ``items`` with job ``job``'s function, each in turn.

        Args:
            job (int): the job id.
            seq (int): the chunk's number in its job (for the item slot).
            function (bytes or None): the job's function, the first time this
                worker sees the job.
            items (list): the inputs.
            mark (int): what to write to the item slot per item (see
                [`slots`][easycore.common.parallel.worker.slots]): ``MARK_NONE``,
                ``MARK_INDEX`` or ``MARK_TIMES``.

        Returns:
            tuple: ``(results, failures)``: one result per item (None where it
            failed) and an [`ItemFailure`][easycore.common.parallel.worker.protocol.ItemFailure]
            per failed item. Raises
            [`HookFailed`][easycore.common.parallel.worker.executor.HookFailed]
            if the job's function cannot be built.
        """
        fn, name = self.load(job, function)
        run = self._item_loop(job, seq, mark)
        results: List[Any] = []
        failures: List[ItemFailure] = []
        append = results.append
        start = 0
        while True:
            try:
                run(fn, items, start, append)
                return results, failures
            except Terminated:
                raise  # SIGTERM: unwind, whatever item runs
            except BaseException as exc:  # noqa: BLE001 - an item's error fails that item alone
                failures.append(ItemFailure(len(results), ErrorReport.capture(name, exc)))
                append(None)
                start = len(results)  # go on after it

    def _item_loop(self, job: int, seq: int, mark: int) -> Callable[..., None]:
        """The loop that runs ``items[start:]`` for ``mark``: one per kind of
        marking, so that unmarked items pay for no store at all (one store per
        item cost a quarter of the time of the tiniest items)."""
        slots = self.slots
        if slots is None or mark == MARK_NONE:
            return _run_items
        if mark == MARK_INDEX:
            cells, at = slots.item_cell(self.ctx.index)

            def run_marked(fn: Callable, items: List[Any], start: int, append: Callable) -> None:
                # Each item's index before it runs (one store): if this worker
                # dies, only that item fails, and its chunk's others run elsewhere.
                for i, item in enumerate(items[start:] if start else items, start):
                    cells[at] = i
                    append(fn(item))

            return run_marked
        write, slot, clock = slots.write, self.ctx.index, time.monotonic

        def run_timed(fn: Callable, items: List[Any], start: int, append: Callable) -> None:
            for i, item in enumerate(items[start:] if start else items, start):
                write(slot, job, seq, i, clock())  # the item's deadline starts now
                append(fn(item))

        return run_timed


def _run_items(fn: Callable, items: List[Any], start: int, append: Callable) -> None:
    for item in items[start:] if start else items:
        append(fn(item))


def _drop_unencodable(results: List[Any]) -> List[ItemFailure]:
    """Replace each result that does not pickle by None; the failures of those items."""
    failures = []
    for i, value in enumerate(results):
        try:
            # Out-of-band buffers (arrays) are not copied: only whether it pickles counts.
            pickle.dumps(value, protocol=5, buffer_callback=lambda _: True)
        except Exception as exc:  # noqa: BLE001 - a value's __reduce__ may raise anything
            from ..pool_errors import ResultEncodingError  # (rare: imported when needed)

            results[i] = None
            failures.append(ItemFailure(i, ErrorReport.capture(
                "sending results", ResultEncodingError.of(exc, value))))
    return failures
