"""``handle.run``: any callable in the service's process, by value; results kept
there as a ``RemoteRef``; call arguments and results by value (issues 24, 27)."""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle

import pytest
from _services_support import (
    Counter,
    Tool,
    Tracked,
    get_in_child,
    hold_ref_then_die,
    wait_for_file,
)

from easycore.common.parallel import WorkerError
from easycore.common.parallel.services import RemoteRef, Service

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_run_lambdas_and_closures_in_the_service(no_leaks, method):
    offset = 5

    def add_offset(x, times=1):
        return (x + offset) * times

    with Service.start(Tool, backend_options={"start_method": method}) as h:
        assert h.run(lambda: os.getpid()) == h.pid
        assert h.run(add_offset, 1, times=2) == 12
        assert h.run(sorted, [3, 1, 2]) == [1, 2, 3]
        assert h.run_async(lambda x: x * 2, 21).result(timeout=60) == 42


def test_run_errors_carry_the_traceback(no_leaks):
    def fail():
        raise KeyError("missing")

    with Service.start(Tool) as h:
        match = r"run\(.*fail\) in service .* raised KeyError"
        with pytest.raises(WorkerError, match=match) as info:
            h.run(fail)
        assert isinstance(info.value.__cause__, KeyError)
        with pytest.raises(WorkerError, match="needs a callable"):
            h.run(3)
        assert h.call("echo", 1) == ((1,), {})  # still serving


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_call_arguments_and_results_travel_by_value(no_leaks, method):
    scale = 3
    with Service.start(Tool, backend_options={"start_method": method}) as h:
        (fn,), _ = h.call("echo", lambda x: x * scale)
        assert fn(2) == 6
        (nested,), kw = h.call("echo", [lambda: 4], key=lambda: 5)
        assert nested[0]() == 4 and kw["key"]() == 5
        assert h.call("a_lambda", 10)(1) == 11


def test_remote_refs_get_and_call(no_leaks):
    with Service.start(Tool) as h:
        ref = h.run(Counter, 1, remote=True)
        assert isinstance(ref, RemoteRef) and ref.type_name == "Counter"
        assert ref.call("add", 2) == 3
        assert ref.call("add", k=4) == 7
        assert ref.get().value() == 7  # a copy, here
        child = ref.call("child", remote=True)
        assert isinstance(child, RemoteRef) and child.call("value") == 70
        with pytest.raises(WorkerError, match="no public method"):
            ref.call("_secret")
        future = h.run_async(Counter, 9, remote=True)
        assert future.result(timeout=60).call("value") == 9
        ref.release()
        assert ref.released
        ref2 = h.run(Counter, remote=True)
        ref2.release()
        with pytest.raises(WorkerError, match="was released"):
            h.call("__easycore_ref__", "get", ref2.ref_id)


def test_a_remote_ref_is_released_when_collected(no_leaks, tmp_path):
    marker = tmp_path / "collected"
    with Service.start(Tool) as h:
        ref = h.run(Tracked, str(marker), remote=True)
        assert ref.call("where") == h.pid
        assert not marker.exists()
        del ref
        gc.collect()
        assert wait_for_file(marker), "the service kept the value after the last reference went"


def test_a_disconnecting_client_releases_its_refs(no_leaks, tmp_path):
    marker = tmp_path / "collected"
    with Service.start(Tool) as h:
        client = pickle.loads(pickle.dumps(h))
        ref = client.run(Tracked, str(marker), remote=True)
        client.close()  # the service drops what this connection kept
        assert wait_for_file(marker)
        del ref


def test_a_remote_ref_pickled_into_another_process(no_leaks, tmp_path):
    ctx = multiprocessing.get_context("spawn")
    with Service.start(Tool) as h:
        ref = h.run(Counter, 41, remote=True)
        ref.call("add")
        results = ctx.Queue()
        child = ctx.Process(target=get_in_child, args=(ref, results))
        child.start()
        assert results.get(timeout=60) == 42
        child.join(30)
        assert child.exitcode == 0
        assert ref.call("value") == 42  # the copy's release left ours alone


# --------------------------------------- a pickled reference (issue 34 item 6)
def test_a_pickle_never_loaded_pins_nothing_once_the_original_is_released(
        no_leaks, tmp_path, monkeypatch):
    """Pickling a ref registered a second reference at once: a pickle never
    loaded (a failed send, a size check) kept the value until the service stopped."""
    monkeypatch.setattr(RemoteRef, "pickle_lease", 0.2)
    marker = tmp_path / "collected"
    with Service.start(Tool) as h:
        ref = h.run(Tracked, str(marker), remote=True)
        data = pickle.dumps(ref)  # never loaded
        assert ref.call("where") == h.pid  # the original still works
        ref.release()
        assert wait_for_file(marker), "an unloaded pickle kept the value"
        with pytest.raises(WorkerError, match="released"):  # loaded too late: says so
            pickle.loads(data).call("where")
        del data


def test_a_loaded_pickle_keeps_the_value_after_the_original_is_released(
        no_leaks, tmp_path, monkeypatch):
    monkeypatch.setattr(RemoteRef, "pickle_lease", 0.0)
    marker = tmp_path / "collected"
    with Service.start(Tool) as h:
        ref = h.run(Tracked, str(marker), remote=True)
        copy = pickle.loads(pickle.dumps(ref))  # loaded: claimed for this connection
        ref.release()
        assert copy.call("where") == h.pid  # the lease ended, the claimed copy lives
        assert not marker.exists()
        copy.release()
        assert wait_for_file(marker)


def test_a_pickle_loaded_within_its_lease_works(no_leaks, tmp_path):
    marker = tmp_path / "collected"
    with Service.start(Tool) as h:
        ref = h.run(Tracked, str(marker), remote=True)
        data = pickle.dumps(ref)
        ref.release()  # the original goes first; the pickle is in flight
        copy = pickle.loads(data)
        assert copy.call("where") == h.pid
        del copy
        gc.collect()
        assert wait_for_file(marker)


@pytest.mark.forks_with_threads  # forks while the service client's thread runs
@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_a_process_that_loaded_a_pickled_ref_and_died_releases_it(no_leaks, tmp_path, method):
    """A loaded copy is its connection's: a loader that dies takes it along."""
    marker = tmp_path / "collected"
    ctx = multiprocessing.get_context(method)
    with Service.start(Tool) as h:
        ref = h.run(Tracked, str(marker), remote=True)
        ready = ctx.Event()
        child = ctx.Process(target=hold_ref_then_die, args=(ref, ready))
        child.start()
        assert ready.wait(60)
        ref.release()  # only the child's copy holds it now
        child.join(60)
        assert wait_for_file(marker), "a dead loader's copy kept the value"
