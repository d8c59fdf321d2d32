"""Replacement workers forked from a single-threaded copy of the caller (a "zygote").

CPython 3.12+ warns, rightly, when a process that runs several threads forks:
a lock another thread held at that moment stays held in the child forever.
A ``fork`` back-end starts its first workers before any of its threads runs;
a replacement (after a worker died, or was killed for ``task_timeout``),
though, is needed while those threads run. So right before the first
workers, the back-end forks one more child: the zygote, a copy of the caller
as it was then, single-threaded, holding the same program and inherited
objects (see [`inherit`][easycore.common.parallel._os.inherit]). A
replacement is forked by the zygote: it starts from the same state as the
first workers did, still without a copy, and no fork happens in a process
with threads. The first workers come from the zygote too where a worker would
start a library's threads to limit its pool (an OpenBLAS it cannot shrink at
rest): the zygote limits the pools once, and its workers inherit them so
([`restarts_openblas_in_children`][easycore.common.parallel._os.threads.restarts_openblas_in_children]).

Who forks the zygote: where this platform lists a process's descriptors,
the last of the first workers, as its first act (before it unpickles
anything or runs a line of the user's), not the caller. The caller then
forks only its workers, as ``multiprocessing.Pool`` does: one fork fewer at
the start, one exit fewer to wait for at the end, and none of the
copy-on-write faults a third fork costs the caller afterwards (every page it
writes is copied once per fork since). That zygote is the worker's child but
not tied to it: it arms no parent-death signal, and the back-end leaves it
out of what goes with a worker (a worker killed for a timeout must not take
its replacement's zygote along); it closes every descriptor the caller
opened after it asked for one, so it holds what a zygote forked by the
caller would have held, not the worker's pipes. Where the first workers come
from the zygote, or no descriptor list exists, the caller forks it.

The zygote serves one request at a time over a socket pair: the worker's
pipe ends travel as file descriptors (``socket.send_fds``), the target and
its arguments pickled. It starts the worker with multiprocessing's ``fork``
context (the same bootstrap as any worker), answers its pid and, when the
worker exits, writes the exit code to a status pipe whose read end is the
caller's sentinel ([`ZygoteChild`][easycore.common.parallel._os.zygote.ZygoteChild]).
The zygote dies with the caller (parent-death signal, or the socket's end),
and its workers with it; one a worker forked by the socket's end alone.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import signal
import socket
import struct
import sys
import threading
import time
import weakref
from multiprocessing import connection
from multiprocessing.context import BaseContext

from . import lifeline, threads

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable, Dict, Optional, Sequence, Tuple

__all__ = ["Zygote", "ZygoteChild", "ZygoteGone", "for_workers", "settle_ended_threads"]

_LEN = struct.Struct("!Q")
_CODE = struct.Struct("!i")
#: a worker whose exit code never came (the zygote died first): reported as killed
_LOST = -int(getattr(signal, "SIGKILL", 9))
#: seconds the caller waits for the pid of a zygote that a worker forks
_GREETING = 10.0


#: OS threads of this process that are not Python's: a library's own (a native
#: thread pool, say), not ending; never waited for. Those already running when
#: this module is imported (NumPy's BLAS pool, imported first), then any that
#: outlived a settle.
_staying: set = set()


def _tasks() -> set:
    """The ids of this process's OS threads (Linux's ``/proc``; elsewhere, none)."""
    try:
        return set(os.listdir("/proc/self/task"))
    except OSError:
        return set()


if sys.version_info < (3, 13):
    _staying.update(_tasks() - {str(t.native_id) for t in threading.enumerate()})


def settle_ended_threads(limit: float = 0.02) -> None:
    """Before a fork from a process whose Python threads all ended: let their OS
    threads finish ending.

    Before CPython 3.13, ``Thread.join`` returns once the thread's Python code
    is done, a moment before the kernel's thread is gone: a fork
    right then (a pool started just after the user joined a thread, or after
    easycore's launcher retired) came from a process the kernel still counted
    as multi-threaded, and 3.12 warned (after 22 of 3,000 joins on the 2-core VM;
    the end took up to 5 ms there idle, 16 ms with the CPUs busy).
    Nothing can wait for that end (3.13's join does), so the task list is
    read until they are gone, at most ``limit`` seconds; a thread still there
    then is not ending and is not waited for again. Live Python threads: a
    fork warns whatever this does, nothing to wait for.

    Args:
        limit (float): the longest wait, in seconds.
    """
    if sys.version_info >= (3, 13) or threading.active_count() > 1:
        return
    ending = _tasks() - _staying - {str(threading.get_native_id())}  # (no /proc: none)
    deadline = time.monotonic() + limit
    while ending and time.monotonic() < deadline:
        # A poll, not a join: no call waits for a kernel thread's end here.
        # Short sleeps leave the CPU to the thread that is ending.
        time.sleep(0.0002)
        ending &= _tasks()
    _staying.update(ending)


class ZygoteGone(OSError):
    """The zygote cannot start a worker any more (it died, or was closed)."""


class ZygoteChild:
    """The caller's side of a worker the zygote forked: the part of
    ``multiprocessing.Process`` a back-end uses (pid, sentinel, exitcode, join,
    terminate, kill)."""

    def __init__(self, pid: Optional[int], status_fd: int, name: str) -> None:
        self.pid: Optional[int] = pid
        self.name = name
        #: readable once the worker exited (its exit code, or EOF if the zygote died)
        self.sentinel = status_fd
        self._exitcode: Optional[int] = None
        self._closer = weakref.finalize(self, _close_quietly, status_fd)

    @property
    def exitcode(self) -> Optional[int]:
        """int or None: as ``multiprocessing.Process.exitcode`` (negative: the signal)."""
        if self._exitcode is None and connection.wait([self.sentinel], 0):
            self._read_code()
        return self._exitcode

    def join(self, timeout: Optional[float] = None) -> None:
        """Wait up to ``timeout`` seconds (None: for ever) for the worker's exit."""
        if self._exitcode is None and connection.wait([self.sentinel], timeout):
            self._read_code()

    def terminate(self) -> None:
        """Send SIGTERM (if it still runs)."""
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """Send SIGKILL (if it still runs)."""
        self._signal(getattr(signal, "SIGKILL", signal.SIGTERM))

    def close(self) -> None:
        """Close the sentinel, as ``multiprocessing.Process.close``; the exit code stays.

        Raises:
            ValueError: the worker still runs.
        """
        if self.exitcode is None:
            raise ValueError(f"{self.name} (pid {self.pid}) still runs")
        self._closer()

    def _signal(self, sig: int) -> None:
        if self.exitcode is None and self.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, sig)

    def _read_code(self) -> None:
        data = b""
        with contextlib.suppress(OSError):
            data = os.read(self.sentinel, _CODE.size)
        self._exitcode = _CODE.unpack(data)[0] if len(data) == _CODE.size else _LOST

    def __repr__(self) -> str:
        return f"<ZygoteChild {self.name} pid={self.pid} exitcode={self._exitcode}>"


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


class Zygote:
    """A single-threaded copy of the caller that forks workers on request."""

    process: Any  #: multiprocessing.Process, or a ZygoteChild (forked by a worker)
    _pid: Optional[int]
    _keep: Optional[Dict[int, Tuple[int, int]]] = None  # (forked by a worker: see ``born``)
    _budget: Optional[int] = None

    def __init__(self, context: BaseContext, start: Callable[[Any], None],
                 budget: Optional[int] = None) -> None:
        """Fork the zygote now (call it while the caller runs no other thread, its
        ended threads settled: see ``for_workers``).

        Args:
            context (BaseContext): a ``fork`` multiprocessing context.
            start (callable): ``start(process)`` starts a process (the back-end's
                way: from a thread that lives as long as the caller, SIGINT blocked).
            budget (int or None): the workers' thread budget: the zygote shrinks
                the thread pools of its loaded libraries to it once, before it
                forks any, and its workers inherit them at that size (None: leave
                them alone).
        """
        ours, theirs = socket.socketpair()
        self._begin(ours)
        self.process = context.Process(  # type: ignore[attr-defined]
            target=_serve, args=(theirs, ours, os.getpid(), budget), name="easycore-zygote",
            daemon=False,
        )
        try:
            start(self.process)
        finally:
            theirs.close()
        self._pid = self.process.pid  # asked after close too

    def _begin(self, ours: socket.socket) -> None:
        self._sock: Optional[socket.socket] = ours
        if not hasattr(self, "_lock"):  # (kept by ``born``: another thread may wait on it)
            self._lock = threading.Lock()  # one request at a time
        self.process = None
        self._pid = None
        self._exitcode: Optional[int] = None  # once the process object is closed
        self._from_worker = False  # forked by a worker (see ``from_worker``)
        self._greeting = False  # its pid, the first thing that worker sends
        self._birth: Optional[Callable[[], None]] = None
        #: the zygote's ends (its socket's, its status pipe's), closed here once the
        #: process that forks it holds them (see ``handed_over``)
        self._handed: Optional[Tuple[socket.socket, int]] = None

    @classmethod
    def from_worker(cls, budget: Optional[int] = None,
                    keep: Optional[Dict[int, Tuple[int, int]]] = None) -> Optional[Zygote]:
        """A zygote that a worker forks (see ``birth``), or None where this platform
        does not list a process's descriptors (the zygote could not close the
        worker's).

        Args:
            budget (int or None): as in the constructor.
            keep (dict or None): the descriptors the zygote keeps (None: this
                process's now).

        Returns:
            Zygote or None:
        """
        keep = _open_fds() if keep is None else keep
        if keep is None:
            return None
        self = cls.__new__(cls)
        self._keep, self._budget = keep, budget
        ours, theirs, status_w = self._expect()
        self._birth = functools.partial(_fork_from_worker, theirs, ours, status_w, keep, budget)
        self._handed = (theirs, status_w)
        return self

    def _expect(self) -> Tuple[socket.socket, socket.socket, int]:
        """This process's ends of a zygote that ``_fork_zygote`` starts: returns its
        socket's two ends and its status pipe's write end (the zygote's)."""
        ours, theirs = socket.socketpair()
        status_r, status_w = os.pipe()
        self._begin(ours)
        self.process = ZygoteChild(None, status_r, "easycore-zygote")
        self._from_worker = self._greeting = True
        return ours, theirs, status_w

    def born(self) -> None:
        """Wait until a worker forked this zygote (it sends the pid first thing); if
        that worker died before it did, fork it here now, as the worker would have.
        Called before any thread of the back-end's runs: the zygote is there
        before a replacement can be needed. (A worker that has not forked it
        within ``_GREETING`` seconds counts as dead: the zygote it forks later
        sees its socket closed and exits.)"""
        if not self._from_worker or self._sock is None or self.pid is not None:
            return  # (forked by the caller, shut down, or running)
        self.close()
        _, theirs, status_w = self._expect()
        self._handed = (theirs, status_w)
        try:
            _fork_zygote(theirs, status_w, self._keep or {}, self._budget)
        finally:
            self.handed_over()

    def birth(self) -> Optional[Callable[[], None]]:
        """What the worker that forks the zygote runs first, once (None after, and
        for a zygote the caller forked); ``handed_over`` follows that worker's
        start."""
        birth, self._birth = self._birth, None
        return birth

    def handed_over(self) -> None:
        """The worker that runs ``birth`` started: it holds the zygote's ends, and
        this process no longer does (else the socket's end, when that worker dies
        before forking the zygote, would never come)."""
        handed, self._handed = self._handed, None
        if handed is not None:
            theirs, status_w = handed
            theirs.close()
            _close_quietly(status_w)

    @property
    def pid(self) -> Optional[int]:
        """int or None: the zygote's process id (None: it never started)."""
        if self._greeting:
            with self._lock:
                self._greet()
        return self._pid

    def known_pid(self) -> Optional[int]:
        """int or None: the zygote's process id if known without waiting (one a worker
        forks is known once that worker said it is ready)."""
        if self._greeting:
            with self._lock:
                self._greet(wait=False)
        return self._pid

    @property
    def exitcode(self) -> Optional[int]:
        """int or None: the zygote's exit code (negative: the signal), None while it runs."""
        return self._exitcode if self.process is None else self.process.exitcode

    def _greet(self, wait: bool = True) -> None:
        """Read the pid of a zygote a worker forked, once (holding the lock): the
        worker sends it as soon as it forked it (``wait`` False: only if it is
        there already; True: for ``_GREETING`` seconds at most, a worker stopped
        before its first line included)."""
        if not self._greeting or self._sock is None:
            return
        try:
            if wait:
                if not connection.wait([self._sock], _GREETING):
                    return
                data = _recv_exactly(self._sock, _LEN.size)
            else:
                data = self._sock.recv(_LEN.size, socket.MSG_DONTWAIT)
                if len(data) < _LEN.size:  # (a greeting comes whole: none yet)
                    return
        except BlockingIOError:
            return
        except (OSError, EOFError):
            data = b""  # the worker died before it forked the zygote
        self._greeting = False
        self._pid = _LEN.unpack(data)[0] if data else None
        self.process.pid = self._pid

    def fork(self, target: Callable[..., Any], args: Tuple[Any, ...], fds: Sequence[int],
             name: str) -> ZygoteChild:
        """Start ``target(owner_pid, fds, *args)`` in a new child of the zygote.

        ``owner_pid`` is the zygote's pid (the worker's parent); ``fds`` are the
        zygote's copies of ``fds``, which the caller may close once this returns.

        Args:
            target (callable): importable or inherited (the zygote has the caller's
                memory as it was when it was forked).
            args (tuple): picklable.
            fds (Sequence[int]): file descriptors the worker gets.
            name (str): the process's name.

        Returns:
            ZygoteChild: the worker.

        Raises:
            ZygoteGone: the zygote is gone (closed, killed, never forked); nothing
                was started.
        """
        self.born()  # (its worker died before it forked it: forked here, if it can be)
        status_r, status_w = os.pipe()
        try:
            data = pickle.dumps((target, args, name), protocol=pickle.HIGHEST_PROTOCOL)
            with self._lock:
                if self._sock is None:
                    raise ZygoteGone("the zygote is closed")
                self._greet()
                if self._greeting:  # (its answers would be read as the pid)
                    raise ZygoteGone(f"the zygote for {name} has not started")
                try:
                    socket.send_fds(self._sock, [_LEN.pack(len(data))], [status_w, *fds])
                    self._sock.sendall(data)
                    pid = _LEN.unpack(_recv_exactly(self._sock, _LEN.size))[0]
                except (OSError, EOFError) as exc:
                    raise ZygoteGone(f"the zygote (pid {self._pid}) is gone: {exc}") from exc
            if not pid:
                raise ZygoteGone(f"the zygote (pid {self._pid}) could not start {name}")
        except BaseException:
            os.close(status_r)
            raise
        finally:
            os.close(status_w)
        return ZygoteChild(pid, status_r, name)

    def shutdown(self) -> None:
        """Tell the zygote to exit (its workers, if any still run, are killed), without
        waiting: it exits while the caller goes on; later forks raise ``ZygoteGone``.
        Never raises; ``close`` reaps it."""
        self.handed_over()  # (a first worker that never started: nothing holds them)
        with self._lock:
            self._greet(wait=False)  # (its pid, for close's kill)
            sock, self._sock = self._sock, None
        if sock is not None:
            # shutdown, not only close: a copy of this end inherited by a later
            # fork (another back-end's workers) would keep the socket open.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # the zygote sees EOF and exits
            sock.close()

    def close(self, timeout: float = 5.0) -> None:
        """End the zygote (its workers, if any still run, are killed); never raises.

        It exits as soon as it sees the end of the socket; after ``timeout``
        seconds (a loaded machine can take one) it is killed instead.
        """
        self.shutdown()
        if self.process is None:
            return
        with contextlib.suppress(Exception):
            self.process.join(timeout)
            if self.process.exitcode is None:
                self.process.kill()
                self.process.join(timeout)
            code = self.process.exitcode
            self.process.close()  # its sentinel now, not when this object is collected
            self.process, self._exitcode = None, code
        if self._from_worker:
            _reap_if_adopted(self._pid)


def _reap_if_adopted(pid: Optional[int]) -> None:
    """A zygote a worker forked is adopted, once that worker ended, by whoever
    adopts orphans: this process, if it is PID 1 (a container's entry point) or
    a subreaper, which must then reap it."""
    if pid is None:
        return
    with contextlib.suppress(ChildProcessError, OSError):
        if os.waitpid(pid, os.WNOHANG) == (0, 0):  # ours, and ending (it said so)
            os.waitpid(pid, 0)


def _open_fds() -> Optional[Dict[int, Tuple[int, int]]]:
    """This process's open descriptors, each with what it refers to (device, inode),
    so that a number closed and reused since is told apart; None: no list here."""
    for where in ("/proc/self/fd", "/dev/fd"):
        try:
            names = os.listdir(where)
        except OSError:
            continue
        out: Dict[int, Tuple[int, int]] = {}
        for name in names:
            try:
                fd = int(name)
                st = os.fstat(fd)
            except (ValueError, OSError):
                continue  # (the listing's own descriptor, closed by now)
            out[fd] = (st.st_dev, st.st_ino)
        return out
    return None


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError("the zygote's socket closed")
        out += chunk
    return out


# ------------------------------------------------------------ in the zygote
def _serve(sock: socket.socket, callers_end: Optional[socket.socket], owner_pid: Optional[int],
           budget: Optional[int] = None, own: Sequence[int] = ()) -> None:
    """The zygote's loop: start a worker per request; report each one's exit.

    ``owner_pid`` None: a zygote a worker forked (no parent-death signal: its
    parent is not the caller); ``own``: more of the zygote's descriptors its
    workers close.
    """
    if callers_end is not None:
        callers_end.close()  # (the copy fork gave us)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle
    if owner_pid is not None:
        lifeline.arm_parent_death_signal()
        if os.getppid() != owner_pid:
            os._exit(0)  # the caller died before the signal was armed
    from multiprocessing import get_context, popen_fork  # noqa: F401 (before the scan's refresh)

    fork = get_context("fork")
    if budget is not None:
        # Once here rather than in each worker: a setter that starts a pool's
        # threads (an OpenBLAS that cannot be shrunk at rest) starts them only
        # here, and the next fork ends them; the workers inherit the size.
        threads.shrink_loaded(budget)
        threads.prepare_fork()  # its workers find the caller's scan current, as the first
    children: Dict[int, Tuple[Any, int]] = {}  # sentinel -> (process, status fd)
    own = (sock.fileno(), *own)
    try:
        while True:
            for ready in connection.wait([sock, *children]):
                if ready is sock:
                    try:
                        if not _start_requested(sock, fork, children, own):
                            return  # the caller closed its end
                    except OSError:
                        return  # the caller died
                else:
                    process, status_w = children.pop(ready)  # type: ignore[arg-type]
                    process.join()
                    with contextlib.suppress(OSError):
                        os.write(status_w, _CODE.pack(process.exitcode))
                    _close_quietly(status_w)
                    process.close()
    finally:
        for process, status_w in children.values():
            with contextlib.suppress(Exception):
                process.kill()
                process.join(1.0)
            _close_quietly(status_w)


def _start_requested(sock: socket.socket, fork: BaseContext,
                     children: Dict[int, Tuple[Any, int]], own: Sequence[int] = ()) -> bool:
    try:
        header, fds, _flags, _addr = socket.recv_fds(sock, _LEN.size, 16)
    except OSError:
        return False
    if not header:
        return False
    status_w = fds[0] if fds else -1
    try:
        if len(header) < _LEN.size:
            header += _recv_exactly(sock, _LEN.size - len(header))
        target, args, name = pickle.loads(_recv_exactly(sock, _LEN.unpack(header)[0]))
        process = fork.Process(  # type: ignore[attr-defined]
            target=_child, args=(own, target, os.getpid(), list(fds[1:]), *args), name=name,
            daemon=False,
        )
        process.start()
    except EOFError:
        return False
    except Exception:  # noqa: BLE001 -- answered as pid 0: the caller starts it itself
        _close_quietly(status_w)
        sock.sendall(_LEN.pack(0))
        return True
    finally:
        for fd in fds[1:]:
            _close_quietly(fd)  # the worker has its own copies now
    children[process.sentinel] = (process, status_w)
    sock.sendall(_LEN.pack(process.pid))
    return True


def _child(own: Sequence[int], target: Callable[..., Any], *args: Any) -> None:
    """A worker the zygote forked: without the zygote's own descriptors (its end of
    the caller's socket: the caller sees the zygote's death when it dies, not when
    its last worker does), then ``target(*args)``."""
    for fd in own:
        _close_quietly(fd)
    target(*args)


def _fork_from_worker(theirs: socket.socket, ours: socket.socket, status_w: int,
                      keep: Dict[int, Tuple[int, int]], budget: Optional[int]) -> None:
    """In the last worker, before anything else: fork the zygote, and say its pid
    on the socket (the caller reads it before its first request: it is there
    before this worker says it is ready). No zygote (a fork that failed): the
    caller sees the socket's end and forks its replacements itself, as when a
    zygote dies."""
    try:
        _fork_zygote(theirs, status_w, keep, budget)
    finally:
        theirs.close()
        ours.close()
        _close_quietly(status_w)


def _fork_zygote(theirs: socket.socket, status_w: int, keep: Dict[int, Tuple[int, int]],
                 budget: Optional[int]) -> None:
    """Fork a zygote here and say its pid on ``theirs``. No zygote (a fork that
    failed): nothing said, and the caller sees the socket's end once this
    process closes it."""
    try:
        pid = os.fork()
    except OSError:
        return
    if pid == 0:
        _serve_from_worker(theirs, status_w, keep, budget)
    with contextlib.suppress(OSError):  # (the caller gone: the zygote sees it too)
        theirs.sendall(_LEN.pack(pid))


def _serve_from_worker(sock: socket.socket, status_w: int, keep: Dict[int, Tuple[int, int]],
                    budget: Optional[int]) -> None:
    """A zygote forked by a worker: the descriptors the caller had when it asked
    for one, then ``_serve`` (no parent-death signal: a worker's end must not
    end it); its exit code goes to ``status_w`` (the caller's sentinel: it is
    not the caller's child to wait for). Never returns."""
    code = 1
    try:
        for fd, ident in (_open_fds() or {}).items():
            if fd not in (sock.fileno(), status_w) and keep.get(fd) != ident:
                _close_quietly(fd)  # the worker's pipes, the caller's later ones
        _serve(sock, None, None, budget, own=(status_w,))
        code = 0
    finally:
        with contextlib.suppress(OSError):
            os.write(status_w, _CODE.pack(code))
        os._exit(code)


def for_workers(context: BaseContext, start: Callable[[Any], None],
                budget: Optional[int]) -> Tuple[Zygote, bool]:
    """The zygote of a ``fork`` back-end about to start its first workers (none of
    its threads runs yet), and whether it forks those workers too.

    It forks them where a worker would start a library's threads to limit its
    pool (see the module's text): then the caller forks it now. Otherwise the
    last worker forks it
    ([`Zygote.from_worker`][easycore.common.parallel._os.zygote.Zygote.from_worker]),
    where this platform allows.

    Args:
        context (BaseContext): a ``fork`` multiprocessing context.
        start (callable): as in ``Zygote``.
        budget (int or None): the workers' thread budget (None: leave it alone).

    Returns:
        tuple: ``(zygote, first_workers_from_it)``.
    """
    settle_ended_threads()  # (before the zygote's fork, or the workers')
    # A worker limiting an OpenBLAS it cannot shrink at rest would start (and
    # spin) every core's thread: the zygote limits it once, and forks them.
    first = budget is not None and threads.restarts_openblas_in_children(budget)
    zygote = None if first else Zygote.from_worker(budget)
    if zygote is None:
        zygote = Zygote(context, start, budget)
    if budget is not None:
        # A worker's start (or the zygote's) imports the fork Popen: imported
        # now and the scan refreshed once, so that each worker's check of it is
        # a length comparison, not a walk of sys.modules (which, just after a
        # fork, costs every worker its copy-on-write faults).
        from multiprocessing import popen_fork  # noqa: F401

        threads.prepare_fork()
    return zygote, first
