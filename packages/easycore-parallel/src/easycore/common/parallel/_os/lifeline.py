"""Workers must not outlive the process that made them, nor leave children behind.

Mechanisms, because each misses cases the others catch:

* Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills the worker the
  moment its parent dies, even while the worker is stuck in native code that
  holds the GIL (no thread of its own could react then). The "parent" is the
  *thread* that forked the worker, so workers are started from a thread that
  lives as long as they do: the main thread, or else
  [`start_process`][easycore.common.parallel._os.lifeline.start_process]'s
  launcher thread, which ends once no worker it started is alive (a thread
  left running would make every later fork a fork from a multi-threaded
  process). A ``fork`` back-end's replacement workers are children of
  its [`zygote`][easycore.common.parallel._os.zygote], which is armed the same
  way and kills them as it exits. Under ``forkserver`` the parent is the fork server, which
  exits when the caller's process dies, once no worker holds its "alive" pipe:
  [`detach_from_forkserver`][easycore.common.parallel._os.lifeline.detach_from_forkserver]
  closes a worker's copy.
* [`parent_gone`][easycore.common.parallel._os.lifeline.parent_gone], polled by a
  watchdog thread in the worker where the signal cannot be armed (not Linux):
  the parent process id changes when the parent dies and the worker is
  re-parented. Portable. Where the signal is armed the worker runs no such
  thread, so that a fork in it (a pool of its own) is not a fork from a
  multi-threaded process.
* [`descendants`][easycore.common.parallel._os.lifeline.descendants]: the
  processes a worker started (a producer's own subprocesses, data-loader
  workers), found before the worker is killed, so they can be killed too.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading

from . import interrupts

TYPE_CHECKING = False
if TYPE_CHECKING:  # concurrent.futures (and logging) only when a launcher thread is needed
    from concurrent.futures import Future
    from typing import Any, Callable, Dict, Iterable, List, Optional

__all__ = [
    "arm_parent_death_signal",
    "parent_gone",
    "start_hiding_phantom_main",
    "start_process",
    "retire_launcher",
    "detach_from_forkserver",
    "fork_server",
    "descendants",
    "descendants_of",
    "kill_pids",
]

_PR_SET_PDEATHSIG = 1


def arm_parent_death_signal(sig: Optional[int] = None) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies.

    Args:
        sig (int or None): the signal; None means SIGKILL.

    Returns:
        bool: whether it could be armed (Linux only).
    """
    if not sys.platform.startswith("linux"):
        return False
    if sig is None:
        sig = signal.SIGKILL  # looked up here: Windows has no SIGKILL to import
    prctl = _prctl()
    return prctl is not None and prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


@functools.cache
def _prctl() -> Any:
    """libc's ``prctl``, looked up once per process: the caller looks it up before
    it forks (``start_process``), so a forked worker arms its signal at once.

    Through ``_ctypes``, the C half of ``ctypes``: importing ``ctypes`` itself
    (its Python half defines every C type) costs ~1 ms more, paid by every short
    script and every spawned worker for one call. Where ``_ctypes`` lacks a part
    used here, ``ctypes``; where neither imports, None (the worker's watchdog
    thread notices its parent's death instead).
    """
    try:
        return _libc_function("prctl")
    except (ImportError, AttributeError, OSError):
        pass
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl  # the libc already loaded: no search
    except (ImportError, OSError, AttributeError):
        return None


def _libc_function(name: str) -> Any:
    """``name`` from the C library already loaded, as a function of C ``int``s
    returning an ``int`` and keeping ``errno`` (``ctypes.CDLL(None, use_errno=True)``'s
    attribute, made from ``_ctypes`` alone)."""
    import _ctypes

    class CInt(_ctypes._SimpleCData):
        _type_ = "i"

    class Function(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = CInt

    program = _ctypes.dlopen(None)  # type: ignore[arg-type]  # (None: as CDLL(None))
    return Function(_ctypes.dlsym(program, name))


def parent_gone(expected_ppid: int) -> bool:
    """Whether the process that started this one has died.

    Args:
        expected_ppid (int): ``os.getppid()`` as seen when the worker started.

    Returns:
        bool:
    """
    return os.getppid() != expected_ppid


def fork_server() -> Any:
    """The standard library's fork server object (private: its preload list, its
    pid, its "alive" pipe), or None where there is none (another platform, another
    Python): the one place that looks it up."""
    try:
        from multiprocessing import forkserver
    except ImportError:  # pragma: no cover - a platform without it
        return None
    return getattr(forkserver, "_forkserver", None)


def detach_from_forkserver() -> None:
    """In a worker started by the fork server: drop its copy of the server's "alive" pipe.

    The fork server exits when every holder of that pipe is gone; a worker
    keeping it would keep the server alive after the caller died, and the
    worker's parent-death signal would never fire.
    """
    server = fork_server()
    fd = getattr(server, "_forkserver_alive_fd", None)
    if server is not None and fd is not None:
        with contextlib.suppress(OSError):  # already closed
            os.close(fd)
        server._forkserver_alive_fd = None


# ---------------------------------------------------------------- launcher
# One launcher at a time, made when a worker is started off the main thread and
# ended (retire_launcher) once no process it started is alive: a thread that
# stays would make every later fork in this process a fork from a
# multi-threaded process (CPython 3.12+ warns, rightly).
_launcher_lock = threading.Lock()
_launcher: Optional[_Launcher] = None
_RETIRE = object()  # the request to end the launcher if it has no live child


class _Launcher:
    def __init__(self) -> None:
        import queue  # (here: only a pool made off the main thread needs it)

        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=_launcher_main, args=(self,),
                                       name="easycore-launcher", daemon=True)
        self.thread.start()


def _launcher_main(launcher: _Launcher) -> None:
    global _launcher
    requests = launcher.requests
    while True:
        fn, future = requests.get()
        if fn is _RETIRE:
            with _launcher_lock:  # requests are put under it: none can come after
                idle = requests.empty() and not _thread_children(threading.get_native_id())
                if idle:
                    _launcher = None
            future.set_result(idle)
            if idle:
                return
            continue
        run_into(future, fn)
        del fn, future


def _thread_children(tid: int) -> bool:
    """Whether the thread ``tid`` of this process has a child (alive or not yet
    reaped); True when the kernel does not say (the launcher then stays)."""
    kids = _task_children(os.getpid(), tid) if _proc_children_readable() else None
    return kids is None or bool(kids)


def retire_launcher(timeout: float = 5.0) -> None:
    """End the launcher thread if no process it started is still alive.

    A back-end calls this once its workers are reaped. A launcher that still
    has children (another back-end's workers) stays, since their parent-death
    signal follows it; the last back-end to close ends it.

    Args:
        timeout (float): the longest wait for the launcher's answer and its end.
    """
    with _launcher_lock:
        launcher = _launcher
        if launcher is None:
            return  # the usual case: every worker was started on the main thread
        if launcher.thread is threading.current_thread():
            return  # a back-end collected on the launcher itself: it cannot answer now
        from concurrent.futures import Future

        future: Future = Future()
        launcher.requests.put((_RETIRE, future))
    try:
        if future.result(timeout):
            interrupts.join(launcher.thread, timeout)
    except Exception:  # noqa: BLE001 -- a busy launcher stays; the next close asks again
        pass


def run_into(future: Future, fn: Callable[[], Any]) -> None:
    """Settle ``future`` with what ``fn()`` returns or raises (on the calling thread).

    Args:
        future (concurrent.futures.Future):
        fn (callable):
    """
    try:
        future.set_result(fn())
    except BaseException as exc:  # noqa: BLE001 (handed to the caller, whatever it is)
        future.set_exception(exc)


def start_hiding_phantom_main(start: Callable[[], Any]) -> Any:
    """Call ``start`` (a worker's start, the fork server's) with a main script's
    path that does not exist hidden.

    A script read from stdin (``python - < x.py``) has ``__main__.__file__ ==
    "<stdin>"``: spawn and forkserver workers would try to run that path and
    die before any of our code, and so would a fork server that preloads
    ``__main__`` (Python 3.13.8 and 3.14.1 on). Workers get code of
    ``__main__`` by value, so they need not import it.

    Args:
        start (callable): what starts the process.

    Returns:
        Any: what ``start`` returned.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    phantom = (
        isinstance(path, str)
        and getattr(getattr(main, "__spec__", None), "name", None) is None
        and not os.path.exists(path)
    )
    if not phantom:
        return start()
    del main.__file__  # type: ignore[union-attr]
    try:
        return start()
    finally:
        main.__file__ = path  # type: ignore[union-attr]


def start_process(start: Callable[[], Any], forks_here: bool = True) -> Any:
    """Call ``start`` (e.g. ``process.start``) from a thread that lives as long as the child.

    On the main thread it runs right here. Elsewhere it runs on a launcher
    thread, so a worker's parent-death signal, which follows the thread that
    forked it, fires only when the process dies; the launcher ends once no
    process it started is alive
    ([`retire_launcher`][easycore.common.parallel._os.lifeline.retire_launcher]).

    Args:
        start (callable): starts the process.
        forks_here (bool): whether ``start`` forks in the calling thread
            (``fork`` and ``spawn`` do). A ``forkserver`` worker is forked by the
            server, so its start runs on the calling thread whatever it is.

    Returns:
        Any: what ``start`` returned.
    """
    global _launcher
    if sys.platform.startswith("linux"):
        _prctl()  # inherited by a forked worker
    if (not forks_here or threading.current_thread() is threading.main_thread()
            or not sys.platform.startswith("linux")):
        return start_hiding_phantom_main(start)
    from concurrent.futures import Future

    future: Future = Future()
    with _launcher_lock:  # a retiring launcher takes no request after its answer
        if _launcher is None:
            _launcher = _Launcher()
        _launcher.requests.put((lambda: start_hiding_phantom_main(start), future))
    return future.result()


# ------------------------------------------------------------- descendants
# psutil, not a /proc scan of our own: portable (macOS, BSD), and its Process
# objects remember their creation time, so a kill never reaches a process
# that took a dead one's pid.
def descendants(pid: int) -> List[Any]:
    """The processes below ``pid`` (children, grandchildren ...).

    Args:
        pid (int): the root process.

    Returns:
        list[psutil.Process]: empty when ``pid`` is gone; each remembers its
        creation time, so a later kill can tell a reused pid.
    """
    return descendants_of([pid])[pid]


def descendants_of(roots: Iterable[int]) -> Dict[int, List[Any]]:
    """[`descendants`][easycore.common.parallel._os.lifeline.descendants] of several
    processes: on Linux from each one's ``/proc`` children files, elsewhere from
    one reading of the process table (each reading visits every process:
    milliseconds on a busy machine).

    Args:
        roots (Iterable[int]): process ids.

    Returns:
        dict: each root -> its descendants as ``psutil.Process`` objects.
    """
    roots = list(roots)
    if _proc_children_readable():
        # Linux: each process's children straight from /proc (tens of
        # microseconds per worker), instead of reading every process on the
        # machine (milliseconds; over 100 ms on a loaded node).
        pids = {root: _below(root, _proc_children, int) for root in roots}
        if not any(pids.values()):
            return {root: [] for root in roots}  # the usual case: psutil is not imported
        import psutil

        return {root: _processes(psutil, below) for root, below in pids.items()}
    import psutil

    children: Dict[int, List[Any]] = {}
    for proc in psutil.process_iter(["ppid"]):
        ppid = proc.info.get("ppid")
        if ppid is not None:
            children.setdefault(ppid, []).append(proc)
    return {root: _below(root, lambda pid: children.get(pid, ()), lambda proc: proc.pid)
            for root in roots}


def _below(root: int, children_of: Callable[[int], Iterable[Any]],
           pid_of: Callable[[Any], int]) -> List[Any]:
    """Everything below ``root``: ``children_of(pid)``, then theirs, and so on."""
    out: List[Any] = []
    todo = [root]
    while todo:
        for child in children_of(todo.pop()):
            out.append(child)
            todo.append(pid_of(child))
    return out


@functools.cache
def _proc_children_readable() -> bool:
    """Whether this kernel lists a thread's children in ``/proc/PID/task/TID/children``
    (Linux 3.5+ with ``CONFIG_PROC_CHILDREN``, as every major distribution builds it)."""
    pid = os.getpid()
    return os.path.exists(f"/proc/{pid}/task/{pid}/children")


def _processes(psutil: Any, pids: List[int]) -> List[Any]:
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):  # gone meanwhile: nothing to kill
            procs.append(psutil.Process(pid))  # remembers its creation time
    return procs


def _proc_children(pid: int) -> List[int]:
    """The ids of ``pid``'s children, from each of its threads' ``children`` file
    (a child belongs to the thread that forked it)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []  # gone: its children were re-parented, nothing is ours below it
    kids: List[int] = []
    for tid in tids:
        # None: the thread ended meanwhile (its children moved to another)
        kids += _task_children(pid, int(tid)) or []
    return kids


def _task_children(pid: int, tid: int) -> Optional[List[int]]:
    """The ids of the children of thread ``tid`` of ``pid`` (a child belongs to
    the thread that forked it); None if its ``children`` file cannot be read."""
    try:
        with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
            return [int(k) for k in f.read().split()]
    except (OSError, ValueError):
        return None


def kill_pids(procs: List[Any], sig: int = 9) -> None:
    """Send ``sig`` to each process that is still the one that was found.

    Args:
        procs (list): from [`descendants`][easycore.common.parallel._os.lifeline.descendants].
        sig (int): the signal (SIGKILL by default).
    """
    if not procs:
        return  # the usual case: psutil is not imported
    import psutil

    for proc in procs:
        try:
            # send_signal checks the pid still names the process found (by
            # its creation time) and raises NoSuchProcess otherwise.
            proc.send_signal(sig)
        except (psutil.Error, OSError):
            continue  # gone, reused, or not ours to signal
