"""A dead worker's replacement starts outside the engine lock (issue 21).

Starting a worker may take seconds (``spawn`` imports the program anew).
While it starts, the other workers keep getting work: a thread feeding a lazy
input (``Pool.imap``'s reader) sends its items to them instead of waiting for
the start. The back-ends here hold their first restart until the test has
seen such a send, so that nothing depends on how fast this machine is.
"""

from __future__ import annotations

import functools
import threading
from typing import ClassVar

import pytest
from _engine_funcs import exit_at, pid

from easycore.common.parallel import Pool, TaskTimeoutError, WorkerDiedError
from easycore.common.parallel.backends.process import ProcessBackend
from easycore.common.parallel.backends.thread import ThreadBackend
from easycore.common.parallel.worker.protocol import RunChunk

pytestmark = pytest.mark.timeout(180)

WAIT = 30


class _Gate:
    """Holds the first replacement's start until released; notes chunks sent meanwhile."""

    def __init__(self) -> None:
        self.restarting = threading.Event()
        self.release = threading.Event()
        self.sent_meanwhile = threading.Event()
        self.replaced = threading.Event()  # a replacement was started
        self._first = True

    def hold(self) -> None:
        if self._first:
            self._first = False
            self.restarting.set()
            self.release.wait(WAIT)

    def sent(self, message) -> None:
        if (isinstance(message, RunChunk) and self.restarting.is_set()
                and not self.release.is_set()):
            self.sent_meanwhile.set()


def _gated_pool(gate: _Gate) -> type:
    """A Pool whose process and thread back-ends start replacements slowly, through ``gate``."""

    class SlowProcess(ProcessBackend):
        def restart(self, worker: int) -> None:
            gate.hold()
            super().restart(worker)

        def send(self, worker: int, message) -> None:
            super().send(worker, message)
            gate.sent(message)

    class SlowThread(ThreadBackend):
        def restart(self, worker: int) -> None:
            gate.hold()
            super().restart(worker)
            gate.replaced.set()

        def send(self, worker: int, message) -> None:
            super().send(worker, message)
            gate.sent(message)

    class GatedPool(Pool):
        backends: ClassVar[dict] = {**Pool.backends, "process": SlowProcess,
                                    "thread": SlowThread}

    return GatedPool


def _source(gate: _Gate):
    """Item 0 (it kills or stalls its worker), then, once a replacement starts, more."""
    yield 0
    if not gate.restarting.wait(WAIT):
        raise AssertionError("no replacement was started")
    yield from range(1, 8)


def _collect(it):
    out = []
    while True:
        try:
            out.append(it.next(timeout=WAIT))
        except StopIteration:
            return out
        except (WorkerDiedError, TaskTimeoutError) as exc:
            out.append(type(exc))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_feeding_thread_does_not_wait_for_a_replacement_process(method, no_leaks):
    gate = _Gate()
    with _gated_pool(gate)(2, start_method=method, max_deaths=5) as pool:
        assert len(set(pool.broadcast(pid))) == 2  # both workers ready
        it = pool.imap(functools.partial(exit_at, bad=0), _source(gate), chunksize=1)
        try:
            fed = gate.sent_meanwhile.wait(WAIT)
        finally:
            gate.release.set()
        assert fed, "the feeding thread waited for the replacement worker's start"
        assert _collect(it) == [WorkerDiedError, *range(1, 8)]
        assert sorted(pool.broadcast(pid)) == sorted(pool.worker_pids)  # the new one works


def test_a_feeding_thread_does_not_wait_for_a_replacement_thread(no_leaks):
    gate = _Gate()
    stuck = threading.Event()
    stalled: list = []

    def stalls_on_zero(x):
        if x == 0:
            stalled.append(threading.current_thread())
            stuck.wait(WAIT)  # past its task_timeout: abandoned, replaced
        return x

    try:
        with _gated_pool(gate)(2, backend="thread") as pool:
            it = pool.imap(stalls_on_zero, _source(gate), chunksize=1, task_timeout=0.5)
            try:
                fed = gate.sent_meanwhile.wait(WAIT)
            finally:
                gate.release.set()
            assert fed, "the feeding thread waited for the replacement worker's start"
            assert _collect(it) == [TaskTimeoutError, *range(1, 8)]
            assert len(set(pool.broadcast(threading.get_ident))) == 2  # the new one works
    finally:
        stuck.set()  # the abandoned thread returns and exits
        for thread in stalled:
            thread.join(WAIT)


def test_a_chunk_whose_worker_is_replaced_while_it_is_filled_runs_on_the_replacement(
        monkeypatch, no_leaks):
    # The feeding thread reserves the worker's credit, then fills the chunk
    # outside the engine lock; meanwhile the worker is killed (a task past its
    # timeout) and replaced, which empties its queue, the reservation too.
    # The chunk must still run, not fail its job.
    from easycore.common.parallel.pool.reader import ReadAhead

    gate = _Gate()
    gate.release.set()  # replacements start at once here
    stuck = threading.Event()
    stalled: list = []
    take = ReadAhead.take

    def slow_take(self, n):
        items, ended = take(self, n)
        if 1 in items:
            gate.replaced.wait(WAIT)  # the credit is reserved: hold it until the worker died
        return items, ended

    monkeypatch.setattr(ReadAhead, "take", slow_take)

    def stalls_on_zero(x):
        if x == 0:
            stalled.append(threading.current_thread())
            stuck.wait(WAIT)
        return x

    try:
        with _gated_pool(gate)(1, backend="thread") as pool:
            it = pool.imap(stalls_on_zero, iter(range(8)), chunksize=1, task_timeout=0.5)
            assert _collect(it) == [TaskTimeoutError, *range(1, 8)]
            assert gate.replaced.is_set()
    finally:
        stuck.set()  # the abandoned thread returns and exits
        for thread in stalled:
            thread.join(WAIT)
