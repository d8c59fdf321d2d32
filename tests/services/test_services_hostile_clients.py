"""No one client holds the door or the service: a connection that never
answers the auth challenge, a client stalled in the middle of a frame, a
send interrupted by Ctrl-C, and a client connecting while its service is
being killed (issue 20, items 11, 12 and 27)."""

from __future__ import annotations

import os
import pickle
import signal
import socket
import struct
import threading
import time

import pytest
from _services_support import Tool, wait_gone
from processes import in_thread, stop_process

from easycore.common.parallel import PickleTransport
from easycore.common.parallel.services import Service, ServiceDiedError

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_silent_connection_does_not_block_new_clients(no_leaks, method):
    """Item 11: a connection that never answers the auth challenge holds nobody up."""
    with Service.start(Tool, backend_options={"start_method": method}) as h:
        silent = [socket.socket(socket.AF_UNIX) for _ in range(3)]
        try:
            for s in silent:
                s.connect(h._state.target.address)  # and never says a word
            clone = pickle.loads(pickle.dumps(h))
            done, value = in_thread(lambda: clone.call("echo", 1, timeout=20), 30)
            assert done, "a new client was blocked by a silent connection"
            assert value == ((1,), {})
            clone.close()
            assert h.call("echo", 2, timeout=20) == ((2,), {})
        finally:
            for s in silent:
                s.close()


def test_call_timeout_bounds_connecting(no_leaks):
    """Item 11: ``call(timeout=...)`` bounds the whole call, connecting included."""
    with Service.start(Tool) as h:
        clone = pickle.loads(pickle.dumps(h))
        stop_process(h.pid)  # accepts in its backlog, answers nothing
        try:
            start = time.monotonic()
            done, value = in_thread(lambda: clone.call("echo", 1, timeout=1.0), 30)
            assert done, "call(timeout=1) was still connecting after 30 s"
            assert isinstance(value, TimeoutError), value
            assert "within 1.0 s" in str(value)
            assert time.monotonic() - start < 30
        finally:
            os.kill(h.pid, signal.SIGCONT)
        assert clone.call("echo", 3, timeout=30) == ((3,), {})  # the handle still works
        clone.close()


def _stall_mid_frame(handle, announced):
    """Open ``handle``'s channel, then write a header announcing ``announced``
    bytes and a few of them: the frame never completes."""
    assert handle.call("echo", 0) == ((0,), {})
    link = handle._state.channel._link
    os.write(link.fileno(), struct.pack("!i", announced) + b"x" * 10)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_client_stalled_mid_frame_does_not_stop_the_service(no_leaks, method):
    """Item 12: a header announcing 100 MB, then nothing: other clients go on."""
    with Service.start(Tool, backend_options={"start_method": method}) as h:
        stalled = pickle.loads(pickle.dumps(h))
        _stall_mid_frame(stalled, 100 << 20)
        done, value = in_thread(lambda: h.call("echo", 1, timeout=20), 30)
        assert done and value == ((1,), {}), value
        other = pickle.loads(pickle.dumps(h))
        assert other.call("record", "x", timeout=20) == 1
        other.close()
        stalled.close()


def test_a_stopped_client_process_does_not_stop_the_service(no_leaks):
    """Item 12: a client SIGSTOPped half-way through sending a large argument."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    with Service.start(Tool) as h:
        ready = ctx.Event()
        child = ctx.Process(target=_send_half_then_stop, args=(pickle.dumps(h), ready))
        child.start()
        try:
            assert ready.wait(30)
            done, value = in_thread(lambda: h.call("echo", 1, timeout=20), 30)
            assert done and value == ((1,), {}), value
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.join(10)


def _send_half_then_stop(data, ready):
    handle = pickle.loads(data)
    _stall_mid_frame(handle, 1 << 20)
    ready.set()
    os.kill(os.getpid(), signal.SIGSTOP)


def test_ctrl_c_during_a_large_send_resets_only_that_channel(no_leaks):
    """Item 12: an interrupted send fails that call; the handle's next call, and
    every other client's, work."""
    with Service.start(Tool) as h:
        client = h.with_transport(PickleTransport)  # in-band: the frame is large
        assert client.call("echo", 0) == ((0,), {})
        channel = client._state.channel

        def interrupted(data, deadline=None, check=None):
            # Ctrl-C inside the socket call: half the frame went out
            half = struct.pack("!i", len(data)) + bytes(data[: len(data) // 2])
            os.write(channel._link.fileno(), half)
            raise KeyboardInterrupt

        channel._link.send = interrupted
        with pytest.raises(KeyboardInterrupt):
            client.call("echo", b"x" * (4 << 20))
        del channel._link.send
        assert client.call("echo", 5, timeout=20) == ((5,), {})
        assert h.call("echo", 6, timeout=20) == ((6,), {})
        client.close()


def test_connecting_while_the_service_is_killed_is_a_death(no_leaks):
    """Item 27: the service's listener is gone but its process has not ended
    yet (it is being killed): a new client gets ServiceDiedError."""
    with Service.start(Tool) as h:
        clone = pickle.loads(pickle.dumps(h))
        h.call_async("close_fds_then_die", 1.0)  # no reply will come
        target = h._state.target
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # wait until the listener is closed
            with socket.socket(socket.AF_UNIX) as s:
                try:
                    s.connect(target.address)
                except ConnectionRefusedError:
                    break
            time.sleep(0.01)
        with pytest.raises(ServiceDiedError):
            clone.call("echo", 1, timeout=20)
        clone.close()
        assert wait_gone([h.pid]) == []


def _call_then_stop(data, ready):
    handle = pickle.loads(data).with_transport(PickleTransport)  # replies in-band: large
    handle.call("echo", 0)
    futures = [handle.call_async("echo", b"x" * (4 << 20)) for _ in range(4)]
    ready.set()
    os.kill(os.getpid(), signal.SIGSTOP)  # never reads its replies
    del futures


def test_a_client_that_stops_reading_does_not_stop_the_service(no_leaks):
    """Item 12's sibling: replies a stopped client does not read wait in its own
    queue; the service's writes never block on it."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    with Service.start(Tool) as h:
        ready = ctx.Event()
        child = ctx.Process(target=_call_then_stop, args=(pickle.dumps(h), ready))
        child.start()
        try:
            assert ready.wait(30)
            for i in range(5):  # long after its replies filled the socket
                done, value = in_thread(lambda i=i: h.call("echo", i, timeout=20), 30)
                assert done and value == ((i,), {}), value
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.join(10)


# ------------------------------- the connection layer's siblings (issue 34, 35)
def test_call_timeout_bounds_sending_to_a_stopped_service(no_leaks):
    """Issue 34 item 2's sibling: a large argument to a stopped service (the
    socket takes a part of it) kept call(timeout=2) sending until it resumed."""
    with Service.start(Tool) as h:
        client = h.with_transport(PickleTransport)  # in-band: the frame is large
        assert client.call("echo", 0, timeout=30) == ((0,), {})
        stop_process(h.pid)
        try:
            done, value = in_thread(lambda: client.call("echo", b"x" * (64 << 20), timeout=2), 60)
            assert done, "call(timeout=2) was still sending after 60 s"
            assert isinstance(value, TimeoutError), value
        finally:
            os.kill(h.pid, signal.SIGCONT)
        assert client.call("echo", 3, timeout=60) == ((3,), {})  # the rest went after it
        client.close()


def test_short_lived_threads_share_one_connection(no_leaks):
    """Issue 34 item 5's sibling: a handle's calls from 300 threads."""
    with Service.start(Tool) as h:
        client = pickle.loads(pickle.dumps(h))
        assert client.call("record", -1) == 1
        before = len(os.listdir("/proc/self/fd"))
        for start in range(0, 300, 10):
            threads = [threading.Thread(target=client.call, args=("record", i))
                       for i in range(start, start + 10)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
        assert len(os.listdir("/proc/self/fd")) <= before
        assert len(client.call("history")) == 301
        client.close()


def test_an_unrelated_process_calls_through_a_pickle_file(tmp_path):
    """Issue 34 item 4's sibling: a handle loaded by a ``python`` of another
    process family (its own resource tracker): large arguments and results
    travel, and neither side's exit reports leaked shared memory."""
    import subprocess
    import sys

    scripts = os.path.join(os.path.dirname(__file__), "scripts")
    path = tmp_path / "handle.pkl"
    owner = subprocess.Popen([sys.executable, os.path.join(scripts, "service_owner.py"),
                              str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline().strip() == "ready"
        proc = subprocess.run([sys.executable, os.path.join(scripts, "service_from_file.py"),
                               str(path)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip().splitlines()[-1] == f"[{float(1 << 18)}, {float(1 << 18)}]"
        _, err = owner.communicate("\n", timeout=120)
    finally:
        owner.kill()
        owner.wait(30)
    assert owner.returncode == 0, err
    for stderr in (proc.stderr, err):
        for noise in ("leaked", "No such file", "Traceback"):
            assert noise not in stderr, stderr
