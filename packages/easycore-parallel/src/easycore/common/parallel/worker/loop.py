"""The loop of a worker process: it carries messages, the executor answers them.

[`process_main`][easycore.common.parallel.worker.loop.process_main] is the entry
point of a worker process. It reads [`protocol`][easycore.common.parallel.worker.protocol]
messages from its task pipe in the main thread (no relay thread between the
pipe and the work), hands each to its
[`WorkerHandler`][easycore.common.parallel.worker.executor.WorkerHandler], and sends the answer
back on its result pipe. What is the process's own: the
[`WorkerSpec`][easycore.common.parallel.worker.loop.WorkerSpec] it is sent (its
program, cfg, transport and item slots), the pipes, and its signals.

A worker process limits its thread pools before it unpickles anything (see
[`threads`][easycore.common.parallel._os.threads]), dies with its parent
([`lifeline`][easycore.common.parallel._os.lifeline]), ignores Ctrl-C (the
caller decides), and on ``SIGTERM`` (how the caller ends a worker after a
failure) exits through the interpreter's normal shutdown, which ends the
daemonic processes it started (a ``spawn`` worker's shutdown skips the
collections over what it made: see ``_exit_without_collecting``). A
``SIGTERM`` that lands where Python ignores exceptions (a weakref callback, a
``__del__``, as an import releases its module lock) is sent again rather than
printed as "Exception ignored" and lost.
"""

from __future__ import annotations

import _thread
import contextlib
import functools
import os
import pickle
import select
import signal
import sys
import time

from .._named_tuples import NamedTuple
from .._os import heap, interrupts, lifeline, spin, stacks, threads
from ..errors import ErrorReport
from .executor import HookFailed, Terminated, WorkerContext, WorkerHandler, WorkerProgram, reported
from .protocol import RunChunk, WorkerFailed
from .slots import ItemSlots

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable, Optional

__all__ = ["WorkerSpec", "process_main"]

#: exit code of a worker that found its parent gone
EXIT_PARENT_GONE = 75
_DUMP = pickle.HIGHEST_PROTOCOL


class WorkerSpec(NamedTuple):
    """Everything a worker process needs besides its pipes (pickled as bytes)."""

    program: WorkerProgram
    slot: int
    device: str
    cfg: Any  #: the transport's payload of the cfg
    context: Any  #: this worker's entry of worker_contexts (Pool)
    transport: Any
    #: the item slots: a shared-memory segment's name, or (``fork``) the mapping
    #: itself, inherited (see ``ProcessBackend._inherit_item_slots``)
    item_slots: Any


def process_main(
    spec_bytes: Optional[bytes],
    n_threads: Optional[int],
    owner_pid: int,
    start_method: str,
    tasks: Any,
    results: Any,
    stack_file: Optional[str] = None,
) -> None:
    """Entry point of a worker process.

    Args:
        spec_bytes (bytes or None): the pickled
            [`WorkerSpec`][easycore.common.parallel.worker.loop.WorkerSpec], unpickled
            only after the thread limits are set (None: it is the first message
            on ``tasks``).
        n_threads (int or None): the thread budget (None: leave it alone).
        owner_pid (int): the process that made the runner.
        start_method (str): how this process was started.
        tasks (Connection): read end of this worker's task pipe.
        results (Connection): write end of this worker's result pipe.
        stack_file (str or None): the caller's dump file: this worker's stacks
            go there when it is asked (see ``_os.stacks``).
    """
    heap.freeze_inherited()  # its collections leave what it started with alone
    # Ctrl-C reaches the whole process group; the caller decides what happens.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    interrupts.unblock_in_worker()  # blocked by the caller across the start
    signal.signal(signal.SIGTERM, _on_sigterm)
    # Before anything that may hang (unpickling the spec imports user code).
    stacks.install(stack_file)
    sys.unraisablehook = _unraisable_hook(sys.unraisablehook)
    if n_threads is not None:
        threads.set_thread_env(n_threads)  # before any library is imported here
    armed = lifeline.arm_parent_death_signal()
    expected_ppid = os.getppid()
    if start_method == "forkserver":
        lifeline.detach_from_forkserver()
    elif expected_ppid != owner_pid:
        os._exit(EXIT_PARENT_GONE)  # the parent died before the signal was armed
    if not armed:
        # Where the kernel's signal is armed (Linux) it does the watchdog's job, and
        # better; a thread here would make every fork in this worker (a pool of its
        # own) a fork from a multi-threaded process, which CPython 3.12+ warns of.
        _start_watchdog(expected_ppid)
    if start_method != "fork":
        from ..transport import shm

        # The standard library hands a spawn or forkserver child its caller's
        # tracker: this worker may register segments of its own with it.
        shm.tracker_shared()

    def post(message: Any) -> None:
        results.send_bytes(pickle.dumps(message, protocol=_DUMP))

    # Terminated: asked to go; the interpreter's normal exit cleans up.
    with contextlib.suppress(Terminated):
        _serve(spec_bytes, n_threads, tasks, post)
    if start_method == "spawn":
        _exit_without_collecting()


def _exit_without_collecting() -> None:
    """Spare a spawned worker's exit the garbage collector's passes over everything it made.

    A ``fork`` or ``forkserver`` worker ends with ``os._exit``, as the standard
    library ends it; a ``spawn`` worker ends through the interpreter's normal
    shutdown, whose collections visit every object of its ~170 modules: 4-5 ms
    on the 2-core VM, for which a caller's ``close`` (and ``terminate``)
    waited. Frozen (``gc.freeze``), those objects are left out of the
    collections: the shutdown still runs every ``atexit`` handler, clears the
    modules and frees what references free, in the same order; only garbage in
    reference cycles, which a process about to end would drop anyway, is not
    collected again.
    """
    import gc

    gc.freeze()


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated(0)


def _unraisable_hook(previous: Callable[[Any], Any]) -> Callable[[Any], None]:
    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, Terminated):
            # Raised where Python ignores exceptions (a weakref callback, a
            # __del__): the worker would run on until the caller's SIGKILL.
            # Sent again from another thread, it is raised where the main
            # thread runs next (sent from here, it would be raised in here).
            # The thread may send it before this hook returns (the main thread
            # descheduled on a busy machine): raised in here, an exception is
            # lost again ("Exception ignored in sys.unraisablehook"), so the
            # whole of what is left of the hook is in the ``try``, and a
            # signal that lands in it is sent once more.
            while True:
                try:
                    _thread.start_new_thread(os.kill, (os.getpid(), signal.SIGTERM))
                    return
                except Terminated:
                    pass
        previous(unraisable)

    return hook


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


def _receive(tasks: Any) -> bytes:
    try:
        return tasks.recv_bytes()
    except (EOFError, OSError):
        # The caller closes the task pipe only after this worker should be
        # gone, or by dying: either way nobody needs us any more.
        os._exit(EXIT_PARENT_GONE)


def _serve(spec_bytes: Optional[bytes], n_threads: Optional[int], tasks: Any,
           post: Callable[[Any], None]) -> None:
    if spec_bytes is None:
        spec_bytes = _receive(tasks)  # sent right after the start (spawn, forkserver)
    try:
        executor = _executor(spec_bytes, n_threads)
    except HookFailed as failed:
        post(WorkerFailed(None, None, failed.report))
        return
    ready = executor.start()
    post(ready)
    if type(ready) is WorkerFailed:
        return
    # One call after another (each a job of one chunk): the next comes within
    # microseconds of this one's result, so look for it for a moment before
    # sleeping (see ``_os.spin``). Not within a job's stream of chunks: the
    # next one is queued already, or the caller is busy, and a spinning worker
    # would take the CPU it needs.
    spinner = spin.Spinner(_spin_budget())
    poller = select.poll()
    poller.register(tasks.fileno(), select.POLLIN)
    ready_now = functools.partial(poller.poll, 0)
    last_job, spin_next = None, False
    while True:
        # The last message (a job's function may be a big pickle) must not
        # stay alive while this worker waits for the next one.
        data = message = None
        if spin_next:
            spinner.wait(ready_now, poller.poll, None)
        data = _receive(tasks)
        received = time.perf_counter()
        try:
            message = reported("receiving a message", pickle.loads, data)
        except HookFailed as failed:
            post(WorkerFailed(None, None, failed.report))
            continue
        post(executor.handle(message, received, len(data)))
        if type(message) is not RunChunk:  # StopWorker: answered, this worker exits
            return
        spin_next, last_job = message.job != last_job, message.job


def _spin_budget() -> float:
    try:
        return spin.budget()
    except ValueError:  # the caller said so before it started this worker
        return 0.0


def _executor(spec_bytes: bytes, n_threads: Optional[int]) -> WorkerHandler:
    """The executor that the pickled ``WorkerSpec`` describes, its transport bound."""
    try:
        spec: WorkerSpec = pickle.loads(spec_bytes)
    except Terminated:
        raise  # SIGTERM: go now, whatever was being received
    except BaseException as exc:  # noqa: BLE001 - unpickling imports user code: anything
        raise HookFailed(_unpickling_report(exc)) from None
    if n_threads is not None:
        threads.limit_threads(n_threads)  # what a fork inherited already loaded
    transport = spec.transport

    def receive_cfg() -> WorkerHandler:
        transport.bind_worker(spec.slot)
        cfg = transport.decode_cfg(spec.cfg)
        slots = None
        if isinstance(spec.item_slots, str):
            from ..transport import shm

            slots = ItemSlots(shm.open_existing(spec.item_slots, ItemSlots.nbytes(spec.slot + 1)))
        elif spec.item_slots is not None:
            slots = ItemSlots(spec.item_slots)
        ctx = WorkerContext(spec.slot, spec.device, cfg, spec.context)
        return WorkerHandler(spec.program, ctx, slots, transport)

    return reported("receiving cfg", receive_cfg)


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
