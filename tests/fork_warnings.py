"""A test fails if a fork in it came from a process with threads.

CPython 3.12+ warns ("This process ... is multi-threaded, use of fork() may
lead to deadlocks in the child", a ``DeprecationWarning``) after such a fork,
and then clears the exception a ``-W error`` filter makes of it, so ``-W
error::DeprecationWarning`` cannot fail a test for it. This plugin records the
warnings of each test phase itself (and hands every one on to pytest's own
recording) and fails the phase that forked so. A test that forks while threads
run on purpose (the case it tests) is marked ``forks_with_threads``.

Before 3.12 (CI's main run, and the only Python the torch and distributed
suites run on), an ``os.register_at_fork`` hook notes each ``os.fork`` made
while another Python thread runs, as the same warning (not a subprocess's
fork for its ``preexec_fn``, which CPython does not warn about either). It
cannot see a native library's threads (3.12 counts the kernel's), and it
leaves out ``multiprocessing.resource_sharer``'s thread, which torch's own
tensor sharing starts and keeps (as the leak checks do).
"""

from __future__ import annotations

import multiprocessing
import os
import re
import subprocess
import sys
import threading
import warnings

import pytest

FORK_WARNING = "is multi-threaded, use of fork() may lead to deadlocks"
MARKER = "forks_with_threads"
ACTIVE = sys.version_info >= (3, 12)

#: before 3.12: the forks noted by the hook since the phase began, as warnings
_noted: list = []
_MULTIPROCESSING = os.path.dirname(multiprocessing.__file__) + os.sep


def _note_fork() -> None:
    """``os.register_at_fork``'s ``before``: note a fork while another Python thread runs."""
    from leaks import resource_sharer_thread

    frame = sys._getframe(1)
    if frame.f_code.co_filename == subprocess.__file__:
        return  # a subprocess with a preexec_fn: exec follows, and CPython does not warn
    me = threading.current_thread()
    others = [t.name for t in threading.enumerate()
              if t is not me and not resource_sharer_thread(t)]
    if not others and me is threading.main_thread():
        return
    while frame is not None and (frame.f_code.co_filename == os.__file__
                                 or frame.f_code.co_filename.startswith(_MULTIPROCESSING)):
        frame = frame.f_back  # the code that asked for the fork
    where = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else ("?", 0)
    _noted.append(warnings.WarningMessage(
        DeprecationWarning(f"This process (pid={os.getpid()}) {FORK_WARNING} in the child "
                           f"(Python threads running: {others}; fork from {me.name})"),
        DeprecationWarning, *where))


if not ACTIVE and hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_note_fork)


def _checked(item: pytest.Item):
    """Run one phase of ``item``, failing it if a fork came from a process with threads."""
    with warnings.catch_warnings(record=True) as caught:
        # pytest's own filters stay (they were copied): only what it would record
        # is kept here, so no ignored warning keeps its source (a file) alive.
        warnings.filterwarnings("always", message=f".*{re.escape(FORK_WARNING)}",
                                category=DeprecationWarning)
        del _noted[:]
        result = yield
    forked = []
    caught = [*caught, *_noted]
    del _noted[:]
    for w in caught:
        if issubclass(w.category, DeprecationWarning) and FORK_WARNING in str(w.message):
            forked.append(w)
        # pytest's own recording (the warnings summary, -W filters) still gets it
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    if forked and item.get_closest_marker(MARKER) is None:
        where = sorted({f"{w.filename}:{w.lineno}" for w in forked})
        running = [t.name for t in threading.enumerate()]
        pytest.fail(f"{len(forked)} fork(s) from a process with threads ({', '.join(where)}); "
                    f"threads running now: {running}: {forked[0].message}", pytrace=False)
    return result


if ACTIVE or hasattr(os, "register_at_fork"):
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(item):
        return (yield from _checked(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(item):
        return (yield from _checked(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(item):
        return (yield from _checked(item))
