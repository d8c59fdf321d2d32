"""easycore.torch.parallel's BackgroundTask and JobQueue: tensors, torch's streams, pinning."""

from __future__ import annotations

import multiprocessing
import warnings

import pytest

torch = pytest.importorskip("torch")

from _background_targets import fail, identity  # noqa: E402

from easycore.torch.parallel import BackgroundTask, JobQueue, WorkerError  # noqa: E402
from easycore.torch.parallel.background import pin_memory  # noqa: E402

pytestmark = pytest.mark.timeout(180)

WAIT = 60.0
METHODS = [m for m in ("fork", "spawn") if m in multiprocessing.get_all_start_methods()]


def getbatch(size: int, channels: int = 3):
    """A fresh batch per call, as augmentation makes it."""
    return torch.randn(size, channels, 16, 16), torch.randint(0, 10, (size,))


def torch_draws():
    return tuple(torch.rand(3).tolist())


def big_tensor(fill: float):
    return torch.full((1 << 20,), fill)  # 4 MB: through shared memory


def test_tensors_arrive_with_their_dtype_and_shape(no_leaks):
    with BackgroundTask(getbatch, (8,), {"channels": 2}, workers=2) as bg:
        for _ in range(6):
            data, label = bg.get(timeout=WAIT)
            assert data.shape == (8, 2, 16, 16) and data.dtype == torch.float32
            assert label.shape == (8,) and label.dtype == torch.int64
            assert not data.is_pinned()


def test_large_fresh_tensors(no_leaks):
    with BackgroundTask(big_tensor, (2.5,), workers=2) as bg:
        seen = [bg.get(timeout=WAIT) for _ in range(8)]
    assert all(t.shape == (1 << 20,) and bool((t == 2.5).all()) for t in seen)


@pytest.mark.parametrize("method", METHODS)
def test_workers_draw_distinct_torch_streams(no_leaks, method):
    # Forked workers would all continue this process's torch stream.
    with BackgroundTask(torch_draws, workers=2, start_method=method) as bg:
        results = [bg.get(timeout=WAIT) for _ in range(10)]
    assert len(set(results)) == len(results)


def test_a_seed_makes_torch_draws_reproducible(no_leaks):
    def run(workers: int, seed: int) -> list:
        with BackgroundTask(torch_draws, workers=workers, seed=seed, ordered=True) as bg:
            return [bg.get(timeout=WAIT) for _ in range(6)]

    first = run(2, 3)
    assert run(1, 3) == first and len(set(first)) == 6
    assert not set(run(2, 4)) & set(first)


def test_errors_are_easycores(no_leaks):
    with BackgroundTask(fail, ("bad batch",)) as bg, pytest.raises(WorkerError) as info:
        bg.get(timeout=WAIT)
    assert isinstance(info.value.__cause__, ValueError)


def test_a_missing_gpu_is_named_before_anything_starts(no_leaks):
    with pytest.raises(ValueError, match="cuda:99"):
        BackgroundTask(getbatch, (2,), devices=["cuda:99"])
    with pytest.raises(ValueError, match="cuda:99"):
        JobQueue(devices=["cuda:99"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available: pinning works")
def test_pin_memory_without_cuda_warns_and_does_not_pin(no_leaks):
    with pytest.warns(UserWarning, match="CUDA is not available"):
        bg = BackgroundTask(getbatch, (2,), pin_memory=True)
    with bg:
        assert not bg.pin_memory
        data, _ = bg.get(timeout=WAIT)
        assert not data.is_pinned()
    with pytest.warns(UserWarning, match="CUDA is not available"):
        q = JobQueue(1, pin_memory=True)
    with q:
        assert not q.pin_memory


def test_no_warning_without_pin_memory(no_leaks):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with BackgroundTask(getbatch, (2,)) as bg:
            bg.get(timeout=WAIT)


def test_pin_memory_walks_structures_and_leaves_the_rest():
    # Without CUDA nothing can be pinned: only what is not a tensor is checked here.
    data = {"a": [1, "x"], "b": (2.0, None)}
    assert pin_memory(data) == data
    assert pin_memory(3) == 3


def test_job_queue_takes_and_returns_tensors_in_fifo_order(no_leaks):
    a = torch.arange(1 << 20, dtype=torch.float32)  # 4 MB argument: shared memory
    with JobQueue(workers=2) as q:
        q.put(torch.mul, a, 2)
        q.put(identity, "second")
        q.put(torch.add, a, a)
        assert torch.equal(q.get(timeout=WAIT), a * 2)
        assert q.get(timeout=WAIT) == "second"
        assert torch.equal(q.get(timeout=WAIT), a + a)


# ------------------------------------------------------------------ CUDA
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_pin_memory_pins_results_for_asynchronous_copies(no_leaks):
    with BackgroundTask(getbatch, (4,), workers=2, pin_memory=True) as bg:
        assert bg.pin_memory
        for _ in range(4):
            data, label = bg.get(timeout=WAIT)
            assert data.is_pinned() and label.is_pinned()
            on_gpu = data.to("cuda", non_blocking=True)
            torch.cuda.synchronize()
            assert torch.equal(on_gpu.cpu(), data)
    with JobQueue(1, pin_memory=True) as q:
        q.put(getbatch, 2)
        data, label = q.get(timeout=WAIT)
        assert data.is_pinned() and label.is_pinned()


def gpu_batch(size: int):
    x = torch.randn(size, 4, device="cuda")  # on the worker's GPU
    return (x * 2).cpu(), torch.cuda.current_device()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_workers_on_a_gpu_with_seeded_cuda_streams(no_leaks):
    def run() -> list:
        with BackgroundTask(gpu_batch, (3,), devices=["cuda:0", "cuda:0"], seed=1,
                            ordered=True) as bg:
            return [bg.get(timeout=WAIT) for _ in range(4)]

    first, second = run(), run()
    assert all(device == 0 for _, device in first)
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(first, second))
    assert not torch.equal(first[0][0], first[1][0])
