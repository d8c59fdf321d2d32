"""The process back-end: one worker process per device, two pipes each.

Why pipes per worker rather than a shared queue: a shared queue's lock is
left held (and its stream torn) when a worker dies in the middle of a read,
which is how classic pools hang. Here each worker owns its task and result
pipes, and the caller waits on every result pipe *and* every process
sentinel at once, so a hook's error or a worker's death is seen the moment it
happens ([`multiplexer`][easycore.common.parallel.backends.multiplexer]).

Sends never block: the caller's end of each task pipe is non-blocking, and
what a busy worker's pipe cannot take yet waits in a buffer that the polling
thread flushes. So the caller can always read results, and a worker blocked
writing results can never wait on a caller blocked writing tasks.

Workers are not daemonic (a producer may start its own processes, e.g. data
loader workers); a ``multiprocessing.util.Finalize`` kills them at
interpreter exit, before multiprocessing would join them, and when the
back-end is garbage-collected without being stopped. Workers die with the
caller's process ([`lifeline`][easycore.common.parallel._os.lifeline]). Ending
after a failure is ``SIGTERM`` first (the worker exits through the
interpreter's shutdown, which ends the daemonic processes it started), then
``SIGKILL`` for the worker and every process below it.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import signal
import struct
import threading
import time
from multiprocessing import util
from multiprocessing.context import BaseContext

from .._os import heap, inherit, lifeline, memory, oom, spin, stacks, startup, threads, zygote
from .._os.memory import Reading
from .._os.stacks import Stack
from ..errors import WorkerDiedError, WorkerError
from ..options import check_options
from ..transport import shm
from ..transport.interface import Transport
from ..transport.pickling import dumps_either
from ..worker.loop import WorkerSpec, process_main
from ..worker.protocol import StopWorker, WorkerEnded, WorkerFailed, WorkerReady
from ..worker.slots import ItemSlot, ItemSlots
from .base import Backend, BackendSpec, ChannelBroken, WorkerExited, startup_error, wait_ended
from .multiplexer import Multiplexer
from .process_handle import WorkerHandle, kill_all, quietly

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

__all__ = ["ProcessBackend"]

_DUMP = pickle.HIGHEST_PROTOCOL


def _dump_spec(spec: WorkerSpec, main: Optional[inherit.MainCode] = None) -> bytes:
    """Pickle a worker's spec; code from ``__main__`` also goes by value (cloudpickle).

    A runner class defined in a notebook, in stdin or under ``if __name__ ==
    "__main__":`` cannot be imported by a worker started with ``spawn`` or
    ``forkserver``: sent by value, it needs not be. Where the worker can find
    it, it takes it by reference, see
    [`dumps_either`][easycore.common.parallel.transport.pickling.dumps_either].
    """
    if getattr(spec.program, "by_value", False):
        return dumps_either(spec, main)
    return pickle.dumps(spec, protocol=_DUMP)


def _frame(data: bytes) -> bytes:
    """``data`` framed as ``multiprocessing.connection`` frames it (for recv_bytes)."""
    n = len(data)
    if n > 0x7FFFFFFF:
        return struct.pack("!i", -1) + struct.pack("!Q", n) + data
    return struct.pack("!i", n) + data


def _zygote_worker(owner_pid: int, fds: List[int], spec_bytes: bytes, n_threads: Optional[int],
                   stack_file: Optional[str]) -> None:
    """A replacement worker's entry point in a child of the back-end's zygote."""
    from multiprocessing.connection import Connection

    task_r, res_w = fds
    process_main(spec_bytes, n_threads, owner_pid, "fork", Connection(task_r, writable=False),
                 Connection(res_w, readable=False), stack_file)


class ProcessBackend(Backend):
    """Runs each device's worker in its own process."""

    #: longest single wait, so that signals are handled promptly
    tick = 0.25
    #: seconds a worker gets to exit after SIGTERM before it is killed
    term_grace = 0.5
    measures_memory = memory.AVAILABLE
    takes_no_cfg = True

    def __init__(
        self,
        spec: BackendSpec,
        context: BaseContext,
        transport: Transport,
    ) -> None:
        """
        Args:
            spec (BackendSpec): the program, devices, cfg, policy and options.
            context (BaseContext): the multiprocessing context to start workers with.
            transport (Transport): how items and results travel.
        """
        self.devices = list(spec.devices)
        self.transport = transport
        self._spec = spec
        self._ctx = context
        self._method = context.get_start_method()
        self._handles: List[WorkerHandle] = []
        self._by_slot: Dict[int, WorkerHandle] = {}
        self._mux: Optional[Multiplexer] = None  # made by start
        self._poll_lock = threading.RLock()
        self._cfg_payload: Any = None
        self._item_slots_name: Optional[str] = None
        self._item_slots: Optional[ItemSlots] = None
        self._item_slots_ref: Optional[inherit.Inherited] = None  # fork: the inherited mapping
        self._finalizer: Any = None
        self._closed = False
        # Under fork the program (and what it holds: a target's object, an
        # initializer's arguments) is inherited, not pickled: see ``inherit``.
        self._program_ref: Optional[inherit.Inherited] = None
        self._zygote: Optional[zygote.Zygote] = None  # forks replacements (fork only)
        self._first_from_zygote = False  # and the first workers too (see _launch)
        self._launched = False
        if self._method == "forkserver":
            # Now, not at the first worker's start: the server (a fresh
            # interpreter) boots while the client sets up its engine and results.
            # The tracker first: the standard library's start of it unblocks
            # SIGINT, which must stay blocked while the server starts.
            shm.ensure_tracker()
            startup.start_forkserver(context)

    @classmethod
    def from_spec(cls, spec: BackendSpec, **options: Any) -> ProcessBackend:
        """As ``Backend.from_spec``; the process back-end takes no options and asks
        the spec's device policy for its start method and transport."""
        check_options("process", options, ())
        policy = spec.policy
        method = policy.start_method(spec.devices, spec.start_method, spec.threads)
        return cls(spec, policy.mp_context(method), policy.make_transport())

    @property
    def start_method(self) -> str:
        """str: how the workers are started ("fork", "spawn" or "forkserver")."""
        return self._method

    # ----------------------------------------------------------------- start
    def start(self) -> None:
        self._start(len(self.devices))

    def start_first(self) -> List[bool]:
        """Start every worker, but return once one is ready (or raise if one fails first).

        The others report ``WorkerReady`` through [`poll`][easycore.common.parallel.Backend.poll]
        when their init hooks return: work can go to the first one meanwhile.

        Returns:
            list[bool]: per slot, whether that worker is ready now.
        """
        self._start(1)
        return [self._by_slot[s].ready for s in range(len(self.devices))]

    def start_nowait(self) -> List[bool]:
        """Start every worker and return: a worker's task pipe holds what it is
        sent until its init hooks returned, then it reads it in order.

        At once only under ``fork``, where a worker inherits its program and
        starts in milliseconds. A spawned one imports it (the runner class,
        its module), which can fail: this returns once one worker is ready,
        as ``start_first`` does (an import that fails everywhere fails the
        start), and the others take work as their ``WorkerReady`` comes.

        Returns:
            list[bool]: per slot, whether that worker may be given work now.
        """
        if self._method == "fork":
            self._start(0)
            return [True] * len(self.devices)
        return self.start_first()

    def launch(self) -> None:
        """Start the workers now where each start is a fresh interpreter's (``spawn``,
        ``forkserver``): they boot while the client builds its engine (not ``fork``)."""
        if self._method != "fork" and not self._launched and not self._closed:
            self._launch()

    def _start(self, wait_for: int) -> None:
        if not self._launched:
            self._launch()
        try:
            # A whole batch is handled each time: what came with the awaited
            # WorkerReady (another's failure) is not left unread.
            while sum(h.ready for h in self._by_slot.values()) < wait_for:
                for slot, message in self.poll(None):
                    error = startup_error(self, slot, message, self._by_slot[slot].pid)
                    if error is not None:
                        raise error
        except BaseException:
            self.abort()
            raise

    def _launch(self) -> None:
        startup.check_main_guard()  # a worker importing a script without the guard: exits
        spin_seconds = spin.budget()  # a bad EASYCORE_SPIN_US: said before anything starts
        if self._method != "fork":
            # The standard library starts the resource tracker for these workers
            # anyway; started now, the workers get names for segments of their own
            # from the first message (see ``shm.ensure_tracker``).
            shm.ensure_tracker()
        self.transport.prepare()
        self.main_code = inherit.main_code(forked=self._method == "fork")
        zygote_last: Optional[Set[int]] = None  # the caller's descriptors its zygote keeps
        if self._method == "fork":
            zygote.settle_ended_threads()  # a thread just joined: its end, before any fork
            heap.before_fork()  # what was made so far is old at the fork (see _os.heap)
            self._program_ref = inherit.keep(self._spec.program)
            if self._spec.item_slots:
                self._inherit_item_slots()
            if self._spec.threads is not None:
                from multiprocessing import popen_fork  # noqa: F401 (a fork's, before the scan)

                threads.prepare_fork()  # the zygote, and the replacements it forks, inherit it
                # A worker limiting an OpenBLAS it cannot shrink at rest would start
                # (and spin) every core's thread: the zygote limits it once instead,
                # and forks the first workers too.
                self._first_from_zygote = threads.restarts_openblas_in_children(
                    self._spec.threads)
            if self._first_from_zygote:
                self._start_zygote(())
        self._arm_finalizer()
        try:
            self._cfg_payload = self.transport.encode_cfg(self._spec.cfg)
            if self._spec.item_slots and self._item_slots is None and shm.AVAILABLE:
                name = f"/{shm.make_prefix('ecs')}p"
                with contextlib.suppress(shm.SharedMemoryFull):  # full: timeouts count per chunk
                    self._item_slots = ItemSlots(shm.create(name, ItemSlots.nbytes(
                        len(self.devices))))
                    self._item_slots_name = name
                    self._item_slots.clear(len(self.devices))
                    self._arm_finalizer()
            if self._method == "fork" and self._zygote is None:
                # The zygote is forked right after the first workers, which boot
                # meanwhile, not before them. It closes what was made for them
                # (their pipes, the multiplexer's): what it keeps of the caller
                # is what it would have kept forked here.
                zygote_last = zygote.open_fds()
                if zygote_last is None:  # (no listing of them here) first, as before
                    self._start_zygote(())
                elif self._spec.threads is not None:
                    threads.prepare_fork()  # (a length comparison, unless cfg imported)
            self._mux = Multiplexer(spin_seconds)
            oom_base = oom.kills()  # (once: a read of /proc/vmstat per worker added up)
            for slot in range(len(self.devices)):
                self._start_one(slot, oom_base)
            if zygote_last is not None:
                self._start_zygote(sorted(zygote.open_fds(since=zygote_last) or ()))
        except BaseException:
            self.abort()
            raise
        self._launched = True

    def _start_zygote(self, close: Sequence[int]) -> None:
        """Fork the zygote, which closes ``close`` (its copies) first."""
        try:
            self._zygote = zygote.Zygote(self._ctx, startup.start_worker, self._spec.threads,
                                         close)
        except BaseException:
            self._release_inherited()
            raise
        if self._finalizer is not None:
            self._arm_finalizer()  # which closes the zygote too
        if self._spec.threads is not None and not self._handles:
            # Starting the zygote imported a module or two (pure Python): the
            # scan is refreshed here, once, so that each first worker's check
            # of it is a length comparison, not a walk of sys.modules (which,
            # just after a fork, costs every worker its copy-on-write faults).
            # (Forked after them, the zygote has no first workers to come.)
            threads.prepare_fork()

    def _arm_finalizer(self) -> None:
        """(Re)make the finalizer that kills and reaps what this back-end started."""
        if self._finalizer is not None:
            self._finalizer.cancel()
        self._finalizer = util.Finalize(
            self, kill_all, args=(self._handles, self.transport, self._item_slots_name,
                                   self._inherited(), self._zygote), exitpriority=10
        )

    def _inherit_item_slots(self) -> None:
        """Item slots for forked workers: an anonymous shared mapping made before the
        zygote, which every worker forked from here or from the zygote inherits.

        It has no name, so nothing can leak it and no resource tracker needs to
        know it (a tracker is a whole interpreter to start): it goes with the
        last process that maps it.
        """
        mm = mmap.mmap(-1, ItemSlots.nbytes(len(self.devices)))
        self._item_slots = ItemSlots(mm)
        self._item_slots.clear(len(self.devices))
        self._item_slots_ref = inherit.keep(mm)

    def _inherited(self) -> Tuple[inherit.Inherited, ...]:
        return tuple(r for r in (self._program_ref, self._item_slots_ref) if r is not None)

    def _release_inherited(self) -> None:
        for ref in self._inherited():
            inherit.release(ref)

    def _start_one(self, slot: int, oom_base: Optional[int], replacement: bool = False) -> None:
        spec = self._spec
        task_r, task_w = self._ctx.Pipe(duplex=False)
        res_r, res_w = self._ctx.Pipe(duplex=False)
        context = spec.contexts[slot] if spec.contexts is not None else None
        program: Any = spec.program if self._program_ref is None else self._program_ref
        slots = self._item_slots_ref if self._item_slots_ref is not None else self._item_slots_name
        worker_spec = WorkerSpec(program, slot, self.devices[slot], self._cfg_payload, context,
                                 self.transport, slots)
        spec_bytes = _dump_spec(worker_spec, self.main_code)
        # Under fork the worker inherits the bytes with the Process object. A spawned one
        # would get them inside its start, written by Process.start() while the caller
        # waits for the child to boot and read them: sent through the task pipe instead
        # (non-blocking, flushed by poll), every worker boots at once.
        inherited = self._method == "fork"
        forker = self._zygote if replacement or self._first_from_zygote else None  # (or None: here)
        dump = stacks.DumpFile(inherited and forker is None) if stacks.AVAILABLE else None
        stack_file = dump.path if dump is not None else None
        name = f"easycore-parallel-{slot}[{self.devices[slot]}]"
        h = WorkerHandle(slot, self.devices[slot], None, task_w, res_r, dump, oom_base)
        self._handles.append(h)
        self._by_slot[slot] = h
        try:
            if forker is not None:
                # A replacement: this process runs threads by now (CPython 3.12+
                # warns about a fork here, rightly). Either way the zygote forks it.
                with contextlib.suppress(zygote.ZygoteGone):  # else from here, as before
                    h.process = forker.fork(
                        _zygote_worker, (spec_bytes, spec.threads, stack_file),
                        [task_r.fileno(), res_w.fileno()], name)
            if h.process is None:
                h.process = process = self._ctx.Process(  # type: ignore[attr-defined]
                    target=process_main,
                    args=(spec_bytes if inherited else None, spec.threads, os.getpid(),
                          self._method, task_r, res_w, stack_file),
                    name=name, daemon=False,
                )
                startup.start_worker(process, self._method, h.device, slot)
        finally:
            # The worker's ends must live only in the worker: then its death
            # shows as EOF / EPIPE, and later forks do not inherit them.
            task_r.close()
            res_w.close()
        h.pid = h.process.pid
        os.set_blocking(h.task_fd, False)
        with self._poll_lock:
            assert self._mux is not None
            self._mux.watch(slot, res_r.fileno(), h.process.sentinel)
        if not inherited:
            with contextlib.suppress(ChannelBroken):  # it died at once: poll reports its exit
                self._send_frame(slot, _frame(spec_bytes))

    # ------------------------------------------------------------- messages
    def send(self, worker: int, message: Any) -> None:
        self._send_frame(worker, _frame(pickle.dumps(message, protocol=_DUMP)))

    def _send_frame(self, worker: int, frame: bytes) -> None:
        h = self._by_slot.get(worker)
        if h is None:
            raise ChannelBroken(f"worker {worker} does not exist")
        with h.lock:
            if h.closed or h.gone:
                raise ChannelBroken(f"worker {worker} on device {h.device!r} is gone")
            if not h.out:
                try:
                    n = os.write(h.task_fd, frame)
                except BlockingIOError:
                    n = 0
                except OSError as exc:
                    raise ChannelBroken(
                        f"cannot send to worker {worker} on device {h.device!r}: {exc}"
                    ) from exc
                if n == len(frame):
                    return
                frame = frame[n:]
            h.out += frame
        assert self._mux is not None
        self._mux.want_write(worker)  # the polling thread flushes it when the pipe has room

    def _flush(self, h: WorkerHandle) -> bool:
        """Write what the pipe takes; True when the buffer is empty."""
        with h.lock:
            if h.closed or h.gone:
                h.out.clear()
                return True
            try:
                n = os.write(h.task_fd, h.out)
            except BlockingIOError:
                return False
            except OSError:
                h.out.clear()  # the worker is gone; its exit is reported
                return True
            del h.out[:n]
            return not h.out

    def wakeup(self) -> None:
        mux = self._mux
        if mux is not None:
            mux.wakeup()

    def poll(self, timeout: Optional[float]) -> List[Tuple[int, Any]]:
        with self._poll_lock:
            return self._poll(timeout)

    def _poll(self, timeout: Optional[float]) -> List[Tuple[int, Any]]:
        mux = self._mux
        if mux is None or self._closed:
            return []
        # Never block for long: a Ctrl-C delivered to another thread only
        # reaches this one when it next runs Python code.
        tick = self.tick if timeout is None else max(0.0, min(timeout, self.tick))
        out: List[Tuple[int, Any]] = []
        for kind, slot in mux.select(tick, self._flush_slot, self._task_fd, self.spin_in_poll):
            h = self._by_slot[slot]
            # On an exit, what it said before dying comes first.
            self._drain(h, out, known_readable=kind == "result")
            if kind == "exit":
                self._reap(h, out)
        return out

    def _flush_slot(self, slot: int) -> bool:
        h = self._by_slot.get(slot)
        return h is None or self._flush(h)

    def _task_fd(self, slot: int) -> Optional[int]:
        h = self._by_slot.get(slot)
        return None if h is None or h.closed or h.gone else h.task_fd

    def _drain(self, h: WorkerHandle, out: List[Tuple[int, Any]],
               known_readable: bool = False) -> None:
        # ``known_readable``: the selector just said so; the first read needs no
        # second look (a poll per message, saved on every small call).
        conn = h.results
        while not h.gone and not h.closed:
            try:
                if not known_readable and not h.readable():
                    return
                known_readable = False
                data = conn.recv_bytes()
            except (EOFError, OSError):
                return  # the worker exited; its sentinel reports it
            message = pickle.loads(data)
            if isinstance(message, WorkerReady):
                h.ready, h.pid = True, message.pid
            elif isinstance(message, WorkerEnded):
                h.ended = True
            elif isinstance(message, WorkerFailed) and message.job is None:
                h.failed = True
            # The feedback inside (segments released) is the engine's to apply,
            # under its lock; after stop() the transport is cleaned up anyway.
            out.append((h.slot, message))

    def _reap(self, h: WorkerHandle, out: List[Tuple[int, Any]]) -> None:
        if h.gone:
            return
        h.process.join(1.0)  # the sentinel fired: it is exiting now
        h.gone = True
        self._unregister(h)
        expected = h.expected_exit or h.ended or h.failed
        out.append((h.slot, WorkerExited(h.pid, h.process.exitcode, expected)))

    def _unregister(self, h: WorkerHandle) -> None:
        if self._mux is not None:
            self._mux.forget(h.slot, h.results.fileno() if not h.closed else None,
                             h.process.sentinel)

    # ---------------------------------------------------- one worker at a time
    def death_error(self, worker: int, exited: WorkerExited,
                    items: Optional[List[int]] = None) -> BaseException:
        h = self._by_slot[worker]
        if exited.exitcode == startup.EXIT_NO_GUARD and self._method != "fork":
            return startup.MainGuardError(h.device, worker, exited.pid, exited.exitcode, items,
                                          method=self._method)
        return WorkerDiedError(h.device, worker, exited.pid, exited.exitcode, items,
                               oom.since(h.oom_base))

    def item_slot(self, worker: int) -> Optional[ItemSlot]:
        slots = self._item_slots
        if slots is None:
            return None
        try:
            return slots.read(worker)
        except ValueError:  # unmapped by an abort meanwhile
            return None

    def memory(self, worker: int, unique: bool = False) -> Optional[Reading]:
        h = self._by_slot.get(worker)
        return None if h is None or h.gone else memory.read(h.pid, unique)

    def resident(self, worker: int) -> Optional[int]:
        h = self._by_slot.get(worker)
        return None if h is None or h.gone else memory.resident(h.pid)

    def stacks(self, workers: Optional[Iterable[int]] = None,
               timeout: float = 1.0) -> Dict[int, Optional[Stack]]:
        """Each worker's stacks, dumped by the worker's signal handler (every
        worker at once, within ``timeout`` seconds in all)."""
        slots = range(len(self.devices)) if workers is None else workers
        targets = []
        for w in slots:
            h = self._by_slot.get(w)
            if h is not None and h.pid and not (h.gone or h.closed) and h.dump is not None:
                targets.append((w, h.pid, h.dump))
        out: Dict[int, Optional[Stack]] = {w: None for w in slots}
        if targets:
            with contextlib.suppress(ValueError):  # a handle closed meanwhile: gone
                out.update(stacks.request(targets, timeout))  # type: ignore[arg-type]
        return out

    def kill(self, worker: int) -> None:
        h = self._by_slot[worker]
        h.expected_exit = True
        self._terminate([h], graceful=False)

    def restart(self, worker: int) -> None:
        # The engine calls this outside its lock, after the transport forgot
        # what the old worker held (see ``supervision``).
        with self._poll_lock:
            old = self._by_slot[worker]
            if not old.gone:
                raise RuntimeError(f"worker {worker} is still running")
            old.close()
            self._handles.remove(old)  # in place: the finalizer holds this list
            self._start_one(worker, oom.kills(), replacement=True)

    # ------------------------------------------------------------------ end
    def stop(self, timeout: Optional[float] = None) -> None:
        if self._closed:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        errors: List[BaseException] = []
        # What the workers started (a producer's subprocesses) and producer_end
        # leaves running goes with them, as after a failure.
        trees = lifeline.descendants_of(
            h.pid for h in self._by_slot.values() if h.pid and not h.gone)
        below = [p for procs in trees.values() for p in procs]
        # Under fork a worker's start takes milliseconds and may be inside code of
        # the user's (a transport's hook, holding a lock another process shares):
        # it is waited for, as ever.
        quiet = self._spec.program.quiet and self._method != "fork"
        try:
            for h in self._by_slot.values():
                h.expected_exit = True
                if quiet and not h.ready and not h.gone and h.started():
                    # Still starting (a fresh interpreter importing), with nothing
                    # of the user's to run at its start or end: ended now, not
                    # waited for (it would finish importing only to exit).
                    h.ended = True
                    quietly(h.process.terminate)
                    continue
                with contextlib.suppress(ChannelBroken):  # already gone: poll reports it
                    self.send(h.slot, StopWorker(self.transport.feedback(h.slot)))
            self._shutdown_idle_zygote()

            def handle(slot: int, message: Any) -> None:
                h = self._by_slot[slot]
                if isinstance(message, WorkerFailed) and message.job is None:
                    errors.append(WorkerError.from_report(message.report, h.device, slot, h.pid))
                elif isinstance(message, WorkerExited) and not (h.ended or h.failed):
                    errors.append(self.death_error(slot, message))
                elif hasattr(message, "results"):  # a chunk nobody waits for
                    self.transport.discard(slot, message.results)

            wait_ended(self, lambda: any(not (h.gone or h.ended or h.failed)
                                         for h in self._by_slot.values()),
                       timeout, handle, errors)
            late = [h.slot for h in self._by_slot.values() if not (h.gone or h.ended or h.failed)]
            if late and errors and isinstance(errors[-1], TimeoutError):
                # They are killed next: say where they were.
                where = stacks.summary(self.stacks(late, 0.5))
                if where:
                    errors[-1] = TimeoutError(f"{errors[-1]}; {where}")
            # Ended workers exit by themselves; give them what is left of the time.
            for h in self._by_slot.values():
                if not h.gone and h.started():
                    left = 2.0 if deadline is None else max(0.0, deadline - time.monotonic())
                    h.process.join(min(left, 2.0))
        finally:
            self.abort()  # kills stragglers, releases pipes and shared memory
            lifeline.kill_pids(below)
        if errors:
            raise errors[0]

    def abort(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.wakeup()
        with self._poll_lock:  # a concurrent poll returns first (woken above)
            # Workers that already exited (after a graceful stop: all of them)
            # need no signals, nor a scan of /proc for what they started.
            handles = [h for h in self._handles
                       if h.started() and not h.gone and h.process.exitcode is None]
            for h in handles:
                h.expected_exit = True
            self._shutdown_idle_zygote()
            quietly(self._terminate, handles, True)
            for h in self._handles:
                if h.started() and not h.gone:
                    quietly(h.process.join, 1.0)
                    h.gone = True
                self._discard_pending(h)
                h.close()
            if self._mux is not None:
                self._mux.close()
            if self._finalizer is not None:
                self._finalizer()  # kills what is left, cleans up the transport
                self._finalizer = None
            self._release_inherited()  # the finalizer did, unless it was never made
            slots, self._item_slots = self._item_slots, None
            if slots is not None:
                quietly(slots.close)  # its descriptor now, not when this is collected

    def _shutdown_idle_zygote(self) -> None:
        """Tell the zygote to exit now if no worker is its child (it would kill them
        at once, before their graceful end): it exits while the workers end, not
        after them (the finalizer reaps it)."""
        if self._zygote is not None and not any(
                isinstance(h.process, zygote.ZygoteChild) for h in self._by_slot.values()):
            self._zygote.shutdown()

    def _discard_pending(self, h: WorkerHandle) -> None:
        if h.closed:
            return
        try:
            while h.results.poll():
                message = pickle.loads(h.results.recv_bytes())
                if hasattr(message, "results"):
                    self.transport.discard(h.slot, message.results)
                feedback = getattr(message, "feedback", None)
                if feedback is not None:
                    self.transport.on_worker_feedback(h.slot, feedback)
        except Exception:  # noqa: BLE001 -- EOF (drained), or a message that does not
            pass  # unpickle (the user's results): nobody waits for it, abort goes on

    def _terminate(self, handles: List[WorkerHandle], graceful: bool) -> None:
        """End ``handles``: SIGTERM and a short grace if ``graceful``, then SIGKILL,
        for the workers and every process below them."""
        if not handles:
            return
        trees = lifeline.descendants_of(h.pid for h in handles if h.pid)
        below = {h.slot: trees[h.pid] for h in handles if h.pid}
        if graceful and hasattr(signal, "SIGTERM"):
            for h in handles:
                quietly(h.process.terminate)
            deadline = time.monotonic() + self.term_grace
            for h in handles:
                h.process.join(max(0.0, deadline - time.monotonic()))
        for h in handles:
            if h.process.exitcode is None:
                quietly(h.process.kill)
            lifeline.kill_pids(below.get(h.slot, []))

    @property
    def closed(self) -> bool:
        """bool: whether the workers are gone."""
        return self._closed

    @property
    def pids(self) -> List[Optional[int]]:
        return [self._by_slot[s].pid for s in range(len(self.devices)) if s in self._by_slot]

