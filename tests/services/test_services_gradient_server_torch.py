"""GradientServer: asynchronous SGD, reduction, batches, a full queue, no lost gradient."""

from __future__ import annotations

import functools
import multiprocessing
import pickle
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
        with pytest.raises(ValueError, match="'weight' has shape"):
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


# ------------------------------------------- a gradient the reducer cannot apply
def _unappliable(kind):
    dense = torch.ones(1, 3)
    return {
        "sparse_csr": lambda: dense.to_sparse_csr(),
        "sparse_coo": lambda: dense.to_sparse(),
        "int dtype": lambda: torch.ones(1, 3, dtype=torch.int64),
        "bool dtype": lambda: torch.ones(1, 3, dtype=torch.bool),
        "complex dtype": lambda: torch.ones(1, 3, dtype=torch.complex64),
        "meta device": lambda: torch.empty(1, 3, device="meta"),
        "not a tensor": lambda: [[1.0, 1.0, 1.0]],
    }[kind]()


_MATCHES = {"sparse_csr": "sparse_csr", "sparse_coo": "sparse_coo", "int dtype": "dtype",
            "bool dtype": "dtype", "complex dtype": "dtype", "meta device": "device 'meta'",
            "not a tensor": "not a tensor"}


@pytest.mark.parametrize("kind", list(_MATCHES))
def test_a_gradient_that_cannot_be_applied_is_refused_at_push(no_leaks, kind):
    """Issue 20 item 22: the sender's error; the reducer, other clients and close() go on."""
    model = torch.nn.Linear(3, 1)
    with GradientServer.start(model, sgd, reduce_batch_size=1) as server:
        bad = {"weight": _unappliable(kind)}
        with pytest.raises(WorkerError, match=_MATCHES[kind]):
            server.handle.call("push_gradients", bad, None)  # straight through the handle
        other = pickle.loads(pickle.dumps(server))  # another client of the same server
        model(torch.ones(2, 3)).sum().backward()
        other.push_gradients(model)
        server.push_gradients(model)
        assert server.flush(timeout=60) == 2
        assert other.pull(torch.nn.Linear(3, 1))
        stats = server.stats()
        assert stats["received"] == stats["applied"] == 2
        other.close()
    # leaving the block closed the server without raising


def test_the_client_checks_before_sending(no_leaks):
    model = torch.nn.Linear(3, 1)
    with GradientServer.start(model, sgd, reduce_batch_size=1) as server:
        wrong = torch.nn.Linear(3, 1).to(torch.complex64)
        wrong(torch.ones(2, 3, dtype=torch.complex64)).real.sum().backward()
        with pytest.raises(ValueError, match=r"'weight' has dtype torch\.complex64"):
            server.push_gradients(wrong)
        meta = torch.nn.Linear(3, 1, device="meta")  # no data to send
        for p in meta.parameters():
            p.grad = torch.empty_like(p)
        with pytest.raises(ValueError, match="device 'meta'"):
            server.push_gradients(meta)
        double = torch.nn.Linear(3, 1).double()  # another floating dtype is cast
        double(torch.ones(2, 3, dtype=torch.float64)).sum().backward()
        server.push_gradients(double)
        server.flush(timeout=60)
        assert server.stats()["received"] == server.stats()["applied"] == 1


# ------------------------------------------------------------ several reducers
def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.BatchNorm1d(8),
                               torch.nn.ReLU(), torch.nn.Linear(8, 1))


def _train_locally(model, pushes, optimizer):
    """What the server should compute: one SGD step per push, on one model."""
    opt = optimizer(model.parameters())
    for grads in pushes:
        for name, p in model.named_parameters():
            p.grad = grads[name].clone()
        opt.step()
    return model


@pytest.mark.parametrize("reducers", [2, 3])
def test_several_reducers_give_the_single_reducers_result(no_leaks, reducers):
    model = _mlp()
    with torch.no_grad():
        model[1].running_mean.fill_(0.25)  # a buffer: pulled from the first reducer
    generator = torch.Generator().manual_seed(1)
    pushes = [{name: torch.randn(p.shape, generator=generator)
               for name, p in model.named_parameters()} for _ in range(3)]
    optimizer = functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9)
    expected = _train_locally(_mlp(), pushes, optimizer)
    with GradientServer.start(model, optimizer, reduce_batch_size=1, reducers=reducers,
                              flush_after=60) as server:
        assert server.reducers == reducers
        pids = {h.pid for h in server._handles}
        assert len(pids) == reducers  # one process each
        client = _mlp()
        for grads in pushes:
            for name, p in client.named_parameters():
                p.grad = grads[name]
            server.push_gradients(client)
        assert server.flush(timeout=60) == 3
        stats = server.stats()
        assert stats["received"] == stats["applied"] == stats["steps"] == 3
        assert [s["applied"] for s in stats["reducers"]] == [3] * reducers
        pulled = _mlp()
        server.pull(pulled)
    for (name, got), want in zip(pulled.state_dict().items(), expected.state_dict().values()):
        if name.endswith("running_mean"):
            assert torch.all(got == 0.25)
        else:
            assert torch.allclose(got, want, atol=1e-6), name


def test_several_reducers_lose_nothing_from_several_processes(no_leaks):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    steps = 30
    with GradientServer.start(model, sgd, reduce_batch_size=2, flush_after=0.5,
                              reducers=2) as server:
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            done = pool.starmap(train_async, [(server, 1, steps), (server, 2, steps)])
            pool.close()
            pool.join()
        assert done == [steps, steps]
        server.flush(timeout=60)
        stats = server.stats()
        for each in stats["reducers"]:
            assert each["received"] == each["applied"] == 2 * steps
        server.pull(model)
    assert torch.allclose(model.weight, torch.tensor([[1.0, -2.0, 0.5]]), atol=0.1)


def test_several_reducers_by_name_and_bad_counts(no_leaks):
    model = torch.nn.Linear(3, 1)
    with pytest.raises(ValueError, match="at most one reducer per parameter"):
        GradientServer.start(model, sgd, reducers=3)
    with pytest.raises(ValueError, match="reducers"):
        GradientServer.start(model, sgd, reducers=0)
    from easycore.common.parallel.services import lookup

    with GradientServer.start(model, sgd, reducers=2, name="grads", reduce_batch_size=1) as server:
        found = GradientServer(lookup("grads"))
        assert found.reducers == 2
        model(torch.ones(2, 3)).sum().backward()
        found.push_gradients(model)
        assert found.flush(timeout=60) == 1
        bad = {"weight": torch.ones(1, 3).to_sparse_csr()}
        with pytest.raises(ValueError, match="sparse_csr"):
            from easycore.torch.parallel.gradient_server import check_gradients

            check_gradients(bad, {"weight": ((1, 3), torch.float32)}, ("cpu",))
        owners = found._get_layout()[1]
        elsewhere = next(n for n, k in owners.items() if k == 1)
        with pytest.raises(WorkerError, match="another reducer"):
            found.handle.call("push_gradients", {elsewhere: torch.zeros(1)}, None)
        found.close()
        assert server.stats()["applied"] == 1


def test_several_reducers_a_full_queue_raises_and_drops_nothing(no_leaks, tmp_path):
    """The first reducer decides whether a push is taken; the others then wait for room."""
    gate = tmp_path / "gate"
    model = torch.nn.Linear(3, 1)
    model(torch.ones(2, 3)).sum().backward()
    optimizer = functools.partial(GatedSGD, lr=0.1, gate=str(gate))
    with GradientServer.start(model, optimizer, reduce_batch_size=1, max_queue=2,
                              on_full="raise", reducers=2) as server:
        accepted = 0
        with pytest.raises(queue.Full):
            for _ in range(10):
                server.push_gradients(model)
                accepted += 1
        assert 2 <= accepted <= 3
        gate.touch()
        server.flush(timeout=60)
        for each in server.stats()["reducers"]:  # every accepted push, whole, on each
            assert each["received"] == each["applied"] == accepted
