"""Replacement workers forked from a single-threaded copy of the caller (a "zygote").

CPython 3.12+ warns, rightly, when a process that runs several threads forks:
a lock another thread held at that moment stays held in the child forever.
A ``fork`` back-end starts its first workers before any of its threads runs;
a replacement (after a worker died, or was killed for ``task_timeout``),
though, is needed while those threads run. So as it starts the first
workers, the back-end forks one more child: the zygote, a copy of the caller
as it was then, single-threaded, holding the same program and inherited
objects (see [`inherit`][easycore.common.parallel._os.inherit]). A
replacement is forked by the zygote: it starts from the same state as the
first workers did, still without a copy, and no fork happens in a process
with threads. The first workers come from the zygote too where a worker would
start a library's threads to limit its pool (an OpenBLAS it cannot shrink at
rest): the zygote limits the pools once, and its workers inherit them so
([`restarts_openblas_in_children`][easycore.common.parallel._os.threads.restarts_openblas_in_children]).

The zygote is forked right after the first workers, not before them: they
boot while it is forked and starts (a third fork, and its copy-on-write
faults, cost a fresh pool's first result a millisecond or two on a 2-core
machine). What the caller made for those workers (their pipes, the
multiplexer's) the zygote closes first, before anything else: it keeps the
descriptors it would have kept forked before them, and its replacements
inherit none of another worker's pipes. Where this process's descriptors
cannot be listed ([`open_fds`][easycore.common.parallel._os.zygote.open_fds]
answers None), and where it forks the first workers too, it is forked before
them.

The zygote serves one request at a time over a socket pair: the worker's
pipe ends travel as file descriptors (``socket.send_fds``), the target and
its arguments pickled. It starts the worker with multiprocessing's ``fork``
context (the same bootstrap as any worker), answers its pid and, when the
worker exits, writes the exit code to a status pipe whose read end is the
caller's sentinel ([`ZygoteChild`][easycore.common.parallel._os.zygote.ZygoteChild]).
The zygote dies with the caller (parent-death signal, or the socket's end),
and its workers with it.
"""

from __future__ import annotations

import contextlib
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

from . import heap, lifeline, threads

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable, Dict, Optional, Sequence, Tuple

__all__ = ["Zygote", "ZygoteChild", "ZygoteGone", "open_fds",
           "settle_ended_threads"]

_LEN = struct.Struct("!Q")
_CODE = struct.Struct("!i")
#: a worker whose exit code never came (the zygote died first): reported as killed
_LOST = -int(getattr(signal, "SIGKILL", 9))


#: where this process's open descriptors are listed (Linux, then macOS and the BSDs)
_FD_DIRS = ("/proc/self/fd", "/dev/fd")


def open_fds(since: Optional[set] = None) -> Optional[set]:
    """This process's open file descriptors; None where they cannot be listed.

    The listing's own descriptor, closed once it returns, is left out (a later
    descriptor may take its number).

    Args:
        since (set or None): descriptors to leave out (an earlier answer): then
            only those opened since are checked, however many the process holds.

    Returns:
        set[int] or None:
    """
    for where in _FD_DIRS:
        try:
            listed = {int(name) for name in os.listdir(where) if name.isdigit()}
        except OSError:
            continue
        break
    else:
        return None
    if since is not None:
        listed -= since
    fds = set()
    for fd in listed:
        try:
            os.fstat(fd)
        except OSError:
            continue
        fds.add(fd)
    return fds


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

    def __init__(self, pid: int, status_fd: int, name: str) -> None:
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

    def __init__(self, context: BaseContext, start: Callable[[Any], None],
                 budget: Optional[int] = None, close: Sequence[int] = ()) -> None:
        """Fork the zygote now (call it while the caller runs no other thread).

        Args:
            context (BaseContext): a ``fork`` multiprocessing context.
            start (callable): ``start(process)`` starts a process (the back-end's
                way: from a thread that lives as long as the caller, SIGINT blocked).
            budget (int or None): the workers' thread budget: the zygote shrinks
                the thread pools of its loaded libraries to it once, before it
                forks any, and its workers inherit them at that size (None: leave
                them alone).
            close (Sequence[int]): descriptors of the caller's that the zygote closes
                first (its copies): what was made for the workers forked before it.
        """
        settle_ended_threads()
        ours, theirs = socket.socketpair()
        self._sock: Optional[socket.socket] = ours
        self._lock = threading.Lock()  # one request at a time
        self.process: Any = context.Process(  # type: ignore[attr-defined]
            target=_serve, args=(theirs, ours, os.getpid(), budget, tuple(close)),
            name="easycore-zygote",
            daemon=False,
        )
        try:
            start(self.process)
        finally:
            theirs.close()
        self._pid: Optional[int] = self.process.pid  # asked after close too
        self._exitcode: Optional[int] = None  # once the process object is closed

    @property
    def pid(self) -> Optional[int]:
        """int or None: the zygote's process id."""
        return self._pid

    @property
    def exitcode(self) -> Optional[int]:
        """int or None: the zygote's exit code (negative: the signal), None while it runs."""
        return self._exitcode if self.process is None else self.process.exitcode

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
            ZygoteGone: the zygote is gone (closed, killed); nothing was started.
        """
        status_r, status_w = os.pipe()
        try:
            data = pickle.dumps((target, args, name), protocol=pickle.HIGHEST_PROTOCOL)
            with self._lock:
                if self._sock is None:
                    raise ZygoteGone("the zygote is closed")
                try:
                    socket.send_fds(self._sock, [_LEN.pack(len(data))], [status_w, *fds])
                    self._sock.sendall(data)
                    pid = _LEN.unpack(_recv_exactly(self._sock, _LEN.size))[0]
                except (OSError, EOFError) as exc:
                    raise ZygoteGone(f"the zygote (pid {self.pid}) is gone: {exc}") from exc
            if not pid:
                raise ZygoteGone(f"the zygote (pid {self.pid}) could not start {name}")
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
        with self._lock:
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
        if self._pid is None or self.process is None:
            return
        with contextlib.suppress(Exception):
            self.process.join(timeout)
            if self.process.exitcode is None:
                self.process.kill()
                self.process.join(timeout)
            code = self.process.exitcode
            self.process.close()  # its sentinel now, not when this object is collected
            self.process, self._exitcode = None, code


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError("the zygote's socket closed")
        out += chunk
    return out


# ------------------------------------------------------------ in the zygote
def _serve(sock: socket.socket, callers_end: socket.socket, owner_pid: int,
           budget: Optional[int] = None, close: Tuple[int, ...] = ()) -> None:
    """The zygote's loop: start a worker per request; report each one's exit."""
    heap.freeze_inherited()  # what it forks inherits its pages unvisited (see _os.heap)
    for fd in close:
        _close_quietly(fd)  # the first workers' pipes: theirs and the caller's only
    callers_end.close()  # (the copy fork gave us)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle
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
    try:
        while True:
            for ready in connection.wait([sock, *children]):
                if ready is sock:
                    try:
                        if not _start_requested(sock, fork, children):
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
                     children: Dict[int, Tuple[Any, int]]) -> bool:
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
            target=target, args=(os.getpid(), list(fds[1:]), *args), name=name, daemon=False
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

