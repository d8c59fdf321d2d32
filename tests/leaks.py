"""The suite's one leak checker: processes, threads, shared memory, descriptors, files.

Each test area's ``no_leaks`` fixture is a few lines that call :func:`check_leaks` with
that area's allowances (which shared-memory names are its own, which threads and
descriptors live as long as the process by design, which directory must end empty).
The checks themselves live here once, so a fix or a tighter check reaches every area.

What counts as a leak, after the test's body returned:

- a child process (recursive) that was not there before, other than multiprocessing's
  long-lived helpers (resource tracker, forkserver);
- a live thread that was not there before, unless allowed by name or predicate;
- a directory given as ``empty_dir`` that holds any file;
- a ``/dev/shm`` segment named after this process (or a pid the test tracked) that was
  not there before; names are matched by pattern, so other test sessions sharing the
  machine stay out of the check;
- (with ``fds=True``) an open file descriptor of this process that was not open before,
  unless it is a process-wide one or its target is allowed.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
from typing import Callable, Collection, Iterable, Iterator, List, Optional, Set

import psutil
from processes import stray_children

SHM_DIR = "/dev/shm"
#: easycore's transports name segments ``<tag>-<pid hex>-...``: runners (``ecp``),
#: torch runners (``ect``), item slots (``ecs``).
EASYCORE_SHM = ("ecp-{pid:x}-", "ect-{pid:x}-")


class Leaks:
    """What a test hands back to the checker: more pids whose shared memory is checked."""

    def __init__(self) -> None:
        self.pids = {os.getpid()}

    def track(self, *pids: Optional[int]) -> None:
        """Also check shared memory named after these processes (services, pool workers)."""
        self.pids.update(p for p in pids if p is not None)


def shm_segments(patterns: Iterable[str] = EASYCORE_SHM,
                 pids: Optional[Iterable[int]] = None) -> List[str]:
    """Segments in ``/dev/shm`` whose name starts with a pattern formatted with a pid.

    Args:
        patterns: ``str.format`` templates with a ``pid`` field, e.g. ``"ecp-{pid:x}-"``.
        pids: the processes whose segments to list (default: this one).
    """
    if not os.path.isdir(SHM_DIR):
        return []
    pids = [os.getpid()] if pids is None else list(pids)
    prefixes = tuple(p.format(pid=pid) for p in patterns for pid in pids)
    return sorted(f for f in os.listdir(SHM_DIR) if f.startswith(prefixes))


def open_fds() -> Set[str]:
    """This process's open file descriptors (Linux; empty elsewhere).

    The listing's own descriptor (closed once it returns) is left out: its number is the
    lowest free one, so it would otherwise show as new whenever a kept one took its place.
    """
    try:
        listed = os.listdir("/proc/self/fd")
    except OSError:
        return set()
    return {fd for fd in listed if _is_open(int(fd))}


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def describe_fds(fds: Iterable[str]) -> list:
    """``(fd, target)`` pairs for an assertion message."""
    return [(fd, _target(fd) or "?") for fd in sorted(fds, key=int)]


def _target(fd: str) -> Optional[str]:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


# -- allowances shared by several areas ------------------------------------------------

def forkserver_fd() -> Set[str]:
    """The forkserver's liveness pipe (the forkserver is started once per interpreter)."""
    try:
        from multiprocessing import forkserver

        alive = forkserver._forkserver._forkserver_alive_fd  # type: ignore[attr-defined]
    except (ImportError, AttributeError):
        return set()
    return set() if alive is None else {str(alive)}


def resource_sharer_thread(thread: threading.Thread) -> bool:
    """multiprocessing's resource sharer thread (hands descriptors to other processes:
    torch's tensor sharing); started once per process and kept by design."""
    from multiprocessing import resource_sharer

    sharer = getattr(resource_sharer, "_resource_sharer", None)
    return thread is getattr(sharer, "_thread", None)


def resource_sharer_fds() -> Set[str]:
    """The resource sharer's listening socket (kept with its thread, see above)."""
    from multiprocessing import resource_sharer

    listener = getattr(getattr(resource_sharer, "_resource_sharer", None), "_listener", None)
    try:
        return {str(listener._listener._socket.fileno())}  # type: ignore[union-attr]
    except AttributeError:  # not started (or another Python's internals)
        return set()


# -- the check --------------------------------------------------------------------------

@contextlib.contextmanager
def check_leaks(
    *,
    shm: Collection[str] = EASYCORE_SHM,
    allowed_threads: Collection[str] = (),
    allowed_thread: Optional[Callable[[threading.Thread], bool]] = None,
    fds: bool = False,
    process_wide_fds: Collection[Callable[[], Set[str]]] = (),
    allowed_fd_target: Optional[Callable[[str], bool]] = None,
    empty_dir: Optional[str] = None,
    process_grace: float = 2.0,
    shm_grace: float = 0.0,
) -> Iterator[Leaks]:
    """Fail (``AssertionError``) if the block leaves processes, threads, files,
    shared memory or (with ``fds``) file descriptors behind.

    Args:
        shm: patterns of this area's segment names (see :func:`shm_segments`).
        allowed_threads: names of threads that may be new (made once per process).
        allowed_thread: a predicate for other such threads.
        fds: also check this process's file descriptors (Linux); starts the resource
            tracker first (its pipe lives as long as the process), allows the
            forkserver's liveness pipe (the same) and collects garbage before
            looking (a worker's sentinel closes when its Process is collected).
        process_wide_fds: callables naming other descriptors that may be new, asked
            after the block (e.g. :func:`resource_sharer_fds`).
        allowed_fd_target: a predicate on a new descriptor's ``readlink`` target.
        empty_dir: a directory that must hold no file afterwards (services' sockets).
        process_grace: seconds to wait for strays to go: calls join everything before
            they return, so this only absorbs psutil's view lagging.
        shm_grace: seconds to wait for new segments to go (a service sweeps a dead
            client's segments when it sees the EOF).
    """
    leaks = Leaks()
    if fds:
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()  # started once per interpreter: no leak
    threads_before = set(threading.enumerate())
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    shm_before = set(shm_segments(shm, leaks.pids))
    fds_before = open_fds() if fds else set()
    yield leaks

    strays = _settle(lambda: stray_children(children_before), process_grace)
    assert not strays, f"leaked processes: {[_describe_process(p) for p in strays]}"

    new_threads = [t for t in threading.enumerate()
                   if t not in threads_before and t.is_alive() and t.name not in allowed_threads
                   and not (allowed_thread and allowed_thread(t))]
    assert not new_threads, f"leaked threads: {new_threads}"

    if empty_dir is not None:
        files = [os.path.relpath(os.path.join(d, f), empty_dir)
                 for d, _, names in os.walk(empty_dir) for f in names]
        assert not files, f"leaked socket files or registry entries: {files}"

    leaked_shm = _settle(lambda: sorted(set(shm_segments(shm, leaks.pids)) - shm_before),
                         shm_grace)
    assert not leaked_shm, f"leaked shared memory: {leaked_shm}"

    if fds:
        gc.collect()  # a failed call's traceback may hold a sentinel in a cycle
        leaked_fds = open_fds() - fds_before
        # The forkserver is started once per interpreter, by whichever test first
        # takes it (the default start method of Python 3.14): its pipe is no leak.
        leaked_fds -= forkserver_fd()
        for allowance in process_wide_fds:
            leaked_fds -= allowance()
        if allowed_fd_target is not None:
            leaked_fds = {fd for fd in leaked_fds
                          if not allowed_fd_target(_target(fd) or "")}
        assert not leaked_fds, f"leaked file descriptors: {describe_fds(leaked_fds)}"


def _settle(probe: Callable[[], list], grace: float) -> list:
    """``probe()`` until it is empty or ``grace`` seconds passed; its last answer."""
    deadline = time.monotonic() + grace
    found = probe()
    while found and time.monotonic() < deadline:
        time.sleep(0.05)
        found = probe()
    return found


def _describe_process(proc: psutil.Process) -> tuple:
    try:
        status = proc.status()
    except psutil.Error:
        return proc.pid, "gone"
    try:
        return proc.pid, status, " ".join(proc.cmdline())[:200]
    except psutil.Error:  # a zombie has no command line left
        return proc.pid, status
