"""Where a worker is now: its Python stack, read from outside without stopping it.

A worker installs [`install`][easycore.common.parallel._os.stacks.install] once
at start: ``faulthandler`` then dumps every thread's stack into the worker's
dump file when the process gets :data:`SIGNAL`. The dump is written by a C
signal handler, so it needs nothing from the worker's Python code: it works
while the worker is stuck in a loop, sleeping, blocked on a lock, or running C
code that holds the GIL (faulthandler reads the thread states without it).
The caller owns the file; [`request`][easycore.common.parallel._os.stacks.request]
signals one or many workers at once and reads what each wrote, within a
deadline.

The file holds only what faulthandler writes: file names, line numbers and
function names. Never local variables, arguments or data.

Each worker's file is made by the caller
([`DumpFile`][easycore.common.parallel._os.stacks.DumpFile]), opened by the
worker at start and then unlinked by it: from then on it exists only as two
open descriptors, so nothing is left on disk whoever dies first. A worker the
caller forks itself (Linux) gets a file with no name at all, in memory.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import os
import re
import signal
import sys
import tempfile
import threading
import time
import types

from .._named_tuples import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Dict, Iterable, List, Optional, Tuple

__all__ = [
    "SIGNAL",
    "AVAILABLE",
    "DumpFile",
    "Frame",
    "Stack",
    "install",
    "request",
    "parse",
    "of_thread",
    "describe",
    "summary",
    "note",
]

#: The signal that asks a worker for its stacks: a real-time signal where the
#: platform has them (nothing else uses it; queued, so two requests are two
#: dumps), else ``SIGUSR2``.
SIGNAL: Optional[int] = None
if hasattr(signal, "SIGRTMIN"):
    SIGNAL = int(signal.SIGRTMIN) + 6
elif hasattr(signal, "SIGUSR2"):
    SIGNAL = int(signal.SIGUSR2)

#: whether stacks can be asked for on this platform (POSIX signals)
AVAILABLE = SIGNAL is not None and hasattr(faulthandler, "register")

_MAIN_MARK = "easycore-main-thread "
# Where a worker's own code starts: the frames outer than these are how it was
# started (a forked worker also shows the caller's frames at the fork).
_ENTRIES = {("process_main", os.path.join("worker", "loop.py")),
            ("_run", os.path.join("backends", "thread.py"))}
# The two patterns a dump is read with, as re.compile takes them: compiled on the
# first parse (re's own cache), not at import (0.3 ms of every import).
_THREAD = (r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[(.*?)\])? "
           r"\(most recent call first\):$")
_FRAME = r'^  File "(.*)", line (\d+|\?\?\?) in (.*)$'
# How long a dump may take to appear once signalled, and how long it must stay
# the same size to count as complete (faulthandler writes it in one go, from a
# signal handler: microseconds, unless the machine is swapping).
_SETTLE = 0.02


class Frame(NamedTuple):
    """One frame of a captured stack."""

    function: str
    file: str
    line: Optional[int]

    def __str__(self) -> str:
        return f"{self.function} ({self.file}:{self.line if self.line is not None else '?'})"


class Stack(NamedTuple):
    """The stacks of one worker's threads, innermost frame first in each.

    Attributes:
        threads (list): ``(name, frames)`` pairs, the main thread (the one that
            runs tasks) first.
    """

    threads: List[Tuple[str, List[Frame]]]

    @property
    def main(self) -> List[Frame]:
        """The frames of the thread that runs tasks, innermost first."""
        return self.threads[0][1] if self.threads else []

    def user_frame(self) -> Optional[Frame]:
        """The innermost frame of the main thread that is neither easycore's nor the
        standard library's, nor an installed package's (``site-packages``, such
        as torch's) if there is one of the caller's own: where the user's code was."""
        frames = [f for f in self.main if not _is_library(f.file)]
        for frame in frames:
            if not frame.file.startswith(_library_dirs().site):
                return frame
        return frames[0] if frames else None

    def innermost(self) -> Optional[Frame]:
        """The innermost frame of user code, else of the main thread (None: no frame)."""
        return self.user_frame() or (self.main[0] if self.main else None)

    def where(self) -> str:
        """``"; it was in f (file:line)"``: the innermost frame, as the end of an
        error's first line."""
        frame = self.innermost()
        return f"; it was in {frame}" if frame is not None else ""

    def __str__(self) -> str:
        lines: List[str] = []
        for name, frames in self.threads:
            lines.append(f"{name} (innermost first):")
            lines.extend(f"  {f}" for f in frames)
            if not frames:
                lines.append("  (no Python frame)")
        return "\n".join(lines)


def _dirs(*dirs: Optional[str]) -> Tuple[str, ...]:
    return tuple({os.path.join(d, "") for d in dirs if d})


class _Dirs(NamedTuple):
    stdlib: Tuple[str, ...]
    site: Tuple[str, ...]
    easycore: Tuple[str, ...]


@functools.cache
def _library_dirs() -> _Dirs:
    """Where the standard library, installed packages and easycore-parallel live (read
    when a stack is first read: sysconfig is not worth a short script's start)."""
    import sysconfig

    paths = sysconfig.get_paths()
    return _Dirs(_dirs(paths.get("stdlib"), paths.get("platstdlib")),
                 _dirs(paths.get("purelib"), paths.get("platlib")),
                 _dirs(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _is_library(path: str) -> bool:
    """Whether a frame's file is easycore-parallel's or the standard library's."""
    dirs = _library_dirs()
    if path.startswith(dirs.easycore) or path.startswith("<frozen"):
        return True
    return path.startswith(dirs.stdlib) and not path.startswith(dirs.site)


class DumpFile:
    """The caller's half of one worker's dump file.

    Made before the worker starts; ``path`` goes to the worker, which opens it
    with [`install`][easycore.common.parallel._os.stacks.install] and unlinks
    it. ``close`` releases the caller's descriptor (and the name, if the worker
    never got that far).

    For a worker this process forks itself (``inherited``), on Linux, the file
    is an anonymous one in memory (``memfd_create``) that the worker inherits
    and opens as ``/proc/self/fd/N``: no name in a temporary directory to make
    and remove (a file system's metadata, the slowest part of a forked worker's
    start in a container's overlay ``/tmp``), nothing on disk ever.
    """

    def __init__(self, inherited: bool = False) -> None:
        """
        Args:
            inherited (bool): the worker is forked by this process (not by a zygote
                or a fork server, not spawned) after this file is made.
        """
        fd = _memfd() if inherited else None
        if fd is not None:
            self.path = f"{_SELF_FD}/{fd}"
        else:
            fd, self.path = tempfile.mkstemp(prefix=f"easycore-stack-{os.getpid()}-")
        self._fd: Optional[int] = fd
        self._owner = os.getpid()
        self._lock = threading.Lock()

    def offset(self) -> int:
        """How many bytes the file holds now."""
        return os.fstat(self._require()).st_size

    def read_from(self, start: int) -> str:
        """What the worker wrote after ``start``."""
        fd = self._require()
        size = os.fstat(fd).st_size
        return os.pread(fd, max(0, size - start), start).decode("utf-8", "replace")

    def _require(self) -> int:
        if self._fd is None:
            raise ValueError("the dump file is closed")
        return self._fd

    def close(self) -> None:
        """Release the caller's descriptor and the name (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
            # A forked worker's inherited copy must not remove a sibling's file
            # before that sibling opened it.
            if os.getpid() == self._owner and not self.path.startswith(_SELF_FD):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)

    def __del__(self) -> None:  # the engine closes it; this is the safety net
        with contextlib.suppress(Exception):
            self.close()


_SELF_FD = "/proc/self/fd"


def _memfd() -> Optional[int]:
    """A new anonymous file in memory (Linux), or None where there is none to be had
    (no ``memfd_create``, no ``/proc``, or the call failed)."""
    global _MEMFD_WORKS
    if _MEMFD_WORKS is None:
        _MEMFD_WORKS = hasattr(os, "memfd_create") and os.path.isdir(_SELF_FD)
    if not _MEMFD_WORKS:
        return None
    try:
        return os.memfd_create("easycore-stack", os.MFD_CLOEXEC)
    except OSError:
        return None


_MEMFD_WORKS: Optional[bool] = None


def install(path: Optional[str]) -> bool:
    """In a worker: dump every thread's stack into ``path`` on :data:`SIGNAL`.

    The file is opened for appending and unlinked (the caller keeps its own
    descriptor). The first line names the main thread, so the caller can tell
    it from the others.

    Args:
        path (str or None): the caller's dump file; None does nothing.

    Returns:
        bool: whether stacks can now be asked for.
    """
    if path is None or not AVAILABLE:
        return False
    assert SIGNAL is not None
    try:
        f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the worker
    except OSError:
        return False
    if not path.startswith(_SELF_FD):  # (an inherited file has no name to remove)
        with contextlib.suppress(OSError):
            os.unlink(path)
    global _installed
    _installed = f  # faulthandler keeps the descriptor, not the object
    faulthandler.register(SIGNAL, file=f, all_threads=True, chain=False)
    # Written once the handler is in place: the caller signals only a worker
    # whose file has it (the signal's default action ends a process).
    f.write(f"{_MAIN_MARK}0x{threading.main_thread().ident or 0:016x}\n")
    f.flush()
    return True


_installed = None


def request(
    targets: Iterable[Tuple[object, int, DumpFile]], timeout: float = 1.0
) -> Dict[object, Optional[Stack]]:
    """Signal every target at once; read each one's stacks.

    Args:
        targets: ``(key, pid, dump_file)`` triples.
        timeout (float): seconds to wait for all of them together.

    Returns:
        dict: ``{key: Stack}``; None for a worker that did not answer in time
        (gone, or not started far enough to have installed the handler).
    """
    pending: Dict[object, Tuple[DumpFile, int, List[int]]] = {}
    out: Dict[object, Optional[Stack]] = {}
    for key, pid, dump in targets:
        out[key] = None
        if not AVAILABLE or dump is None:
            continue
        try:
            dump._lock.acquire()
            start = dump.offset()
            if start == 0:
                # Not installed yet (the worker still boots): the signal's
                # default action would kill it.
                raise ValueError("no handler yet")
            os.kill(pid, SIGNAL)  # type: ignore[arg-type]
        except (OSError, ValueError):
            dump._lock.release()
            continue
        pending[key] = (dump, start, [start, 0])
    deadline = time.monotonic() + timeout
    try:
        while pending and time.monotonic() < deadline:
            time.sleep(_SETTLE / 2)
            now = time.monotonic()
            for key in list(pending):
                dump, start, seen = pending[key]
                size = dump.offset()
                if size > seen[0]:
                    seen[0], seen[1] = size, 0
                elif size > start:
                    seen[1] += 1
                    if seen[1] < 2 and now < deadline:
                        continue
                    stack = parse(dump.read_from(start), _main_ident(dump))
                    if not _complete(stack, dump) and now < deadline:
                        # The handler was descheduled mid-dump (it writes in
                        # many small pieces): wait for the rest.
                        seen[1] = 0
                        continue
                    out[key] = stack
                    del pending[key]
                    dump._lock.release()
    finally:
        for key, (dump, start, _) in pending.items():
            text = dump.read_from(start) if dump._fd is not None else ""
            out[key] = parse(text, _main_ident(dump)) if text.strip() else None
            dump._lock.release()
    return out


def _complete(stack: Stack, dump: DumpFile) -> bool:
    """Whether a dump looks whole: it holds the main thread (faulthandler writes it
    last), or at least one thread where the main one is not known."""
    if not stack.threads:
        return False
    return _main_ident(dump) is None or stack.threads[0][0] == "main thread"


def _main_ident(dump: DumpFile) -> Optional[str]:
    if dump._fd is None:
        return None
    head = os.pread(dump._fd, 80, 0).decode("ascii", "replace")
    if head.startswith(_MAIN_MARK):
        return head[len(_MAIN_MARK):].split("\n", 1)[0].strip().lower()
    return None


def parse(text: str, main_ident: Optional[str] = None) -> Stack:
    """Turn a faulthandler dump into a [`Stack`][easycore.common.parallel._os.stacks.Stack].

    Args:
        text (str): what faulthandler wrote (one dump).
        main_ident (str or None): the main thread's id as ``0x%016x``, to put
            it first and name it.

    Returns:
        Stack: every thread, the main one first, innermost frame first.
    """
    threads: List[Tuple[str, str, List[Frame]]] = []
    for line in text.splitlines():
        head = re.match(_THREAD, line)
        if head:
            ident = head.group(2).lower()
            threads.append((ident, head.group(3) or "", []))
            continue
        frame = re.match(_FRAME, line)
        if frame and threads:
            number = frame.group(2)
            line_no = int(number) if number.isdigit() else None
            threads[-1][2].append(Frame(frame.group(3), frame.group(1), line_no))
    named: List[Tuple[str, List[Frame]]] = []
    main: List[Tuple[str, List[Frame]]] = []
    for ident, tname, frames in threads:
        frames = _from_entry(frames)
        if main_ident is not None and ident == main_ident:
            main.append(("main thread", frames))
        else:
            named.append((f"thread {tname or ident}", frames))
    return Stack(main + named)


def of_thread(ident: Optional[int]) -> Optional[Stack]:
    """The stack of one thread of this process (the thread back-end's workers).

    Read from ``sys._current_frames()`` without stopping the thread; like a
    dump, it keeps only function names, files and lines.

    Args:
        ident (int or None): the thread's ``ident``.

    Returns:
        Stack or None: that thread alone, as the "main thread" of its worker;
        None if it is not running.
    """
    frame: Optional[types.FrameType] = sys._current_frames().get(ident) if ident else None
    if frame is None:
        return None
    frames: List[Frame] = []
    while frame is not None:
        code = frame.f_code
        frames.append(Frame(code.co_name, code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return Stack([("main thread", _from_entry(frames))])


def _from_entry(frames: List[Frame]) -> List[Frame]:
    """``frames`` (innermost first) up to the worker's entry point, if it is there."""
    easycore = _library_dirs().easycore
    for k, f in enumerate(frames):
        if any(f.function == fn and f.file.endswith(tail) and f.file.startswith(easycore)
               for fn, tail in _ENTRIES):
            return frames[: k + 1]
    return frames


def describe(stack: Optional[Stack]) -> str:
    """One phrase for an error message: where the main thread was."""
    return "" if stack is None else stack.where()


def summary(found: Dict[int, Optional[Stack]]) -> str:
    """Where each worker was, in one line: ``"worker 0 was in f (file:line); ..."``.

    Args:
        found (dict): ``{worker: Stack or None}`` (``request``'s answer).

    Returns:
        str: "" when no stack was read.
    """
    return "; ".join(f"worker {w}{s.where().replace('; it', '', 1)}"
                     for w, s in sorted(found.items()) if s is not None and s.where())


def note(exc: BaseException, found: Dict[int, Optional[Stack]]) -> None:
    """Add where the workers were to ``exc``'s traceback (a Ctrl-C that stopped
    them): a note, on Python 3.11 and later; ``exc.worker_stacks`` everywhere."""
    text = summary(found)
    if not text:
        return
    exc.worker_stacks = dict(found)  # type: ignore[attr-defined]
    if hasattr(exc, "add_note"):
        exc.add_note(f"easycore: the busy workers were stopped there: {text}")
