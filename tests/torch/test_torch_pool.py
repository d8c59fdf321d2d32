"""``easycore.torch.parallel.Pool``: tensors in and out in every ``tensor_sharing`` mode.

``"segments"`` (easycore's recycled shared memory, the default), ``"copy"``
(pickled through the pipe) and ``"torch"`` (torch's own sharing). Every mode
must give the same values, dtypes, shapes and strides, and leave no process,
thread, descriptor or shared memory behind (``no_leaks``: ``/dev/shm/ect-*``
and ``/dev/shm/torch_*`` included).
"""

from __future__ import annotations

import functools

import pytest
import torch
from _torch_pool_funcs import (
    add,
    block,
    cuda_roundtrip,
    describe,
    device_sum,
    die_on,
    doubled_and_transposed,
    on_device,
    sleepy_block,
    threads,
    total,
)
from _torch_util import gpu_count

from easycore.common.parallel import ParallelError, WorkerDiedError
from easycore.torch.parallel import Pool, TaskTimeoutError

pytestmark = pytest.mark.timeout(120)

MODES = ["segments", "copy", "torch"]
WAIT = 30


@pytest.mark.parametrize("mode", MODES)
def test_tensors_come_back_exactly_in_every_mode(mode, no_leaks):
    with Pool(2, tensor_sharing=mode) as pool:
        assert pool.tensor_sharing == mode
        results = pool.map(block, range(8))
        assert [int(r[0, 0]) for r in results] == list(range(8))
        assert all(r.dtype == torch.int32 and r.shape == (512, 512) for r in results)
        assert all(torch.equal(r, torch.full((512, 512), k, dtype=torch.int32))
                   for k, r in enumerate(results))
        del results


@pytest.mark.parametrize("mode", MODES)
def test_tensors_go_in_exactly_in_every_mode(mode, no_leaks):
    inputs = [
        torch.arange(300_000, dtype=torch.int64),  # 2.4 MB: out of band where it can be
        torch.arange(12, dtype=torch.int16).reshape(3, 4),  # small: in band
        torch.arange(200_000, dtype=torch.float32).reshape(400, 500).t(),  # non-contiguous
        torch.ones(70_000, dtype=torch.bool),
    ]
    with Pool(2, tensor_sharing=mode) as pool:
        got = pool.map(describe, inputs, 1)
    for (dtype, shape, stride, checksum, _), t in zip(got, inputs):
        assert dtype == str(t.dtype) and shape == tuple(t.shape)
        assert stride == t.stride()
        assert checksum == int(t.to(torch.int64).sum())


@pytest.mark.parametrize("mode", MODES)
def test_tensors_through_every_call(mode, no_leaks):
    a = torch.arange(100_000, dtype=torch.int64)
    with Pool(2, tensor_sharing=mode) as pool:
        assert pool.apply(total, (a,)) == int(a.sum())
        assert pool.apply_async(total, (a,)).get(WAIT) == int(a.sum())
        sums = pool.starmap(add, [(a, a), (a, -a)])
        assert torch.equal(sums[0], 2 * a) and torch.equal(sums[1], torch.zeros_like(a))
        assert [int(t[0, 0]) for t in pool.imap(block, range(5))] == list(range(5))
        assert sorted(int(t[0, 0]) for t in pool.imap_unordered(block, range(5))) == list(
            range(5))
        out = pool.submit(doubled_and_transposed, torch.ones(300, 200)).result(WAIT)
        assert out.shape == (200, 300) and not out.is_contiguous()
        assert torch.equal(out, torch.full((200, 300), 2.0))
        assert pool.broadcast(total, torch.ones(1000, dtype=torch.int64)) == [1000, 1000]
        assert pool.map(lambda t: t.sum().item(), [torch.ones(3)]) == [3.0]


def test_received_tensors_are_independent_of_later_results(no_leaks):
    # Segments are recycled: a tensor the caller holds must not change under it.
    with Pool(1) as pool:
        kept = pool.map(block, range(3))
        more = pool.map(block, range(10, 20))
        assert [int(t.sum()) for t in kept] == [k * 512 * 512 for k in range(3)]
        assert [int(t[0, 0]) for t in more] == list(range(10, 20))
        kept[0].add_(1)  # the caller may write into what it received
        assert int(kept[0][0, 0]) == 1
        del kept, more


@pytest.mark.parametrize("mode", MODES)
def test_a_worker_dying_with_tensors_in_flight_leaves_no_shared_memory(mode, no_leaks):
    expected = [0, 1, 2, ("died", [3]), *range(4, 10)]
    with Pool(2, tensor_sharing=mode) as pool:
        it = pool.imap(functools.partial(die_on, bad=3), range(10), 1)
        got = []
        for _ in range(10):
            try:
                got.append(int(it.next(timeout=WAIT)[0, 0]))
            except WorkerDiedError as exc:
                got.append(("died", exc.items))
            except ParallelError as exc:
                got.append(str(exc))
                break
        if mode == "torch" and got != expected:
            # torch hands a tensor over through a thread of the process that
            # sent it: results a worker sent just before it died cannot be
            # read any more, and the call fails saying so.
            assert "could not be decoded" in got[-1] and got[:-1] == expected[: len(got) - 1]
        else:
            assert got == expected
        assert int(pool.apply(block, (5,))[0, 0]) == 5  # the pool serves on
        if mode != "torch":
            # Not with torch's sharing: a tensor sent to a worker that died
            # before taking it keeps a descriptor open in this process (torch
            # hands descriptors over on request, through the sender's thread).
            ones = torch.ones(100_000)
            assert torch.equal(pool.apply(add, (ones, ones)), 2 * ones)
        del it


def test_a_timeout_with_tensors_in_flight(no_leaks):
    with Pool(2, task_timeout=1.0) as pool:
        with pytest.raises(TaskTimeoutError):
            pool.map(sleepy_block, range(4), 1)
        assert int(pool.apply(block, (5,))[0, 0]) == 5


def test_each_worker_runs_torch_on_its_share_of_the_cpus(no_leaks):
    from easycore.common.parallel._os import threads as budget

    with Pool(2) as pool:
        assert pool.broadcast(threads) == [max(1, budget.available_cpus() // 2)] * 2


def test_an_unknown_tensor_sharing_is_a_valueerror(no_leaks):
    with pytest.raises(ValueError, match="tensor_sharing"):
        Pool(1, tensor_sharing="telepathy")


@pytest.mark.skipif(gpu_count() > 0, reason="this machine has a GPU")
def test_a_cuda_device_without_a_gpu_is_refused_naming_it(no_leaks):
    with pytest.raises(ValueError, match="cuda:0"):
        Pool(devices=["cuda:0"])


# --- on a GPU machine -------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.usefixtures("no_leaks")
@pytest.mark.cuda
@pytest.mark.skipif(gpu_count() == 0, reason="torch sees no CUDA GPU")
def test_cuda_workers_take_cpu_tensors_and_give_results_in_every_mode(mode):
    devices = [f"cuda:{i % gpu_count()}" for i in range(2)]
    with Pool(devices=devices, tensor_sharing=mode) as pool:
        got = pool.map(cuda_roundtrip, [torch.ones(1000)] * 4, 1)
    assert got == [(True, 1000.0)] * 4


@pytest.mark.cuda
@pytest.mark.skipif(gpu_count() == 0, reason="torch sees no CUDA GPU")
def test_torch_sharing_returns_cuda_tensors_through_cuda_ipc(no_leaks):
    with Pool(devices=["cuda:0"], tensor_sharing="torch") as pool:
        results = pool.broadcast(on_device, (256, 256), pass_context=True)
        assert results[0].is_cuda and float(results[0].sum()) == 256 * 256
        assert pool.map(device_sum, [torch.ones(10)]) == [("cpu", 10.0)]
        del results
