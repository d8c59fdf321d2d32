"""``spawn``: a process group of real ranks (gloo on 127.0.0.1), and how it fails.

Each failure test gives the call a long ``timeout``: the right error (not a
``TimeoutError``) proves the call did not wait for the other ranks, blocked in
a collective, to time out. The ranks' pids are then checked gone.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import threading

import psutil
import pytest
import torch
from _dist_helpers import (
    collectives,
    exit_on_rank_2,
    hang_on_rank_1,
    raise_on_rank_1,
    rank_and_sum,
)
from _dist_support import gpu_count, is_loopback, read_pids
from processes import wait_gone

from easycore.torch.distributed import WorkerDiedError, WorkerError, spawn

pytestmark = pytest.mark.timeout(120)


def test_three_ranks_run_collectives_and_return_in_rank_order(no_leaks):
    results = spawn(collectives, 3, 5.0)

    assert [r["rank"] for r in results] == [0, 1, 2]
    assert {(r["world_size"], r["device"], r["backend"]) for r in results} == {(3, "cpu", "gloo")}
    assert len({r["pid"] for r in results}) == 3
    assert [r["total"] for r in results] == [6.0, 6.0, 6.0]  # all_reduce
    assert [r["shared"] for r in results] == [5.0, 5.0, 5.0]  # broadcast from rank 0
    expected = torch.tensor([[0.0, 0.0], [1.0, 5.0], [2.0, 10.0]])
    for r in results:
        assert torch.equal(r["gathered"], expected)  # all_gather
    # recv_any saw both senders with their own values; irecv_any's wait() names rank 2
    assert results[0]["received"] == ([(1, 10.0), (2, 20.0)], (2, -1.0))
    # the store and gloo listened on loopback only (the caller's listeners included)
    addresses = {a for r in results for a in r["listening"]}
    assert addresses and all(map(is_loopback, addresses)), addresses
    assert wait_gone([r["pid"] for r in results]) == []


def test_a_lambda_is_sent_by_value(no_leaks):
    pytest.importorskip("cloudpickle")
    offset = 3
    assert spawn(lambda ctx, k: ctx.rank * k + offset, 2, 10) == [3, 13]


def test_a_raising_rank_raises_worker_error_naming_it(tmp_path, no_leaks):
    with pytest.raises(WorkerError) as info:
        spawn(raise_on_rank_1, 3, str(tmp_path), timeout=120)
    err = info.value
    assert err.rank == 1 and err.worker_index == 1 and err.device == "cpu"
    assert err.exc_type == "ValueError"
    assert "rank 1 of 3" in str(err) and "rank 1 gives up" in str(err)
    assert "raise_on_rank_1" in err.remote_traceback
    assert isinstance(err.__cause__, ValueError)
    pids = read_pids(tmp_path)
    assert len(pids) == 3 and wait_gone(pids) == []


def test_a_dead_rank_raises_worker_died_error(tmp_path, no_leaks):
    with pytest.raises(WorkerDiedError) as info:
        spawn(exit_on_rank_2, 3, str(tmp_path), timeout=120)
    err = info.value
    # the death, not the peers' "Connection closed by peer" that it causes
    assert err.rank == 2 and err.exitcode == 7 and err.device == "cpu"
    assert "rank 2 of 3" in str(err)
    pids = read_pids(tmp_path)
    assert len(pids) == 3 and wait_gone(pids) == []


def test_a_stuck_rank_raises_timeout_error(tmp_path, no_leaks):
    with pytest.raises(TimeoutError, match=r"spawn\(hang_on_rank_1\) did not finish within 3") \
            as info:
        spawn(hang_on_rank_1, 3, str(tmp_path), timeout=3)
    # Where each rank was: the stuck one in the test's own function.
    where = r"rank 1 \(device 'cpu', pid \d+\) in hang_on_rank_1 \(\S+_dist_helpers\.py:\d+\)"
    assert re.search(where, str(info.value)), str(info.value)
    pids = read_pids(tmp_path)
    assert len(pids) == 3 and wait_gone(pids) == []


def test_a_group_that_cannot_form_names_the_step(no_leaks):
    if torch.distributed.is_mpi_available():
        pytest.skip("this torch has MPI")
    with pytest.raises(WorkerError) as info:
        spawn(rank_and_sum, 2, 1, backend="mpi", timeout=120)
    err = info.value
    assert err.hook == "joining the process group" and err.rank in (0, 1)
    assert f"rank {err.rank} of 2" in str(err) and "MPI" in str(err)


@pytest.mark.forks_with_threads  # each call starts its ranks from a thread of the test's
def test_two_calls_at_once_do_not_collide(no_leaks):
    results: dict = {}
    errors: list = []
    start = threading.Barrier(2)

    def call(value: int) -> None:
        try:
            start.wait(timeout=30)
            results[value] = spawn(rank_and_sum, 2, value)
        except BaseException as exc:  # noqa: BLE001 (any error of the thread is reported below)
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(v,)) for v in (1, 100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=100)
    assert not errors, errors
    assert results == {1: [(0, 2.0), (1, 2.0)], 100: [(0, 200.0), (1, 200.0)]}


def test_ranks_started_with_spawn(no_leaks):
    # The start method CUDA ranks use: fresh interpreters importing the helpers.
    assert spawn(rank_and_sum, 2, 4, start_method="spawn") == [(0, 8.0), (1, 8.0)]


def test_a_script_s_own_function_reaches_ranks_started_with_spawn(tmp_path, no_leaks):
    # Code of __main__ cannot be imported by a fresh interpreter: it goes by value.
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import torch
        import torch.distributed as dist
        from easycore.torch.distributed import spawn

        SCALE = 3.0

        def total(ctx):
            t = torch.tensor([SCALE * (ctx.rank + 1)])
            dist.all_reduce(t, group=ctx.group)
            return t.item()

        if __name__ == "__main__":
            print(spawn(total, 2, start_method="spawn"))
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[9.0, 9.0]"


def test_a_store_host_that_cannot_be_bound_fails_cleanly(no_leaks):
    ours = {a.address for addresses in psutil.net_if_addrs().values() for a in addresses}
    foreign = next(a for a in ("192.0.2.77", "198.51.100.77", "203.0.113.77") if a not in ours)
    # Rank 0 binds it before anything connects: nothing leaves the machine.
    with pytest.raises(WorkerError, match="opening the rendezvous store") as info:
        spawn(rank_and_sum, 2, 1, host=foreign)
    assert info.value.rank == 0 and info.value.exc_type == "OSError"


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"world_size": 0}, ValueError, "world_size must be a positive int"),
        ({"devices": ["cpu"]}, ValueError, "1 entries for world_size=2"),
        ({"devices": "cpu"}, TypeError, "one per rank"),
        ({"devices": ["cpu", "gpu:0"]}, ValueError, "invalid device 'gpu:0'"),
        ({"backend": "nccl", "devices": ["cpu", "cpu"]}, ValueError, "rank 0 has 'cpu'"),
        ({"launcher": "mpi"}, ValueError, "unknown launcher 'mpi'"),
        ({"port": 29500}, TypeError, r"unexpected options for launcher='process': \['port'\]"),
        ({"timeout": 0}, ValueError, "timeout must be positive"),
        ({"start_method": "threads"}, ValueError, "unknown start_method"),
    ],
)
def test_bad_arguments_fail_before_any_rank_starts(kwargs, error, match, no_leaks):
    call = {"world_size": 2, **kwargs}
    with pytest.raises(error, match=match):
        spawn(rank_and_sum, call.pop("world_size"), 1, **call)


@pytest.mark.skipif(gpu_count() > 0, reason="this machine has a GPU")
def test_a_gpu_this_machine_lacks_is_named():
    with pytest.raises(ValueError, match="cuda:0"):
        spawn(rank_and_sum, 1, 1, devices=["cuda:0"])
