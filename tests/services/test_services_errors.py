"""What goes wrong: raising methods, bad calls, a service that dies (clients
blocked in calls included), a client that dies, an owner that is killed, and
closing while calls are in flight."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from _services_support import FailingFactory, Tool, call_then_hold, wait_gone

from easycore.common.parallel import WorkerDiedError, WorkerError
from easycore.common.parallel.services import (
    Service,
    ServiceClosedError,
    ServiceDiedError,
    ServiceNotFoundError,
    lookup,
)


# ------------------------------------------------------------ raising methods
def test_a_raising_method_raises_worker_error_with_its_traceback(no_leaks):
    with Service.start(Tool, name="t") as h:
        with pytest.raises(WorkerError) as info:
            h.call("boom", "no luck")
        err = info.value
        assert "boom() of service 't' raised ValueError" in str(err)
        assert err.device == "cpu" and err.pid == h.pid
        assert "_services_support.py" in err.remote_traceback and "no luck" in str(err)
        assert isinstance(err.__cause__, ValueError)
        assert h.call("echo", "still") == (("still",), {})


@pytest.mark.parametrize("method, match", [
    ("nope", "has no method 'nope'; it has: .*echo"),
    ("_private", "no public method '_private'"),
    ("__class__", "no public method"),
])
def test_only_public_methods_can_be_called(no_leaks, method, match):
    with Service.start(Tool) as h:
        with pytest.raises(WorkerError, match=match) as info:
            h.call(method)
        assert isinstance(info.value.__cause__, AttributeError)


def test_a_failing_factory_fails_start(no_leaks):
    with pytest.raises(WorkerError, match=r"starting service <FailingFactory>.*cannot build"):
        Service.start(FailingFactory)


def test_bad_start_arguments(no_leaks):
    with pytest.raises(TypeError, match="callable"):
        Service.start(42)
    with pytest.raises(ValueError, match="unknown backend"):
        Service.start(Tool, backend="mpi")
    with pytest.raises(TypeError, match="cannot be pickled"):
        Service.start(Tool, threading.Lock())


def test_results_and_arguments_that_cannot_travel(no_leaks):
    """A lock cannot travel; a lambda can (by value, issue 24)."""
    with Service.start(Tool) as h:
        assert h.call("a_lambda", 10)(1) == 11
        with pytest.raises(WorkerError, match="sending the result of unpicklable"):
            h.call("unpicklable")
        with pytest.raises((pickle.PicklingError, TypeError, AttributeError)):
            h.call("echo", threading.Lock())
        assert h.call("echo", 3) == ((3,), {})


# -------------------------------------------------------------- a dying service
def test_a_killed_service_fails_every_client(no_leaks, tmp_path):
    """Clients blocked in a call, here and in another process, all see the death."""
    ctx = multiprocessing.get_context("spawn")
    gate = str(tmp_path / "never")
    owner = Service.start(Tool)
    other = pickle.loads(pickle.dumps(owner))
    try:
        errors = ctx.Queue()
        child = ctx.Process(target=_blocked_client, args=(owner, gate, errors))
        child.start()
        assert errors.get(timeout=60) == "calling"
        blocked = owner.call_async("wait_for", gate)  # queued behind the child's call
        queued = other.call_async("echo", 1)
        os.kill(owner.pid, signal.SIGKILL)
        for future in (blocked, queued):
            with pytest.raises(ServiceDiedError, match="died unexpectedly"):
                future.result(timeout=2.0)  # the guarantee: within 2 s
        assert errors.get(timeout=30) == "ServiceDiedError"
        child.join(30)
        errors.close()
        errors.join_thread()
        with pytest.raises(WorkerDiedError):  # and every later call
            owner.call("echo", 1)
    finally:
        other.close()
        owner.close()  # not an error: the clients were told


def _blocked_client(handle, gate, errors):
    errors.put("calling")
    try:
        handle.call("wait_for", gate)
        errors.put("returned")
    except Exception as exc:  # noqa: BLE001 - whichever error it is, the test reads its name
        errors.put(type(exc).__name__)
    errors.close()
    errors.join_thread()


def test_a_death_is_seen_even_when_a_child_keeps_the_socket_open(no_leaks, tmp_path):
    """No EOF reaches the client (a forked child of the service holds its end):
    the client notices that the service's process is gone."""
    with Service.start(Tool) as h:
        sleeper = h.call("fork_sleeper")
        try:
            blocked = h.call_async("wait_for", str(tmp_path / "never"))
            os.kill(h.pid, signal.SIGKILL)
            with pytest.raises(ServiceDiedError, match="process is gone"):
                blocked.result(timeout=2.0)
        finally:
            os.kill(sleeper, signal.SIGKILL)


def test_a_service_dying_in_a_call(no_leaks):
    with Service.start(Tool) as h:
        with pytest.raises(ServiceDiedError) as info:
            h.call("die")
        assert info.value.pid == h.pid and info.value.device == "cpu"
        assert wait_gone([h.pid]) == []


def test_a_new_client_of_a_dead_service(no_leaks):
    with Service.start(Tool) as h:
        clone = pickle.loads(pickle.dumps(h))
        os.kill(h.pid, signal.SIGKILL)
        assert wait_gone([h.pid]) == []
        with pytest.raises(ServiceDiedError, match="cannot connect"):
            clone.call("echo", 1)
        clone.close()


# -------------------------------------------------------------- a dying client
def test_a_killed_client_does_no_harm(no_leaks, tmp_path):
    ctx = multiprocessing.get_context("spawn")
    with Service.start(Tool) as h:
        h.call("record", np.ones(1 << 18))  # something large to hand out
        no_leaks.track(h.pid)
        started = ctx.Event()
        child = ctx.Process(target=_hold_a_large_result, args=(h, started))
        child.start()
        assert started.wait(60)
        no_leaks.track(child.pid)  # the segments lent to it are named after it
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
        assert h.call("record", 2) == 2  # the service carries on
        (big,), _ = h.call("echo", np.zeros(1 << 18))
        assert big.shape == (1 << 18,)
        del big


def _hold_a_large_result(handle, started):
    history = handle.call("history")  # a large array, viewing shared memory
    assert history[0].shape == (1 << 18,)
    started.set()
    threading.Event().wait(600)  # killed here, still holding it


def test_a_client_killed_in_a_call(no_leaks, tmp_path):
    ctx = multiprocessing.get_context("spawn")
    gate = tmp_path / "gate"
    with Service.start(Tool) as h:
        started = ctx.Event()
        child = ctx.Process(target=call_then_hold, args=(h, started, str(gate)))
        child.start()
        assert started.wait(60)
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
        gate.touch()  # its call ends; the answer has nowhere to go
        assert h.call("echo", "fine") == (("fine",), {})


# ---------------------------------------------------------------- the owner
def test_a_killed_owner_takes_its_service_along(no_leaks, services_dir):
    script = textwrap.dedent("""
        import sys, threading
        sys.path[:0] = sys.argv[1:]
        from _services_support import Tool
        from easycore.common.parallel.services import Service
        h = Service.start(Tool, name="orphan")
        print(h.pid, flush=True)
        threading.Event().wait(600)
    """)
    here = os.path.dirname(os.path.abspath(__file__))
    owner = subprocess.Popen([sys.executable, "-c", script, here, os.path.dirname(here)],
                             stdout=subprocess.PIPE, text=True)
    try:
        service_pid = int(owner.stdout.readline())
        assert lookup("orphan", timeout=30).pid == service_pid
    finally:
        owner.kill()
        owner.wait(30)
        owner.stdout.close()
    assert wait_gone([service_pid]) == []  # the lifeline
    with pytest.raises(ServiceNotFoundError):  # and the stale name and socket are swept
        lookup("orphan", timeout=0)


def _refuses_new_clients(handle) -> bool:
    """Whether a new client of ``handle``'s service is turned away (it is closing).

    A client let in waits behind the call in progress: its call times out.
    """
    probe = pickle.loads(pickle.dumps(handle))
    try:
        error = probe.call_async("echo", 0, timeout=0.05).exception(timeout=30)
    except ServiceClosedError:  # turned away while connecting
        return True
    finally:
        probe.close()
    return isinstance(error, ServiceClosedError)


def test_closing_while_another_client_calls(no_leaks, tmp_path):
    gate = tmp_path / "gate"
    owner = Service.start(Tool)
    client = pickle.loads(pickle.dumps(owner))
    try:
        running = client.call_async("wait_for", str(gate))
        queued = client.call_async("echo", 1)
        while owner.call_async("echo", 0, timeout=0.05).exception(timeout=30) is None:
            pass  # until wait_for runs (the owner's echo then times out)
        closer = threading.Thread(target=owner.close)
        closer.start()
        # Open the gate only once the service is closing (it then refuses new
        # clients); opened earlier, the queued call may rightly run first.
        while not _refuses_new_clients(owner):
            pass
        gate.touch()
        assert running.result(timeout=30) == "opened"  # the call in progress finishes
        with pytest.raises(ServiceClosedError, match="closed by its owner"):
            queued.result(timeout=30)
        closer.join(60)
        with pytest.raises(ServiceClosedError):
            client.call("echo", 2)
    finally:
        client.close()
        owner.close()


def test_close_with_a_timeout_kills_a_stuck_service(no_leaks, tmp_path):
    h = Service.start(Tool)
    stuck = h.call_async("wait_for", str(tmp_path / "never"))
    clone = pickle.loads(pickle.dumps(h))
    clone.call_async("echo", 1)  # connected, waiting behind the stuck call
    with pytest.raises(TimeoutError):
        h.close(timeout=0.5)
    with pytest.raises((ServiceClosedError, ServiceDiedError)):
        stuck.result(timeout=10)
    with pytest.raises((ServiceClosedError, ServiceDiedError)):
        clone.call("echo", 2)
    clone.close()
