"""A short spin before a blocking wait (issue 37, item 2): ``_os.spin``.

A kept-alive call's answer comes within microseconds; a waiter that looks for
it for a moment before sleeping skips the two cross-CPU wake-ups that cost
more than the call's Python. The spin is bounded (its budget, the wait's own
timeout), stops while waits are long, never runs on one CPU, and is set by
``EASYCORE_SPIN_US``, whose bad values are named before anything starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from _parallel_helpers import SumSquares
from _parallel_support import METHODS, stray_children

from easycore.common.parallel import Pool
from easycore.common.parallel._os import spin
from easycore.common.parallel._os.threads import available_cpus
from easycore.common.parallel.worker import loop

pytestmark = pytest.mark.timeout(120)

MANY_CPUS = pytest.mark.skipif(available_cpus() < 2, reason="one CPU: nothing spins")


# ------------------------------------------------------------------ budget
@MANY_CPUS
def test_the_budget_is_200_us_by_default_and_read_in_microseconds(monkeypatch):
    monkeypatch.delenv(spin.ENV, raising=False)
    assert spin.budget() == pytest.approx(200e-6)
    monkeypatch.setenv(spin.ENV, "  ")  # blank: the default
    assert spin.budget() == pytest.approx(200e-6)
    monkeypatch.setenv(spin.ENV, "50")
    assert spin.budget() == pytest.approx(50e-6)
    monkeypatch.setenv(spin.ENV, "0")
    assert spin.budget() == 0.0


@pytest.mark.parametrize("raw", ["fast", "-1", "nan", "inf", "1e999"])
def test_a_bad_budget_is_named(monkeypatch, raw):
    monkeypatch.setenv(spin.ENV, raw)
    with pytest.raises(ValueError, match=f"EASYCORE_SPIN_US={raw!r}: expected microseconds"):
        spin.budget()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_a_process_held_on_one_cpu_never_spins():
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from easycore.common.parallel._os import spin; print(spin.budget())")
    env = dict(os.environ, **{spin.ENV: "300"})  # even when asked to
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == 0.0


def test_a_worker_reading_a_bad_budget_does_not_spin(monkeypatch):
    # The caller names a bad value before it starts a worker; a worker that
    # reads one anyway (the environment changed between) just sleeps.
    monkeypatch.setenv(spin.ENV, "fast")
    assert loop._spin_budget() == 0.0


# ----------------------------------------------------------------- Spinner
def test_a_spin_ends_with_what_ready_returned_once_true():
    calls = []

    def ready():
        calls.append(1)
        return ["event"] if len(calls) == 3 else []

    got, started = spin.Spinner(60.0).spin(ready, None)  # ends by readiness, not the budget
    assert got == ["event"] and len(calls) == 3
    assert started <= time.perf_counter()


def test_a_spin_in_vain_ends_at_its_budget_or_at_the_wait_s_timeout():
    got, _ = spin.Spinner(0.001).spin(list, None)
    assert got == []  # ready's last answer: the caller now blocks
    got, _ = spin.Spinner(60.0).spin(list, 0.001)  # a budget of a minute: the timeout ends it
    assert got == []


def test_nothing_spins_without_a_budget_or_with_a_timeout_of_zero():
    def ready():
        raise AssertionError("called")

    assert spin.Spinner(0.0).spin(ready, None)[0] is None
    assert spin.Spinner(60.0).spin(ready, 0.0)[0] is None


def test_after_a_long_wait_one_wait_in_eight_spins_and_a_short_one_spins_again():
    spinner = spin.Spinner(0.01)
    calls = []

    def ready():
        calls.append(1)

    _, started = spinner.spin(ready, None)
    assert calls  # nothing known yet: it spins
    spinner.waited(started - 1.0)  # a wait of a second: longer than SHORT budgets
    n = len(calls)
    for _ in range(spin.PROBE_EVERY - 1):
        got, started = spinner.spin(ready, None)
        assert got is None and len(calls) == n  # sleeps at once
        spinner.waited(started - 1.0)  # long again
    _, started = spinner.spin(ready, None)  # the probe
    assert len(calls) > n
    spinner.waited(started)  # that wait was short
    n = len(calls)
    spinner.spin(ready, None)
    assert len(calls) > n  # spins again at once


def test_a_wait_up_to_a_few_budgets_long_counts_as_short():
    # A wait that slept is longer by the wake-ups a spin saves: up to SHORT
    # budgets, the next wait still spins.
    spinner = spin.Spinner(0.01)
    calls = []

    def ready():
        calls.append(1)
        return True

    _, started = spinner.spin(ready, None)
    spinner.waited(started - 0.01 * (spin.SHORT - 1))  # (SHORT - 1) budgets and a bit
    spinner.spin(ready, None)
    assert len(calls) == 2
    _, started = spinner.spin(ready, None)
    spinner.waited(started - 0.01 * (spin.SHORT + 1))  # longer than SHORT budgets
    assert spinner.spin(ready, None)[0] is None and len(calls) == 3


def test_a_wait_blocks_for_the_rest_of_its_timeout_after_a_spin_in_vain():
    asked = []

    def block(seconds):
        asked.append(seconds)
        return ["slept"]

    assert spin.Spinner(0.001).wait(list, block, 1.0) == ["slept"]
    assert 0.0 < asked[-1] < 1.0  # less the spin
    assert spin.Spinner(0.0).wait(list, block, 1.0) == ["slept"]
    assert asked[-1] == 1.0  # no spin: the whole timeout
    assert spin.Spinner(0.001).wait(list, block, None) == ["slept"]
    assert asked[-1] is None  # no timeout: for ever
    assert spin.Spinner(60.0).wait(lambda: ["found"], block, None) == ["found"]
    assert len(asked) == 3  # found by the spin: no block


# ------------------------------------------------------ workers and callers
@pytest.mark.parametrize("budget", ["0", "200", "100000"])
@pytest.mark.parametrize("method", METHODS)
def test_kept_alive_calls_answer_alike_whatever_the_budget(monkeypatch, no_leaks, budget,
                                                           method):
    # A budget of 0.1 s: every wait spins its whole length, every answer is
    # found by a spin; none: every wait sleeps.
    monkeypatch.setenv(spin.ENV, budget)
    with SumSquares(2, start_method=method) as runner, Pool(2, start_method=method) as pool:
        for x in range(30):
            assert runner([x]) == x * x
            assert pool.apply(pow, (x, 2)) == x * x
        assert runner(range(100)) == sum(x * x for x in range(100))
        assert pool.map(abs, range(-50, 0)) == list(range(50, 0, -1))


@pytest.mark.parametrize("client", ["pool", "runner"])
def test_a_bad_budget_fails_the_start_before_any_worker(monkeypatch, no_leaks, client):
    before = {p.pid for p in stray_children(set())}
    monkeypatch.setenv(spin.ENV, "fast")
    with pytest.raises(ValueError, match="EASYCORE_SPIN_US='fast'"):
        if client == "pool":
            Pool(2, start_method="fork" if "fork" in METHODS else None)
        else:
            SumSquares(2)
    assert {p.pid for p in stray_children(set())} <= before
