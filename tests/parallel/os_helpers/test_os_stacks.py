"""The stack-capture primitive: a worker's stacks read from outside, without its help."""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time

import pytest

from easycore.common.parallel._os import stacks

pytestmark = pytest.mark.skipif(not stacks.AVAILABLE, reason="needs POSIX signals")


def _spin_in_c() -> int:
    return sum(range(10**12))  # C code that holds the GIL throughout


def _sleep_forever() -> None:
    import threading

    threading.Event().wait()


def _target(path: str, ready, what: str) -> None:
    stacks.install(path)
    ready.set()
    {"c": _spin_in_c, "sleep": _sleep_forever}[what]()


@pytest.fixture(params=["fork", "fork-inherited", "forkserver", "spawn"])
def worker(request):
    started = []

    def start(what: str):
        ctx = multiprocessing.get_context(request.param.split("-")[0])
        dump = stacks.DumpFile(inherited=request.param == "fork-inherited")
        ready = ctx.Event()
        proc = ctx.Process(target=_target, args=(dump.path, ready, what), daemon=True)
        proc.start()
        started.append((proc, dump))
        assert ready.wait(60)
        return proc, dump

    yield start
    for proc, dump in started:
        proc.kill()
        proc.join(10)
        dump.close()


@pytest.mark.parametrize("what, function", [("c", "_spin_in_c"), ("sleep", "_sleep_forever")])
def test_a_worker_says_where_it_is_even_inside_c_code_holding_the_gil(worker, what, function):
    proc, dump = worker(what)
    deadline = time.monotonic() + 60
    frame = None
    while frame is None or frame.function != function:  # until it has called it
        assert time.monotonic() < deadline, frame
        got = stacks.request([("w", proc.pid, dump)], timeout=30)["w"]
        assert got is not None
        assert got.threads[0][0] == "main thread"
        frame = got.user_frame()
    assert frame.file == __file__ and frame.line
    again = stacks.request([("w", proc.pid, dump)], timeout=30)["w"]  # a dump of its own
    assert again is not None and again.user_frame() == frame
    assert function in str(again)
    if not dump.path.startswith("/proc/self/fd/"):
        assert not os.path.exists(dump.path)  # the worker unlinked the name at once


def test_a_worker_that_is_gone_gives_none_and_the_file_is_released(worker):
    proc, dump = worker("sleep")
    proc.kill()
    proc.join(10)
    assert stacks.request([(0, proc.pid, dump)], timeout=0.2) == {0: None}
    dump.close()
    dump.close()  # idempotent


def test_parse_puts_the_main_thread_first_and_keeps_the_order_of_frames():
    text = (
        "Thread 0x00000000000000aa (most recent call first):\n"
        '  File "/x/other.py", line 3 in helper\n\n'
        "Current thread 0x00000000000000bb (most recent call first):\n"
        '  File "/x/user.py", line 7 in inner\n'
        '  File "/x/user.py", line 9 in outer\n'
    )
    got = stacks.parse(text, main_ident="0x00000000000000bb")
    assert [name for name, _ in got.threads] == ["main thread", "thread 0x00000000000000aa"]
    assert [f.function for f in got.main] == ["inner", "outer"]
    assert str(got.user_frame()) == "inner (/x/user.py:7)"
    assert stacks.describe(got) == "; it was in inner (/x/user.py:7)"
    assert stacks.describe(None) == ""


def test_a_forked_copy_of_the_dump_file_never_removes_its_name():
    dump = stacks.DumpFile()
    try:
        pid = os.fork()
        if pid == 0:  # a forked worker collecting its inherited copy
            dump.close()
            os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        assert os.path.exists(dump.path)  # still there for its own worker to open
    finally:
        dump.close()
    assert not os.path.exists(dump.path)


def _names_in_tmp() -> set:
    prefix = f"easycore-stack-{os.getpid()}-"
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith(prefix)}


@pytest.mark.skipif(not hasattr(os, "memfd_create") or not os.path.isdir("/proc/self/fd"),
                    reason="needs memfd_create and /proc (Linux)")
def test_a_file_for_a_worker_forked_from_here_has_no_name_and_a_fallback_has_one(monkeypatch):
    before = _names_in_tmp()
    dump = stacks.DumpFile(inherited=True)
    try:
        assert dump.path == f"/proc/self/fd/{dump._fd}"
        assert _names_in_tmp() == before  # nothing made in the temporary directory
    finally:
        dump.close()
    assert dump._fd is None
    monkeypatch.setattr(stacks, "_MEMFD_WORKS", False)  # as where there is no memfd
    named = stacks.DumpFile(inherited=True)
    try:
        assert os.path.exists(named.path) and not named.path.startswith("/proc/")
    finally:
        named.close()
    assert not os.path.exists(named.path)
