"""``backend="thread"``: the same API, workers are threads, nothing is pickled."""

from __future__ import annotations

import functools
import threading

import pytest
from _pool_funcs import TaskError, add, context_info, fail_on, identity, square

from easycore.common.parallel import Pool, TaskTimeoutError

pytestmark = pytest.mark.timeout(120)

WAIT = 30


@pytest.fixture
def pool(no_leaks):
    p = Pool(2, backend="thread")
    try:
        yield p
    finally:
        p.close()
        p.join()


def test_the_stdlib_calls_work_the_same(pool):
    assert pool.map(square, range(50)) == [x * x for x in range(50)]
    assert pool.starmap(add, [(1, 2), (3, 4)]) == [3, 7]
    assert list(pool.imap(identity, (x for x in range(100)), 4)) == list(range(100))
    assert sorted(pool.imap_unordered(square, range(20))) == [x * x for x in range(20)]
    assert pool.apply(add, (1,), {"b": 2}) == 3
    got = []
    result = pool.map_async(square, range(5), callback=got.append)
    assert result.get(WAIT) == [0, 1, 4, 9, 16]
    result.wait(WAIT)
    assert result.successful()


def test_unpicklable_objects_go_in_and_come_out_as_they_are(pool):
    lock = threading.Lock()  # cannot be pickled
    counter = iter(range(10))  # neither can a local generator's state be shared
    assert pool.map(lambda x: (x, lock.locked()), range(3)) == [(0, False), (1, False),
                                                                  (2, False)]
    assert pool.apply(lambda: lock) is lock  # the very object, no copy
    assert pool.apply(lambda it: next(it), (counter,)) == 0
    assert next(counter) == 1


def test_closures_see_the_callers_state(pool):
    seen = []
    pool.map(seen.append, range(10), 1)  # the caller's own list, from every worker
    assert sorted(seen) == list(range(10))


def test_task_exceptions_keep_their_type_and_imap_goes_on(pool):
    with pytest.raises(TaskError, match="bad item 3"):
        pool.map(fail_on, range(6))
    it = pool.imap(fail_on, range(5), 1)
    got = []
    for _ in range(5):
        try:
            got.append(next(it))
        except TaskError:
            got.append("failed")
    assert got == [0, 1, 2, "failed", 4]
    errors = []
    result = pool.apply_async(fail_on, (3,), error_callback=errors.append)
    with pytest.raises(TaskError):
        result.get(WAIT)
    result.wait(WAIT)
    assert len(errors) == 1 and isinstance(errors[0], TaskError)


def test_broadcast_reaches_each_thread_once_in_worker_order(pool):
    idents = pool.broadcast(threading.get_ident)
    assert len(set(idents)) == 2 and threading.get_ident() not in idents
    assert [c["index"] for c in pool.broadcast(context_info, pass_context=True)] == [0, 1]


def test_a_timeout_fails_the_task_and_a_fresh_thread_takes_its_place(no_leaks):
    release = threading.Event()
    stalled: list = []
    try:
        with Pool(2, backend="thread", task_timeout=0.5) as pool:
            with pytest.raises(TaskTimeoutError) as info:
                pool.map(functools.partial(_wait_on, release, stalled), range(4), 1)
            assert info.value.item == 0 and info.value.device == "cpu"
            assert pool.map(square, range(10)) == [x * x for x in range(10)]
            assert len(set(pool.broadcast(threading.get_ident))) == 2
    finally:
        release.set()  # the abandoned thread returns and exits
        for thread in stalled:  # before the leak check looks
            thread.join(WAIT)


def _wait_on(event, stalled, x):
    if x == 0:
        stalled.append(threading.current_thread())
        event.wait(WAIT)
    return x


def test_each_worker_thread_gets_its_own_cfg_copy_and_context(no_leaks):
    with Pool(2, backend="thread", cfg={"scale": 2}, worker_contexts=["a", "b"]) as pool:
        infos = pool.broadcast(context_info, pass_context=True)
    assert [(i["context"], i["scale"]) for i in infos] == [("a", 2), ("b", 2)]


def test_the_initializer_runs_once_in_each_worker_thread(no_leaks):
    started = []
    with Pool(3, backend="thread", initializer=lambda: started.append(threading.get_ident())):
        pass
    assert len(set(started)) == 3


def test_a_closed_thread_pool_refuses_calls(no_leaks):
    pool = Pool(1, backend="thread")
    pool.terminate()
    with pytest.raises(ValueError):
        pool.map(square, [1])
    pool.join()
