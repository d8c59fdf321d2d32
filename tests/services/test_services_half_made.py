"""A handle's connection that fails to open part way leaves nothing behind.

A handle connects on its first call: a socket, a wake-up pipe and a reader
thread. A reader that cannot start, a pipe that cannot be made, or a Ctrl-C
that lands inside the reader's ``Thread.start`` (which waits for the new
thread), used to leave the connected socket, the pipe or the running reader
behind. Now the call raises that error (or the ``KeyboardInterrupt``), nothing
stays open, and the handle's next call connects afresh. A real service
process and real sockets; only the failure is made.
"""

from __future__ import annotations

import errno
import os
import pickle
import threading

import pytest
from _services_support import Tool
from ctrl_c import needs_python_sigint_handler
from leaks import check_leaks
from thread_starts import cannot_start, ctrl_c_once_it_runs, on_start_of

from easycore.common.parallel.services import Service

pytestmark = pytest.mark.timeout(120)

READER = "easycore-service-client"


@pytest.fixture
def service(services_dir):
    """A running service, then a check that the block in between left nothing open here."""
    with Service.start(Tool) as handle:
        assert handle.call("echo", 0) == ((0,), {})  # the owner's own connection, made
        with check_leaks(fds=True):
            yield handle


def test_a_reader_that_cannot_start(monkeypatch, service):
    handle = _fresh(service)
    with monkeypatch.context() as patch:
        on_start_of(patch, READER, cannot_start)
        with pytest.raises(RuntimeError, match="can't start new thread"):
            handle.call("echo", 1)
    assert [t for t in threading.enumerate() if t.name == READER] == [_owners(service)]
    assert handle.call("echo", 2) == ((2,), {})  # connects afresh
    handle.close()


def test_no_descriptor_for_the_wake_up_pipe(monkeypatch, service):
    handle = _fresh(service)
    with monkeypatch.context() as patch:
        patch.setattr(os, "pipe", lambda: _raise(OSError(errno.EMFILE, "Too many open files")))
        with pytest.raises(OSError, match="Too many open files"):
            handle.call("echo", 1)
    assert handle.call("echo", 2) == ((2,), {})
    handle.close()


@needs_python_sigint_handler
def test_a_ctrl_c_inside_the_readers_start(monkeypatch, service):
    handle = _fresh(service)

    with monkeypatch.context() as patch:
        on_start_of(patch, READER, ctrl_c_once_it_runs)
        with pytest.raises(KeyboardInterrupt):
            handle.call("echo", 1)
    assert [t for t in threading.enumerate() if t.name == READER] == [_owners(service)]
    assert handle.call("echo", 2) == ((2,), {})
    handle.close()


def _raise(error):
    raise error


def _fresh(service):
    """Another handle to the same service, not connected yet."""
    return pickle.loads(pickle.dumps(service))


def _owners(service):
    """The reader thread of the owner's own connection."""
    return service._state.channel._reader
