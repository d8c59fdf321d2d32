"""Services and the ``Queue`` spin before they sleep too (issue 37, item 2).

Their connections ([`connection`][easycore.common.parallel.connection]) wait
as a process back-end's pipes do: a client for its reply, a server for the
next frame, each spinning for a moment (``_os.spin``) while the answers come
quickly. Calls answer alike whatever ``EASYCORE_SPIN_US`` says, and a bad
value is named before any process starts or any socket listens.
"""

from __future__ import annotations

import pytest
from _services_support import Tool

from easycore.common.parallel import Queue
from easycore.common.parallel._os import spin
from easycore.common.parallel.services import Service

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("budget", ["0", "200", "100000"])
def test_service_and_queue_calls_answer_alike_whatever_the_budget(monkeypatch, no_leaks,
                                                                   budget):
    # 0.1 s: every wait spins its whole length, each answer found by a spin;
    # 0: every wait sleeps.
    monkeypatch.setenv(spin.ENV, budget)
    with Service.start(Tool, name="spin") as handle, Queue() as q:
        for x in range(50):
            assert handle.call("echo", x) == ((x,), {})
            q.put(x)
            assert q.get(timeout=30) == x
        assert handle.call("record", "last") == 1


def test_a_bad_budget_fails_a_service_start(monkeypatch, no_leaks):
    monkeypatch.setenv(spin.ENV, "fast")
    with pytest.raises(ValueError, match="EASYCORE_SPIN_US='fast'"):
        Service.start(Tool)


def test_a_bad_budget_fails_a_queue_before_it_listens(monkeypatch, no_leaks):
    monkeypatch.setenv(spin.ENV, "-5")
    with pytest.raises(ValueError, match="EASYCORE_SPIN_US='-5'"):
        Queue()

