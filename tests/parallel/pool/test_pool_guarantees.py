"""What ``Pool`` promises where CPython's and machin's own tests and a red team found it broke.

Issue 20: lazy inputs that are abandoned or fail, results that cannot be sent,
results kept alive, pickling a pool, pools left running, ``RemoteTraceback.tb``,
``devices=[]``, feedback loops, callbacks that exit, pools inherited by
``os.fork()``, ``submit`` futures cancelled, ``sys.exit`` in a task. Each runs
on every start method, on the thread back-end where it applies, and on
easycore-torch's Pool.
"""

from __future__ import annotations

import gc
import multiprocessing
import multiprocessing.pool
import os
import pickle
import queue
import select
import signal
import threading
import warnings
import weakref

import pytest
from _pool_funcs import (
    Box,
    SayWhenError,
    boxed,
    exit_zero,
    failing_input,
    identity,
    nap,
    square,
    unpicklable_on,
)
from markers import needs

from easycore.common.parallel import Pool, RemoteTraceback, WorkerError

pytestmark = pytest.mark.timeout(120)

WAIT = 30  # "does not hang", not a speed check

METHODS = [m for m in ("fork", "spawn", "forkserver")
           if m in multiprocessing.get_all_start_methods()]
#: (back-end, start method) of every pool kind; "torch" is easycore-torch's Pool (fork)
KINDS = [f"process-{m}" for m in METHODS] + [
    "thread", pytest.param("torch", marks=needs("torch", "easycore.torch"))]
PROCESS_KINDS = [k for k in KINDS if k != "thread"]


def make_pool(kind: str, n: int = 2, **kwargs) -> Pool:
    if kind == "thread":
        return Pool(n, backend="thread", **kwargs)
    if kind == "torch":
        from easycore.torch.parallel import Pool as TorchPool

        return TorchPool(n, **kwargs)
    return Pool(n, start_method=kind.split("-", 1)[1], **kwargs)


@pytest.fixture(scope="module", params=KINDS)
def kind_pool(request):
    p = make_pool(request.param)
    try:
        yield request.param, p
    finally:
        p.terminate()
        p.join()


def _join_within(pool: Pool, seconds: float) -> bool:
    """Whether ``pool.join()`` returned within ``seconds`` (it runs in a thread)."""
    t = threading.Thread(target=pool.join, daemon=True)
    t.start()
    t.join(seconds)
    return not t.is_alive()


# --- 1: close(); join() after an abandoned or failed lazy imap ----------------
@pytest.mark.parametrize("kind", KINDS)
def test_close_join_returns_after_lazy_imaps_left_unread_or_failed(no_leaks, kind):
    pool = make_pool(kind)
    try:
        unread = pool.imap(identity, (x for x in range(200)))
        assert next(unread) == 0
        pool.imap_unordered(identity, (x for x in range(50)))  # dropped at once
        failed = pool.imap(identity, failing_input(10, 3))  # never read
        pool.close()
        assert _join_within(pool, WAIT), "join() did not return"
        # A lazy job still referenced was read to its end for its iterator (as the stdlib's).
        assert list(unread) == list(range(1, 200))
        assert [next(failed) for _ in range(3)] == [0, 1, 2]
        with pytest.raises(SayWhenError):
            next(failed)
    finally:
        pool.terminate()
        pool.join()


def test_terminate_cancels_a_lazy_imap_over_an_endless_input(no_leaks):
    import itertools

    pool = make_pool("process-" + METHODS[0])
    it = pool.imap(identity, itertools.count())
    assert next(it) == 0
    pool.terminate()
    assert _join_within(pool, WAIT)


# --- 2 and 13: an input that raises; a feedback loop ---------------------------
@pytest.mark.parametrize("ordered", [True, False], ids=["imap", "imap_unordered"])
def test_an_input_error_comes_after_every_result_read_before_it(kind_pool, ordered):
    _, pool = kind_pool
    call = pool.imap if ordered else pool.imap_unordered
    it = call(identity, failing_input(1000, 500))  # never raises from the call itself
    got = []
    with pytest.raises(SayWhenError):
        for x in it:
            got.append(x)
    assert (got if ordered else sorted(got)) == list(range(500))
    with pytest.raises(StopIteration):
        next(it)
    first = call(identity, failing_input(10, 0))
    with pytest.raises(SayWhenError):
        next(first)


def test_an_input_error_with_a_chunksize_comes_at_its_chunk_as_the_stdlibs(kind_pool):
    _, pool = kind_pool
    for chunksize, before in [(1, 7), (2, 6), (4, 4)]:
        it = pool.imap(square, failing_input(20, 7), chunksize)
        assert [next(it) for _ in range(before)] == [x * x for x in range(before)]
        with pytest.raises(SayWhenError):
            next(it)


def test_imap_hands_over_a_result_before_running_the_input_again(kind_pool):
    _, pool = kind_pool
    seen: queue.Queue[int] = queue.Queue()

    def feedback():
        yield 1
        yield seen.get(timeout=WAIT) + 1  # the next item needs the last result

    got = []
    for result in pool.imap(identity, feedback()):
        got.append(result)
        seen.put(result)
    assert got == [1, 2]


# --- 3: the last job's results and inputs are not kept -------------------------
def test_the_last_jobs_results_are_released(kind_pool):
    _, pool = kind_pool
    # The last job of all: nothing submitted after it (200 chunks: still running
    # when submit returns, so that the pool would keep it).
    results = pool.map(boxed, range(200), 1)
    refs = [weakref.ref(r) for r in results]
    del results
    gc.collect()
    assert [r() for r in refs] == [None] * 200


def test_the_last_jobs_inputs_are_released(kind_pool):
    _, pool = kind_pool
    inputs = [Box(i) for i in range(200)]
    refs = [weakref.ref(b) for b in inputs]
    assert [b.value for b in pool.map(identity, inputs, 1)] == list(range(200))
    del inputs
    gc.collect()
    assert [r() for r in refs] == [None] * 200


# --- 4 and 25: one unpicklable result fails alone, naming its item -------------
@pytest.mark.parametrize("kind", PROCESS_KINDS)
@pytest.mark.forks_with_threads  # the module's shared pool (kind_pool) may run meanwhile
def test_one_unpicklable_result_fails_only_its_item(no_leaks, kind):
    with make_pool(kind) as pool:
        it = pool.imap(unpicklable_on, range(12), 1)
        got = []
        for k in range(12):
            if k == 7:
                with pytest.raises(multiprocessing.pool.MaybeEncodingError) as info:
                    next(it)
                assert "item 7" in str(info.value)
                assert info.value.item == 7
            else:
                got.append(next(it))
        assert got == [k for k in range(12) if k != 7]
        # map fails with it (the stdlib's map raises the first error); the pool goes on
        with pytest.raises(multiprocessing.pool.MaybeEncodingError, match="item 7"):
            pool.map(unpicklable_on, range(12), 4)
        assert sorted(pool.imap_unordered(unpicklable_on, range(7))) == list(range(7))


# --- 5, 6, 7 ---------------------------------------------------------------------
def test_pickling_a_pool_raises_notimplementederror(kind_pool):
    _, pool = kind_pool
    with pytest.raises(NotImplementedError,
                       match="pool objects cannot be passed between processes or pickled"):
        pickle.dumps(pool)


@pytest.mark.parametrize("kind", ["process-" + METHODS[0], "thread"])
@pytest.mark.forks_with_threads  # the module's shared pool (kind_pool) may run meanwhile
def test_a_running_pool_collected_warns(no_leaks, kind):
    pool = make_pool(kind)
    assert pool.map(square, [2]) == [4]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del pool
        gc.collect()
    assert any(issubclass(w.category, ResourceWarning) and "unclosed running" in str(w.message)
               for w in caught), [str(w.message) for w in caught]


def test_a_closed_pool_collected_does_not_warn(no_leaks):
    pool = make_pool("thread")
    pool.close()
    pool.join()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del pool
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


def test_remote_traceback_has_tb_and_text(kind_pool):
    _, pool = kind_pool
    with pytest.raises(ZeroDivisionError) as info:
        pool.apply(divmod, (1, 0))
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert cause.tb == cause.text and "ZeroDivisionError" in cause.tb


# --- 8: devices=[] ------------------------------------------------------------------
@pytest.mark.parametrize("pool", ["common", pytest.param("torch", marks=needs("easycore.torch"))])
def test_an_empty_device_list_is_refused_at_construction(pool):
    cls = Pool
    if pool == "torch":
        from easycore.torch.parallel import Pool as cls
    for backend in ("process", "thread"):
        with pytest.raises(ValueError, match="devices"):
            cls(devices=[], backend=backend)


# --- 14: callbacks that raise SystemExit or KeyboardInterrupt ----------------------
@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt])
def test_a_callback_that_exits_does_not_stop_the_pool(kind_pool, exc, capsys):
    _, pool = kind_pool

    def leave(_):
        raise exc(3)

    result = pool.apply_async(square, (3,), callback=leave)
    assert result.get(WAIT) == 9
    errors = pool.starmap_async(divmod, [(1, 0)], error_callback=leave)
    with pytest.raises(ZeroDivisionError):
        errors.get(WAIT)
    assert pool.map(square, range(5)) == [0, 1, 4, 9, 16]
    assert pool.apply_async(square, (4,)).get(WAIT) == 16


# --- 15: a pool inherited by os.fork() -------------------------------------------------
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("kind", ["process-" + METHODS[0], "thread"])
@pytest.mark.forks_with_threads  # the test forks with its pool open
def test_a_pool_inherited_by_os_fork_raises_in_the_child(no_leaks, kind):
    with make_pool(kind) as pool:
        assert pool.map(square, [1]) == [1]
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report what map did, then leave at once
            code = 1
            try:
                pool.map(square, [1, 2])
            except RuntimeError as exc:
                code = 0 if "os.fork" in str(exc) else 2
            except BaseException:  # noqa: BLE001 (any other error is code 3)
                code = 3
            os.write(w, bytes([code]))
            os._exit(0)
        os.close(w)
        got = b""
        try:
            ready, _, _ = select.select([r], [], [], WAIT)
            got = os.read(r, 1) if ready else b""
        finally:
            os.close(r)
            if not got:
                os.kill(pid, signal.SIGKILL)  # the child hangs: this is the bug
            os.waitpid(pid, 0)
        assert got == b"\x00", "the child's map did not raise RuntimeError at once"
        assert pool.map(square, [3]) == [9]  # the parent's pool is untouched


# --- 18: Future.cancel() of submit --------------------------------------------------------
def test_submit_futures_cannot_be_cancelled_once_handed_to_a_worker(kind_pool):
    _, pool = kind_pool
    # submit() sends at once while a worker has a free credit: these are handed over.
    blockers = [pool.submit(nap, 0.3, k) for k in range(2)]
    for f in blockers:
        assert f.running() or f.done()
        assert not f.cancel()
    assert sorted(f.result(WAIT) for f in blockers) == [0, 1]


def test_a_cancelled_submit_never_runs(kind_pool, tmp_path):
    _, pool = kind_pool
    from _pool_funcs import announce_and_nap

    blockers = [pool.submit(nap, 0.5, k) for k in range(2)]
    flagged = [pool.submit(announce_and_nap, k, str(tmp_path), 0.0) for k in range(30)]
    cancelled = {k for k, f in enumerate(flagged) if f.cancel()}
    for f in blockers:
        f.result(WAIT)
    for k, f in enumerate(flagged):
        if k not in cancelled:
            f.result(WAIT)
    ran = {int(p.name.split(".")[0]) for p in tmp_path.iterdir()}
    assert not (ran & cancelled), f"cancelled tasks ran: {sorted(ran & cancelled)}"
    assert ran == set(range(30)) - cancelled


# --- 24: sys.exit(0) in a task ------------------------------------------------------------
def test_sys_exit_in_a_task_is_a_workererror(kind_pool):
    _, pool = kind_pool
    for call in (lambda: pool.map(exit_zero, [1, 2]), lambda: pool.apply(exit_zero),
                 lambda: list(pool.imap(exit_zero, iter([1]))),
                 lambda: pool.submit(exit_zero).result(WAIT)):
        with pytest.raises(WorkerError, match="SystemExit"):
            call()
    assert pool.map(square, [5]) == [25]

