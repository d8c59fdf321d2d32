"""``lifeline.descendants``: what a worker started, found before it is killed.

On Linux it reads ``/proc/PID/task/TID/children`` (a child belongs to the
thread that forked it), elsewhere it reads the whole process table; both must
find the same tree: children of the main thread and of other threads, and
their own children.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from _parallel_helpers import _Collect
from _parallel_support import wait_gone

from easycore.common.parallel import UnorderedRunner
from easycore.common.parallel._os import lifeline

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's"),
]

# A process that starts a child from its main thread, one from a thread that
# then ends, one from a thread that stays, and a grandchild; it prints their
# pids and waits.
TREE = textwrap.dedent("""
    import subprocess, sys, threading
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    grand = [sys.executable, "-c",
             "import subprocess, sys, time; "
             "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
             "print(p.pid, flush=True); time.sleep(120)"]
    kids = [subprocess.Popen(sleep)]
    started, forever = threading.Event(), threading.Event()
    def from_thread(stay):
        kids.append(subprocess.Popen(sleep))
        started.set()
        if stay:
            forever.wait()  # its child stays listed under this thread
    t = threading.Thread(target=from_thread, args=(False,))
    t.start(); t.join(); started.clear()
    threading.Thread(target=from_thread, args=(True,), daemon=True).start()
    started.wait()
    g = subprocess.Popen(grand, stdout=subprocess.PIPE, text=True)
    kids.append(g)
    grandchild = int(g.stdout.readline())
    print(" ".join(str(p) for p in [k.pid for k in kids] + [grandchild]), flush=True)
    sys.stdin.read()
""")


@pytest.fixture
def tree():
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 5
        yield proc.pid, pids
    finally:
        found = lifeline.descendants(proc.pid)
        proc.kill()
        proc.wait(30)
        lifeline.kill_pids(found)
        assert wait_gone([p.pid for p in found], 10) == []


def test_proc_children_are_readable_here():
    # The fast path is the one CI takes (a kernel without the file falls back).
    assert lifeline._proc_children_readable()


@pytest.mark.parametrize("way", ["proc", "scan"])
def test_every_descendant_is_found(tree, way, monkeypatch):
    root, pids = tree
    if way == "scan":
        monkeypatch.setattr(lifeline, "_proc_children_readable", lambda: False)
    found = lifeline.descendants(root)
    assert sorted(p.pid for p in found) == sorted(pids)
    # Each remembers its process, so a kill never reaches a reused pid.
    assert all(p.is_running() for p in found)


def test_a_gone_root_has_no_descendants():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(30)
    assert lifeline.descendants(proc.pid) == []


class StartsFromAThread(_Collect, UnorderedRunner):
    """producer_work starts a process from a thread of its own, which then ends."""

    @staticmethod
    def producer_work(device, cfg, data):
        import threading

        started = []

        def start():
            started.append(subprocess.Popen([sys.executable, "-c",
                                             "import time; time.sleep(120)"]).pid)

        t = threading.Thread(target=start)
        t.start()
        t.join()
        return started[0]


def test_a_process_started_by_a_workers_thread_ends_with_close(no_leaks):
    with StartsFromAThread(2) as runner:
        children = runner(["a", "b"])
    assert len(children) == 2
    left = wait_gone(children, 10)
    for pid in left:  # not to leave them behind when the test fails
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert left == [], "a process a worker's thread started outlived close()"
