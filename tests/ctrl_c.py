"""A Ctrl-C that the kernel hands to another thread than the main one.

A process-directed SIGINT goes to any thread that does not block it: usually
the main thread, but not always (one with another signal pending, or blocking
SIGINT for a moment, is passed over for a pool's coordinator or a service's
reader). Python raises ``KeyboardInterrupt`` in the main thread only, once it
runs Python code again. These helpers send the SIGINT to a thread of the
test's own with ``pthread_kill``, which the kernel gives to that thread only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence, Tuple

import pytest

WAIT = 30.0  # seconds the helpers wait for anything at most

#: the tests need Python's own handler (another one, e.g. a debugger's, skips them)
needs_python_sigint_handler = pytest.mark.skipif(
    signal.getsignal(signal.SIGINT) is not signal.default_int_handler,
    reason="needs Python's own SIGINT handler in the test process",
)


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + WAIT
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {WAIT} s")
        time.sleep(0.01)


def interrupted_elsewhere(call: Callable[[], Any], folder: Path) -> float:
    """Run ``call()``, which blocks on a task that writes ``folder/0`` once it runs
    and holds until ``folder/release`` exists; SIGINT goes to another thread once
    ``folder/0`` exists. The task is released afterwards, so that whatever ran it
    can end.

    Returns:
        float: seconds from the SIGINT to the ``KeyboardInterrupt`` (which must come).
    """
    sent_at: list = []
    armed = threading.Event()  # the SIGINT comes inside ``pytest.raises`` only

    def ctrl_c() -> None:
        armed.wait(WAIT)
        _wait_for(folder / "0")
        sent_at.append(time.monotonic())
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    thread = threading.Thread(target=ctrl_c, name="ctrl-c-elsewhere")
    thread.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            armed.set()
            call()
        interrupted_at = time.monotonic()
    finally:
        thread.join(WAIT + 5)
        (folder / "release").touch()
    assert not thread.is_alive()
    return interrupted_at - sent_at[0]


def ctrl_c_a_script(script: Path, args: Sequence[str] = (), group: bool = True) -> Tuple[str, str]:
    """Run ``script`` in a process group of its own, like a terminal job; once it
    prints ``working``, send SIGINT to the whole group (``group``, as a terminal's
    Ctrl-C does) or to the script alone. Its pipes are closed whatever happens
    (left open by a failure, they were the next test's "unclosed file" warnings);
    a script still running after 60 s is killed with its group.

    Returns:
        tuple: the script's stdout and stderr (it exited with 0).
    """
    with subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(script.parent),
        start_new_session=True,
    ) as proc:
        try:
            assert proc.stdout.readline().strip() == "working", proc.stderr.read()
            if group:
                os.killpg(proc.pid, signal.SIGINT)
            else:
                os.kill(proc.pid, signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
    assert proc.returncode == 0, err
    return out, err
