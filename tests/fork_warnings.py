"""On CPython 3.12+, a test fails if a fork in it came from a process with threads.

CPython warns ("This process ... is multi-threaded, use of fork() may lead to
deadlocks in the child", a ``DeprecationWarning``) after such a fork, and then
clears the exception a ``-W error`` filter makes of it, so ``-W
error::DeprecationWarning`` cannot fail a test for it. This plugin records the
warnings of each test phase itself (and hands every one on to pytest's own
recording) and fails the phase that forked so. A test that forks while threads
run on purpose (the case it tests) is marked ``forks_with_threads``.
"""

from __future__ import annotations

import re
import sys
import threading
import warnings

import pytest

FORK_WARNING = "is multi-threaded, use of fork() may lead to deadlocks"
MARKER = "forks_with_threads"
ACTIVE = sys.version_info >= (3, 12)


def _checked(item: pytest.Item):
    """Run one phase of ``item``, failing it if a fork came from a process with threads."""
    with warnings.catch_warnings(record=True) as caught:
        # pytest's own filters stay (they were copied): only what it would record
        # is kept here, so no ignored warning keeps its source (a file) alive.
        warnings.filterwarnings("always", message=f".*{re.escape(FORK_WARNING)}",
                                category=DeprecationWarning)
        result = yield
    forked = []
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


if ACTIVE:
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(item):
        return (yield from _checked(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(item):
        return (yield from _checked(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(item):
        return (yield from _checked(item))
