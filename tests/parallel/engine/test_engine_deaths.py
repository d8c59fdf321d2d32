"""A worker death costs exactly one item (issue 20 items 19 and 20, issue 24 item 6).

Every worker writes which item it runs into its progress slot (one store per
item), so a death fails only the item that was running: the chunk's items
whose results died with the worker run again elsewhere (at least once; every
result is delivered exactly once), the items not yet run run elsewhere. Work
sent to a worker that had died before it received it (its death not yet
noticed) goes to another worker and costs nothing.
"""

from __future__ import annotations

import fcntl
import functools
import multiprocessing.connection
import os
import signal
import time

import pytest
from _engine_funcs import (
    DiesWhenLoaded,
    SlowDie,
    exit_at,
    first,
    kill_self_on,
    logged_exit_on,
    pid,
    runs,
    square,
)
from _inherit_targets import break_task_pipe_unless_first, die_unless_first, gate

from easycore.common.parallel import BackgroundTask, JobQueue, Pool, WorkerDiedError

pytestmark = pytest.mark.timeout(180)

WAIT = 60
METHODS = ["fork", "spawn", "forkserver"]


def _collect(it):
    out = []
    while True:
        try:
            out.append(it.next(timeout=WAIT))
        except StopIteration:
            return out
        except WorkerDiedError as exc:
            out.append(("died", exc.items))


@pytest.mark.parametrize("method", METHODS)
def test_a_death_without_a_timeout_fails_only_the_running_item(method, tmp_path, no_leaks):
    fn = functools.partial(logged_exit_on, bad=25, folder=str(tmp_path))
    with Pool(2, start_method=method) as pool:
        got = _collect(pool.imap_unordered(fn, range(60), chunksize=10))
    assert ("died", [25]) in got
    done = sorted(g for g in got if not isinstance(g, tuple))
    assert done == [x for x in range(60) if x != 25]  # each delivered exactly once
    # Only items of the dead chunk that had run (their results died) ran again.
    again = {x for x, n in runs(tmp_path).items() if n > 1}
    assert again <= set(range(20, 25))


def test_a_runner_death_names_only_the_running_item(no_leaks):
    runner = SlowDie(["cpu:0", "cpu:1"], cfg={"item": 700})
    try:
        with pytest.raises(WorkerDiedError) as info:
            runner(range(2000))
        assert info.value.items == [700]
    finally:
        runner.close()


def test_tiny_items_a_death_still_costs_one_item(no_leaks):
    # Items of well under 5 us run unmarked (a store each would cost 10-20 %):
    # a death there runs the chunk again one item at a time, so that the
    # guilty item fails alone (it kills a second worker doing so).
    with Pool(2, max_deaths=3) as pool:
        got = _collect(pool.imap_unordered(functools.partial(exit_at, bad=1500), range(3000)))
    assert [g for g in got if isinstance(g, tuple)] == [("died", [1500])]
    assert sorted(g for g in got if not isinstance(g, tuple)) == [
        x for x in range(3000) if x != 1500]


def test_a_background_task_death_costs_one_call(tmp_path, no_leaks):
    # Each call dies once in a while; every failure names one call.
    with BackgroundTask(os._exit, (3,), workers=1, max_deaths=100) as bg:
        for _ in range(3):
            with pytest.raises(WorkerDiedError) as info:
                bg.get(timeout=WAIT)
            assert len(info.value.items) == 1


def _hold_and_kill(pool):
    """Kill one idle worker while the pool cannot notice it (its pump is held)."""
    engine = pool._engine
    engine._pump_lock.acquire()
    victim = pool.worker_pids[0]
    os.kill(victim, signal.SIGKILL)
    # The sentinel says it exited, without reaping it (the pool's job).
    sentinel = pool._backend._by_slot[0].process.sentinel
    assert multiprocessing.connection.wait([sentinel], WAIT)
    return engine, victim


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_work_sent_to_a_dead_unnoticed_worker_goes_to_another(method, no_leaks):
    with Pool(2, start_method=method, max_deaths=1) as pool:
        pool.map(square, range(4), chunksize=1)
        engine, victim = _hold_and_kill(pool)
        try:
            result = pool.map_async(square, range(20), chunksize=1)
        finally:
            engine._pump_lock.release()
        assert result.get(timeout=WAIT) == [x * x for x in range(20)]
        assert victim not in pool.worker_pids
        assert pool.map(square, range(3)) == [0, 1, 4]


def test_a_broadcast_to_a_dead_unnoticed_worker_runs_on_its_replacement(no_leaks):
    import threading

    with Pool(2, start_method="fork", max_deaths=1) as pool:
        engine, victim = _hold_and_kill(pool)
        out: list = []
        caller = threading.Thread(target=lambda: out.append(pool.broadcast(pid)), daemon=True)
        try:
            caller.start()
            for _ in range(1000):  # until its job is submitted (and sent)
                if engine.state.jobs or out:
                    break
                caller.join(0.01)
        finally:
            engine._pump_lock.release()
        caller.join(WAIT)
        assert out and victim not in out[0] and sorted(out[0]) == sorted(pool.worker_pids)


def test_a_function_that_kills_workers_as_it_loads_fails_after_max_deaths(no_leaks):
    # Its deaths happen after the chunk was received: they count, so the job
    # fails instead of being sent to fresh workers forever.
    fn = functools.partial(first, _extra=DiesWhenLoaded())
    with Pool(2, max_deaths=2) as pool:
        with pytest.raises(WorkerDiedError):
            pool.map(fn, range(6), chunksize=1)
        assert pool.map(square, range(3)) == [0, 1, 4]


# ------------------------------------------- a worker killed while it starts
# (issue 34 item 28) A worker killed before its init hooks returned ran no
# job: its death is no job's to pay for, whatever ``max_deaths`` is. Under
# load a spawned worker could still be starting when the test above killed
# it, and with ``max_deaths=1`` that one kill ended the pool.
class _Held:
    """The lock a gated initializer waits on (see ``_inherit_targets.gate``)."""

    def __init__(self, tmp_path):
        self.dir, self.path = str(tmp_path), str(tmp_path / "held")
        self.file = open(self.path, "wb")  # noqa: SIM115 (held until release())
        fcntl.flock(self.file.fileno(), fcntl.LOCK_EX)

    def release(self):
        if not self.file.closed:
            fcntl.flock(self.file.fileno(), fcntl.LOCK_UN)
            self.file.close()


def _kill_the_other(pids, ready):
    (victim,) = [p for p in pids if p != ready]
    os.kill(victim, signal.SIGKILL)
    return victim


@pytest.mark.parametrize("method", METHODS)
def test_a_pool_worker_killed_while_it_starts_is_replaced_even_with_max_deaths_1(
        method, tmp_path, no_leaks):
    held = _Held(tmp_path)
    try:
        with Pool(2, start_method=method, max_deaths=1, initializer=gate,
                  initargs=(held.dir, held.path)) as pool:
            ready = pool.apply(pid)  # the one worker past its initializer
            victim = _kill_the_other(pool.worker_pids, ready)
            held.release()  # its replacement may start now
            assert pool.map(square, range(20), chunksize=1) == [x * x for x in range(20)]
            everyone = pool.broadcast(pid)  # waits for the replacement
            assert victim not in everyone and ready in everyone and len(set(everyone)) == 2
    finally:
        held.release()


@pytest.mark.parametrize("client", ["BackgroundTask", "JobQueue"])
def test_a_stream_worker_killed_while_it_starts_is_replaced_even_with_max_deaths_1(
        client, tmp_path, no_leaks):
    held = _Held(tmp_path)
    try:
        if client == "BackgroundTask":
            stream = BackgroundTask(pid, workers=2, max_deaths=1, initializer=gate,
                                    initargs=(held.dir, held.path))

            def answers():
                return {stream.get(timeout=WAIT)}
        else:
            stream = JobQueue(workers=2, max_deaths=1, initializer=gate,
                              initargs=(held.dir, held.path))

            def answers():
                # Two jobs in flight at once: one job after another runs on the
                # worker that ran the last, so the second is what reaches the
                # replacement once it is ready.
                stream.put(pid)
                stream.put(pid)
                return {stream.get(timeout=WAIT), stream.get(timeout=WAIT)}
        with stream:
            (ready,) = answers()  # the other worker is held in its initializer
            victim = _kill_the_other(stream.worker_pids, ready)
            held.release()
            seen = answers()
            deadline = time.monotonic() + WAIT
            while not seen - {ready} and time.monotonic() < deadline:
                seen |= answers()  # until the replacement (started, then ready) answers too
            assert victim not in seen and len(seen - {ready}) == 1
    finally:
        held.release()


def _pool_of(client):
    return client if isinstance(client, Pool) else client._open_pool()


def _ready_for(pool, slot, seconds):
    """Wait until ``slot``'s worker said it was ready ``seconds`` ago or more (the
    engine's own record of it); return its pid."""
    state = pool._engine.state
    w = state.workers[slot]
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        with state.lock:
            since = time.monotonic() - w.ready_at if w.ready else -1.0
        assert state.broken is None, f"the pool broke: {state.broken}"
        if since >= seconds:
            return pool.worker_pids[slot]
        time.sleep(0.01)  # (no event says a replacement is ready)
    raise AssertionError(f"worker {slot} was not ready within {WAIT} s")


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("client", ["Pool", "JobQueue"])
def test_an_idle_worker_killed_again_and_again_after_its_start_is_replaced_each_time(
        client, method, monkeypatch, no_leaks):
    # Killed from outside (a user's kill, a scheduler's) long after it said it
    # was ready, before any chunk reached it: no failed start. More kills in a
    # row than start_deaths_limit broke the whole pool; the stdlib's replaces
    # its workers however often they are killed, and so does this.
    from easycore.common.parallel.engine.supervision import Supervisor

    monkeypatch.setattr(Supervisor, "start_grace", 0.2)  # (1 s by default)
    if client == "Pool":
        stream = Pool(2, start_method=method)
        stream.apply(pid)  # (an idle pool's deaths are noticed once it ran a job)
    else:
        stream = JobQueue(workers=2, start_method=method)
        stream.put(pid)
        stream.get(timeout=WAIT)
    with stream:
        pool = _pool_of(stream)
        victims = []
        for _ in range(Supervisor.start_deaths_limit + 1):
            victim = _ready_for(pool, 1, Supervisor.start_grace)
            os.kill(victim, signal.SIGKILL)
            victims.append(victim)
            deadline = time.monotonic() + WAIT
            while (pool.worker_pids[1] == victim and pool._engine.state.broken is None
                   and time.monotonic() < deadline):
                time.sleep(0.01)  # (its replacement's start is not announced either)
        _ready_for(pool, 1, 0.0)
        assert pool._engine.state.workers[1].items_done == 0  # each died idle
        assert pool._engine.state.broken is None
        assert pool.map(square, range(8), chunksize=1) == [x * x for x in range(8)]
        everyone = pool.broadcast(pid)
    assert len(set(everyone)) == 2 and not set(everyone) & set(victims)


def test_a_worker_that_dies_in_every_start_still_ends_the_pool(tmp_path, no_leaks):
    # Not replaced forever: the limit on deaths before a start completes holds
    # with max_deaths=1 too.
    with pytest.raises(WorkerDiedError), Pool(2, initializer=die_unless_first,
                                              initargs=(str(tmp_path),), max_deaths=1,
                                              start_method="fork") as pool:
        for _ in range(200):
            pool.broadcast(pid)


@pytest.mark.parametrize("method", METHODS)
def test_a_worker_that_dies_after_it_is_ready_in_every_start_ends_the_pool(
        method, tmp_path, no_leaks):
    # Each replacement says it is ready, then dies before any chunk reaches it
    # (its task pipe is gone): nothing it received is at fault, so no job's
    # max_deaths counts it, and the pool replaced it for ever while the call
    # waited. Deaths before a slot's first chunk came back are failed starts.
    # (Under load the first one may die while the constructor waits for the
    # other: then the constructor raises it.)
    init = {"initializer": break_task_pipe_unless_first, "initargs": (str(tmp_path),)}
    with pytest.raises(WorkerDiedError) as info, Pool(2, start_method=method, **init) as pool:
        for _ in range(200):  # waits for the broken slot's replacement each time
            pool.broadcast(pid)
    assert "exit code 75" in str(info.value)


@pytest.mark.parametrize("client", ["BackgroundTask", "JobQueue"])
def test_a_stream_whose_worker_dies_after_it_is_ready_in_every_start_ends(
        client, tmp_path, no_leaks):
    # The streams share the pool's engine: the whole worker keeps answering,
    # the broken slot's deaths end the stream instead of replacing it for ever.
    # (Under load the first one may die while the constructor waits for the
    # other: then the constructor raises it.)
    init = {"initializer": break_task_pipe_unless_first, "initargs": (str(tmp_path),)}

    def make():
        if client == "BackgroundTask":
            return BackgroundTask(pid, workers=2, **init)
        return JobQueue(workers=2, **init)

    def answer(stream):
        if client == "JobQueue":
            stream.put(pid)
        return stream.get(timeout=WAIT)

    deadline = time.monotonic() + WAIT  # a bound, not a timing: it ends far sooner
    with pytest.raises(WorkerDiedError) as info, make() as stream:
        while time.monotonic() < deadline:  # the whole worker answers meanwhile
            answer(stream)
    assert "exit code 75" in str(info.value)


# ------------------------------------------------- who sent the SIGKILL?
@pytest.mark.parametrize("oom_kills", [0, 1])
def test_a_sigkill_names_the_out_of_memory_killer_only_if_it_killed_meanwhile(
        oom_kills, tmp_path, monkeypatch, no_leaks):
    from easycore.common.parallel._os import oom

    vmstat = tmp_path / "vmstat"
    vmstat.write_text("nr_free_pages 1\noom_kill 5\n")
    monkeypatch.setattr(oom, "_VMSTAT", str(vmstat))
    with Pool(1, start_method="fork") as pool:
        victim = pool.worker_pids[0]
        vmstat.write_text(f"nr_free_pages 1\noom_kill {5 + oom_kills}\n")
        result = pool.apply_async(kill_self_on, (victim,))
        with pytest.raises(WorkerDiedError) as info:
            result.get(timeout=WAIT)
    message = str(info.value)
    assert "SIGKILL" in message and info.value.oom_kills == oom_kills
    assert ("out-of-memory killer ended 1 process" in message) == bool(oom_kills)
