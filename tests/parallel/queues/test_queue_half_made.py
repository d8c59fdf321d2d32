"""A ``Queue`` whose start fails part way leaves nothing behind.

The queue's server listens on a socket and serves from two threads. A start
that cannot get a thread or a descriptor, or that a Ctrl-C lands in (inside
``Thread.start``, which waits for the new thread), used to leave the socket
listening, its file in the services directory, descriptors open and the
serve thread running for the rest of the process. Now the error (or the
``KeyboardInterrupt``) reaches the caller and nothing stays: no thread, no
descriptor, no socket file. Real sockets and threads; only the failure is
made (a thread that cannot start, a pipe that cannot be made, a SIGINT).
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import threading

import pytest
from ctrl_c import needs_python_sigint_handler
from leaks import check_leaks
from thread_starts import cannot_start, ctrl_c_once_it_runs, on_start_of

from easycore.common.parallel import Queue
from easycore.common.parallel.connection.address import ENV_DIR

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def services_dir(monkeypatch):
    path = tempfile.mkdtemp(prefix="ecq-")  # mode 0700: the queue's socket lands here
    monkeypatch.setenv(ENV_DIR, path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def nothing_left(services_dir):
    with check_leaks(fds=True, empty_dir=services_dir):
        yield


def _a_queue_works():
    with Queue() as q:
        q.put(1)
        assert q.get(timeout=10) == 1


@pytest.mark.parametrize("thread", ["-serve", "-door"])
def test_a_server_thread_that_cannot_start(monkeypatch, services_dir, nothing_left, thread):
    with monkeypatch.context() as patch:
        on_start_of(patch, "easycore-queue" + thread, cannot_start)
        with pytest.raises(RuntimeError, match="can't start new thread"):
            Queue()
    assert os.listdir(services_dir) == []
    _a_queue_works()


def test_no_descriptor_for_the_servers_pipes(monkeypatch, services_dir, nothing_left):
    pipe = os.pipe
    made = []

    def second_fails():
        if made:
            raise OSError(errno.EMFILE, "Too many open files")
        made.append(pipe())
        return made[-1]

    with monkeypatch.context() as patch:
        patch.setattr(os, "pipe", second_fails)
        with pytest.raises(OSError, match="Too many open files"):
            Queue()
    assert made and os.listdir(services_dir) == []
    for fd in made[0]:  # the first pipe was the server's: closed again
        with pytest.raises(OSError):
            os.fstat(fd)
    _a_queue_works()


@needs_python_sigint_handler
@pytest.mark.parametrize("thread", ["-serve", "-door"])
def test_a_ctrl_c_inside_a_server_threads_start(monkeypatch, services_dir, nothing_left, thread):
    with monkeypatch.context() as patch:
        on_start_of(patch, "easycore-queue" + thread, ctrl_c_once_it_runs)
        with pytest.raises(KeyboardInterrupt):
            Queue()
    assert os.listdir(services_dir) == []
    assert not [t for t in threading.enumerate() if t.name.startswith("easycore-queue")]
    _a_queue_works()
