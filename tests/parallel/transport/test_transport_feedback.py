"""The shared-memory transport's two halves and the named feedback between them.

One caller half and one worker half (the transport pickled, as a worker gets
it) in this process: real segments, real views, no worker process, so each
step of a segment's round trip can be checked where it happens.
"""

from __future__ import annotations

import gc
import pickle

import numpy as np
import pytest

from easycore.common.parallel import SharedMemoryTransport
from easycore.common.parallel.transport import shm
from easycore.common.parallel.transport.shared_memory import CallerFeedback, WorkerFeedback
from easycore.common.parallel.transport.shm import AVAILABLE

pytestmark = pytest.mark.skipif(not AVAILABLE, reason="no POSIX shared memory")


@pytest.fixture
def halves(no_leaks):
    caller = SharedMemoryTransport(threshold=1024)
    caller.prepare()
    shm.ensure_tracker()  # a caller with a tracker: names come with the first message
    worker = pickle.loads(pickle.dumps(caller))  # what a worker gets: configuration only
    worker.bind_worker(0)
    first = caller.feedback(0)  # with the first message: a name for its own results
    assert first is not None and first.reserved
    worker.on_feedback(pickle.loads(pickle.dumps(first)))
    try:
        yield caller, worker
    finally:
        caller.cleanup()


def _segment(payload):
    assert not isinstance(payload, bytes), "expected a payload in shared memory"
    return payload[1]


def test_an_input_segment_comes_back_when_the_worker_drops_its_views(halves):
    caller, worker = halves
    payload, _ = caller.encode_items(0, [np.arange(10_000)])
    lent = _segment(payload)
    items = worker.decode_items(payload)
    assert worker.worker_feedback() is None  # still viewed: nothing to report
    del items
    gc.collect()
    feedback = worker.worker_feedback()
    assert isinstance(feedback, WorkerFeedback)
    assert feedback == WorkerFeedback(returned=[lent], unused=[], full=False)
    caller.on_worker_feedback(0, pickle.loads(pickle.dumps(feedback)))  # as it travels
    again, _ = caller.encode_items(0, [np.arange(10_000)])
    assert _segment(again) == lent  # written again, not a fresh segment
    caller.item_payload_done(0, again)


def test_a_results_segment_is_granted_back_to_the_worker_that_made_it(halves):
    caller, worker = halves
    payload, _ = worker.encode_results([np.ones(10_000)])
    made = _segment(payload)
    results = caller.decode_results(0, payload)
    assert results[0].sum() == 10_000
    meanwhile = caller.feedback(0)
    assert meanwhile.grants is None  # the caller's arrays still view it
    worker.on_feedback(meanwhile)
    del results
    gc.collect()
    feedback = caller.feedback(0)
    assert isinstance(feedback, CallerFeedback)
    assert feedback.grants == [(made, feedback.grants[0][1])] and not feedback.revoke
    worker.on_feedback(pickle.loads(pickle.dumps(feedback)))
    again, _ = worker.encode_results([np.ones(10_000)])
    assert _segment(again) == made  # the worker wrote into its grant
    caller.discard(0, again)


def test_an_idle_caller_revokes_grants_and_the_worker_forgets_them(halves):
    caller, worker = halves
    caller.idle_keep_bytes = 0  # idle gives back every free segment
    payload, _ = worker.encode_results([np.ones(10_000)])
    made = _segment(payload)
    caller.decode_results(0, payload)  # the result dies at once
    gc.collect()
    worker.on_feedback(caller.feedback(0))  # granted
    caller.idle()
    feedback = caller.feedback(0)
    assert feedback == CallerFeedback(grants=None, unmap=[made], revoke=True)
    worker.on_feedback(feedback)
    again, _ = worker.encode_results([np.ones(10_000)])
    assert _segment(again) != made  # the revoked grant is not written to
    caller.discard(0, again)
