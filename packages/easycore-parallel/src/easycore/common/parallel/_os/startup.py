"""Workers started in a fresh interpreter (``spawn``, ``forkserver``): the main
script's guard, and a forkserver that starts them warm.

* **The guard.** A worker started with ``spawn`` or ``forkserver`` imports the
  caller's main script again (as ``__mp_main__``) before it runs anything.
  A script that starts workers at its top level, not under ``if __name__ ==
  "__main__":``, would start them again from there: the standard library
  refuses with its bootstrapping ``RuntimeError``, each worker dies, and the
  caller sees only ``exit code 1``.
  [`check_main_guard`][easycore.common.parallel._os.startup.check_main_guard]
  (called by every local back-end before it starts a worker) notices it in
  the worker, says so on its standard error and exits with ``EXIT_NO_GUARD``;
  the caller turns that exit into
  [`MainGuardError`][easycore.common.parallel._os.startup.MainGuardError],
  which names the script and the one-line fix. Python 3.14 made
  ``forkserver`` the default on Linux: every script that never thought
  about it takes this path. Since Python 3.14.1 and 3.13.8 the fork server
  itself imports the main script before it forks any worker (it preloads
  ``__main__``, which never worked before): it exits the same way, the
  worker's start fails with the standard library's bare ``EOFError``, and
  [`start_worker`][easycore.common.parallel._os.startup.start_worker] turns
  that into the same error.
* **A warm forkserver.** [`warm_forkserver`][easycore.common.parallel._os.startup.warm_forkserver]
  adds easycore's worker modules to the forkserver's preload list before
  the server starts, so each worker forked from it has them imported already
  (the server imports them once). The user's own list is kept (easycore's
  modules are added to it); a server already running is left as it is; a
  user who wants none of it sets ``EASYCORE_FORKSERVER_PRELOAD=0``.
  [`start_forkserver`][easycore.common.parallel._os.startup.start_forkserver]
  starts it as soon as a back-end knows it needs it, so that it boots while
  the client finishes its own set-up.
"""

from __future__ import annotations

import os
import sys

from ..errors import WorkerDiedError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, List, Optional, Tuple

__all__ = ["EXIT_NO_GUARD", "ForkServerExited", "MainGuardError", "PRELOAD", "WORKER_MODULES",
           "check_main_guard", "start_forkserver", "start_worker", "warm_forkserver"]

#: a worker's exit code for "the main script started workers while a worker imported it"
EXIT_NO_GUARD = 87

#: what a worker imports to run a pool's or a runner's program (its loop, the
#: programs, the device policy and transport it unpickles, its ``cfg``'s class):
#: imported once by a warm forkserver
WORKER_MODULES = (
    "easycore.common.parallel.worker.loop",
    "easycore.common.parallel.pool.program",
    "easycore.common.parallel.backends.policy",
    "easycore.common.config",
)
#: what easycore adds to the forkserver's preload list: the worker modules, and the
#: module that makes the server's own exit quick (``_os.server_exit``)
PRELOAD = (*WORKER_MODULES, "easycore.common.parallel._os.server_exit")

_FIX = ('put the code that starts them under `if __name__ == "__main__":` (a worker '
        "started with 'spawn' or 'forkserver' imports the main script again, and then it "
        "must not start workers: it only needs the script's functions and classes)")


def _script() -> str:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return f"the main script {path}" if isinstance(path, str) else "the main module"


class MainGuardError(WorkerDiedError, RuntimeError):
    """A worker died because the main script starts workers at import time.

    Under ``spawn`` and ``forkserver`` (the default on Linux from Python 3.14,
    ``spawn`` on macOS) each worker imports the main script again; a script
    that starts a pool or runner at its top level, without ``if __name__ ==
    "__main__":``, would start workers from every worker. A
    [`WorkerDiedError`][easycore.common.parallel.WorkerDiedError] (and a
    ``RuntimeError``, as the standard library's error for the same mistake)
    whose message names the script and the fix.
    """

    def __init__(self, device: str, worker_index: int, pid: Optional[int],
                 exitcode: Optional[int], items: Any = None, oom_kills: Optional[int] = None,
                 method: str = "spawn", by_server: bool = False) -> None:
        super().__init__(device, worker_index, pid, exitcode, items, oom_kills)
        self.method = method
        #: whether the fork server died importing the script (Python 3.13.8, 3.14.1 on)
        self.by_server = by_server
        importer = ("the fork server imports it before it forks any worker (Python 3.13.8 "
                    "and 3.14.1 on)" if by_server else
                    f"a worker started with {method!r} imports it again")
        self.args = (
            f"worker {worker_index} on device {device!r} (pid {pid}) could not start: "
            f"{_script()} starts worker processes when it is imported, and {importer}. "
            f"Fix: {_FIX}.",)

    def __reduce__(self) -> Any:
        return (type(self), (self.device, self.worker_index, self.pid, self.exitcode, self.items,
                             self.oom_kills, self.method, self.by_server))


class ForkServerExited(WorkerDiedError):
    """A worker could not start: the fork server exited before it forked it.

    Since Python 3.13.8 and 3.14.1 the fork server imports the main script
    before it forks any worker (its ``__main__`` preload); a script that raises
    there ends the server, and the standard library's own error is a bare
    ``EOFError``. This one names the server and where to look (the server's
    standard error, which shows the script's traceback).
    """

    def __init__(self, device: str, worker_index: int, server_pid: Optional[int],
                 exitcode: Optional[int]) -> None:
        super().__init__(device, worker_index, None, exitcode)
        self.server_pid = server_pid
        self.args = (
            f"worker {worker_index} on device {device!r} could not start: the fork server "
            f"(pid {server_pid}) exited with code {exitcode} before it forked it. It imports "
            f"{_script()} first (Python 3.13.8 and 3.14.1 on): its standard error above says "
            f"what failed there.",)

    def __reduce__(self) -> Any:
        return (type(self), (self.device, self.worker_index, self.server_pid, self.exitcode))


def check_main_guard() -> None:
    """Exit this worker with ``EXIT_NO_GUARD`` if it is importing the main script
    and that script is starting workers now.

    Called before any worker starts. A ``<module>`` frame named ``__mp_main__``
    on the stack is the main script run again by a starting worker (it is
    only ever run then); its line is named on standard error. Anywhere else
    (a caller, a worker's own pool) it does nothing.
    """
    frame: Any = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__mp_main__":
            break
        frame = frame.f_back
    else:
        return
    sys.stderr.write(
        f"easycore: {frame.f_code.co_filename}, line {frame.f_lineno}, starts worker "
        f"processes when the script is imported, and this process (pid {os.getpid()}), "
        f"started by multiprocessing, is importing it. Fix: {_FIX}.\n")
    sys.stderr.flush()
    # os._exit, not SystemExit: the forkserver's child turns any exit of its
    # own into code 1, and nothing of this half-started worker needs cleaning.
    os._exit(EXIT_NO_GUARD)


def warm_forkserver(context: Any) -> None:
    """Add ``PRELOAD`` to the forkserver's preload list, unless it runs already.

    ``multiprocessing`` has one forkserver per process, and its preload list
    only counts before it starts: then this keeps what the user set
    (``set_forkserver_preload``) and adds easycore's worker modules, so that
    every worker forked from the server has them imported. A server already
    running (the user's, or an earlier pool's) is left as it is.
    ``EASYCORE_FORKSERVER_PRELOAD=0`` turns it off.

    Args:
        context (multiprocessing.context.BaseContext): a ``forkserver`` context.
    """
    if os.environ.get("EASYCORE_FORKSERVER_PRELOAD", "1") == "0":
        return
    from .lifeline import fork_server

    server = fork_server()
    # No public way to ask whether the server runs nor what it preloads:
    # without these attributes (another Python), nothing is changed.
    if server is None or not hasattr(server, "_preload_modules"):
        return
    if getattr(server, "_forkserver_pid", None) is not None:
        return
    current: List[str] = list(server._preload_modules or [])
    wanted = current + [m for m in PRELOAD if m not in current]
    if wanted != current:
        context.set_forkserver_preload(wanted)


def start_worker(process: Any, method: str = "fork", device: str = "?", slot: int = 0) -> None:
    """Start a worker's process as every worker of the process back-end starts.

    From a thread that lives as long as the worker (``lifeline.start_process``:
    its parent-death signal follows that thread), with SIGINT blocked until
    the worker ignores it: a Ctrl-C meanwhile is the caller's, never a death in
    multiprocessing's bootstrap.

    Args:
        process (multiprocessing.Process): not started yet (or the zygote's).
        method (str): its start method (a ``forkserver`` worker is forked by the
            server, whatever thread asks).
        device (str): the worker's device, for the error below.
        slot (int): the worker's index, for the error below.

    Raises:
        MainGuardError: the fork server died importing a main script that starts
            workers at its top level (the start failed with ``EOFError`` or a
            ``ConnectionError``).
        ForkServerExited: the fork server died for another reason (a script that
            raised as the server imported it).
    """
    from . import interrupts, lifeline

    def start() -> None:
        with interrupts.blocked_at_start():
            process.start()

    try:
        lifeline.start_process(start, forks_here=method != "forkserver")
    except (EOFError, ConnectionError, FileNotFoundError) as exc:  # (the server's end)
        server = _exited_fork_server() if method == "forkserver" else None
        if server is None:
            raise
        pid, code = server
        if code == EXIT_NO_GUARD:
            raise MainGuardError(device, slot, None, code, method=method,
                                 by_server=True) from exc
        raise ForkServerExited(device, slot, pid, code) from exc


def _exited_fork_server(limit: float = 2.0) -> Optional[Tuple[int, int]]:
    """The fork server's pid and exit code (negative: the signal) once it exited,
    within ``limit`` seconds; None while it runs or where that cannot be known.
    Read without reaping it (``WNOWAIT``): the standard library reaps it when it
    starts the next one."""
    import time

    from .lifeline import fork_server

    pid = getattr(fork_server(), "_forkserver_pid", None)
    flags = ("waitid", "P_PID", "WEXITED", "WNOHANG", "WNOWAIT", "CLD_EXITED")
    if pid is None or not all(hasattr(os, name) for name in flags):
        return None
    deadline = time.monotonic() + limit
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except OSError:  # not our child, or already reaped
            return None
        if info is not None:
            exited = info.si_code == os.CLD_EXITED
            return pid, info.si_status if exited else -info.si_status
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.005)  # its socket closed: its exit follows within moments


def start_forkserver(context: Any) -> None:
    """Start the forkserver now, warm (see ``warm_forkserver``), without waiting for it.

    Called as soon as a back-end knows its workers come from the forkserver,
    before the client's own set-up (its engine, results, option checks): the
    server is a fresh interpreter that imports easycore's worker modules
    (30 ms on the 2-core VM), and it boots meanwhile, not after. Spawning it
    does not wait for its boot; the first worker's start does. A server that
    already runs is left as it is. In a worker importing a script without the
    main guard, this exits first (``check_main_guard``): no server is started
    from there. Call it with the resource tracker running
    (``transport.shm.ensure_tracker``): the standard library's start of the
    tracker unblocks SIGINT on its way out, and the server, started with
    SIGINT blocked here, would inherit an open mask.

    Args:
        context (multiprocessing.context.BaseContext): a ``forkserver`` context.
    """
    check_main_guard()
    warm_forkserver(context)
    from multiprocessing import forkserver

    from . import interrupts, lifeline

    # SIGINT blocked, as around every worker's start: the server and the workers
    # it forks inherit the mask, so a Ctrl-C while one boots is held until it
    # ignores it, never a KeyboardInterrupt in multiprocessing's bootstrap. A
    # server that preloads __main__ must not be handed a path like "<stdin>".
    with interrupts.blocked_at_start():
        lifeline.start_hiding_phantom_main(forkserver.ensure_running)
