"""A Ctrl-C that the kernel hands to another thread than the main one.

A process-directed SIGINT goes to any thread that does not block it: usually
the main thread, but not always (one with another signal pending, or blocking
SIGINT for a moment, is passed over for a pool's coordinator or a service's
reader). Python raises ``KeyboardInterrupt`` in the main thread only, once it
runs Python code again. These helpers send the SIGINT to a thread of the
test's own with ``pthread_kill``, which the kernel gives to that thread only.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

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
