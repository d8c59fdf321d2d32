"""The one worker loop: ``WorkerHandler.start`` and ``.handle`` answer the protocol's messages.

In-process: every carrier (the worker process, the thread back-end, the Ray
actor) hands messages to this class, so what it answers is what every back-end
answers. The item slots it writes are what the engine reads for deaths and
task timeouts.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from easycore.common.parallel import PickleTransport, WorkerContext, WorkerProgram
from easycore.common.parallel.extending import WorkerHandler
from easycore.common.parallel.worker.protocol import (
    ChunkDone,
    RunChunk,
    StopWorker,
    WorkerEnded,
    WorkerFailed,
    WorkerReady,
)
from easycore.common.parallel.worker.slots import (
    MARK_INDEX,
    MARK_NONE,
    MARK_TIMES,
    ItemSlot,
    ItemSlots,
)


class Squares(WorkerProgram):
    """``x * x``; an item 13 raises; ``init``/``end`` raise when asked to."""

    def __init__(self, fail_init: bool = False, fail_end: bool = False) -> None:
        self.fail_init, self.fail_end = fail_init, fail_end
        self.seen: list = []
        self.built = 0

    def init(self, ctx: WorkerContext) -> None:
        if self.fail_init:
            raise RuntimeError("no init today")

    def end(self, ctx: WorkerContext) -> None:
        if self.fail_end:
            raise RuntimeError("no end today")

    def function(self, blob, ctx):
        if blob == b"broken":
            raise ValueError("cannot build it")
        self.built += 1

        def square(x):
            self.seen.append(x)
            if x == 13:
                raise KeyError(x)
            return x * x

        return square

    def hook_name(self, blob) -> str:
        return "square"


def _chunk(job=1, seq=0, items=(1, 2, 3), function=b"f", mark=MARK_NONE, forget=()):
    return RunChunk(job, seq, list(items), function, forget, None, mark)


def _executor(program=None, slots=None, transport=None, index=0):
    return WorkerHandler(program or Squares(), WorkerContext(index, "cpu", None, None), slots,
                    transport)


def test_start_answers_ready_with_this_pid():
    assert _executor().start() == WorkerReady(os.getpid())


def test_a_failing_init_hook_is_answered_with_its_report():
    reply = _executor(Squares(fail_init=True)).start()
    assert type(reply) is WorkerFailed and reply.job is None
    assert reply.report.hook == "init" and "no init today" in reply.report.message


def test_a_chunk_is_answered_with_its_results_and_an_item_that_raises_fails_alone():
    reply = _executor().handle(_chunk(items=[2, 13, 4]))
    assert type(reply) is ChunkDone
    assert (reply.job, reply.seq, reply.n_items) == (1, 0, 3)
    assert reply.results == [4, None, 16]
    [failure] = reply.failures
    assert failure.position == 1 and failure.report.hook == "square"
    assert failure.report.exc_type == "KeyError"
    assert reply.seconds >= reply.working >= 0.0


@pytest.mark.parametrize("mark", [MARK_NONE, MARK_INDEX, MARK_TIMES])
def test_every_item_runs_once_in_order_whatever_the_marking(mark):
    program = Squares()
    items = [13, 1, 13, 2, 3, 13]
    reply = _executor(program, ItemSlots.local(1)).handle(_chunk(items=items, mark=mark))
    assert program.seen == items
    assert reply.results == [None, 1, None, 4, 9, None]
    assert [f.position for f in reply.failures] == [0, 2, 5]


def test_a_function_is_built_once_per_job_and_forgotten_when_told():
    program = Squares()
    ex = _executor(program)
    assert ex.handle(_chunk(job=7, seq=0, items=[3])).results == [9]
    # later chunks come without the function: the worker kept it
    assert ex.handle(_chunk(job=7, seq=1, items=[5], function=None)).results == [25]
    assert program.built == 1
    ex.handle(_chunk(job=8, seq=0, items=[1], forget=(7,)))
    assert program.built == 2
    ex.handle(_chunk(job=7, seq=2, items=[5]))  # forgotten: built again from what came
    assert program.built == 3


def test_a_function_that_cannot_be_built_fails_its_chunk():
    reply = _executor().handle(_chunk(job=3, seq=4, function=b"broken"))
    assert type(reply) is WorkerFailed and (reply.job, reply.seq) == (3, 4)
    assert reply.report.hook == "square (receiving it)"
    assert reply.report.exc_type == "ValueError"


def test_stop_runs_the_end_hook_and_answers_ended_or_failed():
    assert _executor().handle(StopWorker()) == WorkerEnded(None)
    reply = _executor(Squares(fail_end=True)).handle(StopWorker())
    assert type(reply) is WorkerFailed and reply.job is None and reply.report.hook == "end"


def test_with_a_pickling_transport_a_result_that_does_not_pickle_fails_alone():
    transport = PickleTransport()
    transport.bind_worker(0)
    payload, _ = transport.encode_items(0, [1, 2])

    class Unpicklable(WorkerProgram):
        def function(self, blob, ctx):
            return lambda x: threading.Lock() if x == 2 else x

    reply = _executor(Unpicklable(), transport=transport).handle(
        RunChunk(1, 0, payload, b"f", (), None, MARK_NONE))
    assert type(reply) is ChunkDone
    assert transport.decode_results(0, reply.results) == [1, None]
    [failure] = reply.failures
    assert failure.position == 1 and failure.report.hook == "sending results"
    assert reply.nbytes > 0


def test_item_slots_say_which_item_runs_as_the_chunk_asks():
    slots = ItemSlots.local(2)
    assert slots.read(1) == ItemSlot(-1, -1, -1, 0.0)  # nothing runs yet
    ex = _executor(slots=slots, index=1)
    ex.handle(_chunk(job=5, seq=2, items=[1, 2, 3], mark=MARK_NONE))
    assert slots.read(1)[:3] == (5, 2, -1)  # received, items unmarked
    ex.handle(_chunk(job=5, seq=3, items=[1, 2, 3], mark=MARK_INDEX, function=None))
    assert slots.read(1)[:3] == (5, 3, 2)  # the last item started
    before = time.monotonic()
    ex.handle(_chunk(job=5, seq=4, items=[1, 2], mark=MARK_TIMES, function=None))
    slot = slots.read(1)
    assert (slot.job, slot.seq, slot.item) == (5, 4, 1) and slot.started >= before
    assert slots.read(0) == ItemSlot(-1, -1, -1, 0.0)  # the other worker's slot untouched
