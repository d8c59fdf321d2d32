"""``interrupts.held``: whether a Ctrl-C is held in this thread now (``deferred``).

A ``KeyboardInterrupt`` raised while one is held cannot be the user's Ctrl-C:
the engine then takes it for an object's own (a result's unpickling) and
fails that call only.
"""

from __future__ import annotations

import signal
import threading

import pytest
from ctrl_c import needs_python_sigint_handler

from easycore.common.parallel._os import interrupts

pytestmark = [pytest.mark.timeout(60), needs_python_sigint_handler]


def test_held_inside_deferred_in_the_main_thread_only():
    assert not interrupts.held()
    with interrupts.deferred():
        assert interrupts.held()
        with interrupts.deferred():  # nested: still held, and after the inner one
            assert interrupts.held()
        assert interrupts.held()
    assert not interrupts.held()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_while_held_is_raised_on_the_way_out():
    with pytest.raises(KeyboardInterrupt), interrupts.deferred():
        signal.raise_signal(signal.SIGINT)
        assert interrupts.held()  # (still here: the Ctrl-C waits)
    assert not interrupts.held()


def test_never_held_in_another_thread():
    seen = []

    def look():
        with interrupts.deferred():
            seen.append(interrupts.held())

    with interrupts.deferred():
        thread = threading.Thread(target=look)
        thread.start()
        thread.join(30)
    assert seen == [False]
