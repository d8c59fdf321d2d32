"""GradientServer: asynchronous SGD, reduction, batches, a full queue, no lost gradient."""

from __future__ import annotations

import functools
import multiprocessing
import queue
import threading

import pytest

torch = pytest.importorskip("torch")

from _services_torch_support import GatedSGD, sgd, toy_batch, train_async  # noqa: E402

from easycore.common.parallel import WorkerError  # noqa: E402
from easycore.torch.parallel import GradientServer  # noqa: E402
from easycore.torch.parallel.gradient_server import _GradientCore  # noqa: E402


def test_the_documented_example(no_leaks):
    model = torch.nn.Linear(3, 1)
    server = GradientServer.start(
        model, lambda params: torch.optim.SGD(params, lr=0.1), reduce_batch_size=1
    )
    with server:
        model(torch.ones(8, 3)).pow(2).mean().backward()
        server.push_gradients(model)
        server.flush()
        assert server.pull(model)
        assert server.stats()["applied"] == 1


def test_asynchronous_sgd_converges_and_loses_nothing(no_leaks):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    steps = 80
    with GradientServer.start(model, sgd, reduce_batch_size=2, flush_after=0.5) as server:
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            done = pool.starmap(train_async, [(server, 1, steps), (server, 2, steps)])
            pool.close()
            pool.join()
        assert done == [steps, steps]
        server.flush(timeout=60)
        stats = server.stats()
        assert stats["received"] == stats["applied"] == 2 * steps  # every gradient counted
        assert stats["queued"] == 0 and stats["device"] == "cpu"
        assert server.pull(model)
    assert torch.allclose(model.weight, torch.tensor([[1.0, -2.0, 0.5]]), atol=0.05)
    assert abs(model.bias.item() - 0.3) < 0.05


@pytest.mark.parametrize("method, divisor", [("sum", 1.0), ("mean", 2.0)])
def test_reduction(no_leaks, method, divisor):
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    optimizer = functools.partial(sgd, lr=1.0)
    with GradientServer.start(model, optimizer, reduce_method=method, reduce_batch_size=2,
                              flush_after=60) as server:
        for g in ([1.0, 2.0], [3.0, 6.0]):
            model.weight.grad = torch.tensor([g])
            server.push_gradients(model)
        server.flush(timeout=60)
        assert server.stats()["steps"] == 1  # one batch of two
        server.pull(model)
    assert torch.allclose(model.weight, -torch.tensor([[4.0, 8.0]]) / divisor)


def test_a_partial_batch_is_applied_after_flush_after(no_leaks):
    model = torch.nn.Linear(3, 1)
    before = model.weight.detach().clone()
    with GradientServer.start(model, sgd, reduce_batch_size=4, flush_after=0.2) as server:
        model(torch.ones(4, 3)).sum().backward()
        server.push_gradients(model)  # one of four
        stats = _wait_for(server, lambda s: s["applied"] == 1)
        assert stats["steps"] == 1 and stats["version"] == 1
        server.pull(model)
    assert not torch.equal(model.weight, before)


def _wait_for(server, condition, timeout=30.0):
    """Poll the server's counters (its own timer is what is under test)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        stats = server.stats()
        if condition(stats) or time.monotonic() > deadline:
            assert condition(stats), stats
            return stats
        time.sleep(0.02)


def test_a_full_queue_raises_and_drops_nothing(no_leaks, tmp_path):
    gate = tmp_path / "gate"
    model = torch.nn.Linear(3, 1)
    model(torch.ones(2, 3)).sum().backward()
    optimizer = functools.partial(GatedSGD, lr=0.1, gate=str(gate))
    with GradientServer.start(model, optimizer, reduce_batch_size=1, max_queue=2,
                              on_full="raise") as server:
        accepted = 0
        with pytest.raises(queue.Full):
            for _ in range(10):  # the reducer holds one, the queue two: 3 at most
                server.push_gradients(model)
                accepted += 1
        assert 2 <= accepted <= 3
        assert server.stats()["received"] == accepted
        gate.touch()
        server.flush(timeout=60)
        stats = server.stats()
        assert stats["received"] == stats["applied"] == accepted


def test_a_full_queue_blocks(no_leaks, tmp_path):
    gate = tmp_path / "gate"
    model = torch.nn.Linear(3, 1)
    model(torch.ones(2, 3)).sum().backward()
    optimizer = functools.partial(GatedSGD, lr=0.1, gate=str(gate))
    with GradientServer.start(model, optimizer, reduce_batch_size=1, max_queue=1) as server:
        server.push_gradients(model)
        server.push_gradients(model)  # the reducer may hold one, the queue one
        with pytest.raises(queue.Full):
            for _ in range(3):
                server.push_gradients(model, timeout=0.1)
        pushed = []
        blocked = threading.Thread(target=lambda: pushed.append(server.push_gradients(model)))
        blocked.start()  # waits in the server for room
        gate.touch()
        blocked.join(60)
        assert pushed == [None]
        server.flush(timeout=60)
        stats = server.stats()
        assert stats["received"] == stats["applied"] >= 3


def test_the_lr_scheduler_is_built_and_stepped_in_the_server(no_leaks):
    model = torch.nn.Linear(2, 1, bias=False)
    # lr 1.0 for the first step, then 0: only the first step moves the weights
    schedule = functools.partial(torch.optim.lr_scheduler.LambdaLR,
                                 lr_lambda=functools.partial(_first_only))
    with GradientServer.start(model, functools.partial(sgd, lr=1.0), lr_scheduler=schedule,
                              reduce_batch_size=1) as server:
        model.weight.grad = torch.ones(1, 2)
        server.push_gradients(model)
        server.flush(timeout=60)
        server.pull(model)
        after_one = model.weight.detach().clone()
        server.push_gradients(model)
        server.flush(timeout=60)
        server.pull(model)
    assert torch.equal(model.weight, after_one)


def _first_only(step):
    return 1.0 if step == 0 else 0.0


def test_bad_gradients_and_arguments(no_leaks):
    model = torch.nn.Linear(3, 1)
    with pytest.raises(ValueError, match="reduce_method"):
        GradientServer.start(model, sgd, reduce_method="max")
    with pytest.raises(ValueError, match="on_full"):
        GradientServer.start(model, sgd, on_full="drop")
    with pytest.raises(TypeError, match="factories"):
        GradientServer.start(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with GradientServer.start(model, sgd) as server:
        with pytest.raises(ValueError, match="backward"):
            server.push_gradients(torch.nn.Linear(3, 1))  # no gradients
        other = torch.nn.Linear(4, 1)
        other(torch.ones(1, 4)).sum().backward()
        with pytest.raises(WorkerError, match="'weight' has shape"):
            server.push_gradients(other)
        assert server.stats()["received"] == 0


def test_close_applies_what_is_queued():
    """The server object itself (what runs in the service): close() flushes."""
    core = _GradientCore(torch.nn.Linear(3, 1), sgd, None, "sum", 100, 3600.0, 64, "block",
                         "cpu")
    x, y = toy_batch(torch.Generator().manual_seed(0))
    model = torch.nn.Linear(3, 1)
    torch.nn.functional.mse_loss(model(x), y).backward()
    grads = {k: p.grad for k, p in model.named_parameters()}
    for _ in range(3):
        assert core.push_gradients(grads, None)
    grads["weight"].zero_()  # in-process, the server kept copies
    core.close()
    assert core.stats()["applied"] == 3 and core.stats()["steps"] == 1


@pytest.mark.cuda
def test_the_managed_model_stays_on_its_device_cuda(no_leaks):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    model = torch.nn.Linear(3, 1)
    with GradientServer.start(model, sgd, device="cuda:0", reduce_batch_size=1) as server:
        model(torch.ones(2, 3)).sum().backward()
        server.push_gradients(model)
        server.flush(timeout=60)
        assert server.stats()["device"] == "cuda:0"
        server.pull(model)
    assert model.weight.device.type == "cpu"
