"""ModelSync: state dicts through a VersionedStore service, with compare-and-set."""

from __future__ import annotations

import multiprocessing
import pickle

import pytest

torch = pytest.importorskip("torch")

from _services_torch_support import push_successes  # noqa: E402

from easycore.common.parallel.services import Service, VersionedStore  # noqa: E402
from easycore.torch.parallel import ModelSync  # noqa: E402


def linear(seed=0, n_in=4, n_out=2):
    torch.manual_seed(seed)
    return torch.nn.Linear(n_in, n_out)


def test_the_documented_example(no_leaks):
    with Service.start(VersionedStore) as store, ModelSync(store, "policy") as sync:
        a, b = linear(0), linear(1)
        assert sync.push(a)
        assert sync.pull(b)
        assert torch.equal(a.weight, b.weight)


def test_push_pull_and_conflicts(no_leaks):
    with Service.start(VersionedStore) as store:
        sync = ModelSync(store)
        a, b = linear(0), linear(1)
        assert not sync.pull(a)  # nothing pushed yet
        assert sync.push(a) and sync.version(a) == 1
        assert sync.pull(b) and sync.version(b) == 1
        with torch.no_grad():
            b.weight.fill_(7.0)
        assert sync.push(b) and sync.version(b) == 2
        # a still has version 1: its push loses, and it pulls b's parameters
        with torch.no_grad():
            a.weight.fill_(-1.0)
        assert not sync.push(a)
        assert sync.version(a) == 2 and torch.equal(a.weight, b.weight)
        assert sync.push(a) and sync.version(a) == 3
        c = linear(2)
        before = c.weight.detach().clone()
        assert not sync.push(c, pull_on_fail=False)  # never synced, the key exists
        assert sync.version(c) is None and torch.equal(c.weight, before)
        sync.close()


def test_state_dicts_are_copies_and_gradients_stay(no_leaks):
    with Service.start(VersionedStore) as store:
        sync = ModelSync(store)
        a = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
        a(torch.randn(8, 4))  # running statistics: buffers travel too
        assert sync.push(a)
        pushed = {k: v.clone() for k, v in a.state_dict().items()}
        with torch.no_grad():
            a[0].weight.add_(1.0)  # after pushing: the store keeps what was pushed
        b = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
        b(torch.randn(2, 4)).sum().backward()
        grad = b[0].weight.grad.clone()
        assert sync.pull(b)
        for k, v in b.state_dict().items():
            assert torch.equal(v, pushed[k]), k
        assert torch.equal(b[0].weight.grad, grad)  # pulling does not clear gradients
        assert b[0].weight.device.type == "cpu"
        sync.close()


def test_a_large_model_through_shared_memory(no_leaks):
    with Service.start(VersionedStore) as store:
        no_leaks.track(store.pid)
        sync = ModelSync(store, name="big")
        a, b = linear(0, 1024, 2048), linear(1, 1024, 2048)  # 8 MB of weights
        for _ in range(3):
            with torch.no_grad():
                a.weight.mul_(0.5)
            assert sync.push(a)
            assert sync.pull(b)
            assert torch.equal(a.weight, b.weight)
        sync.close()


def test_picklable_into_racing_processes(no_leaks):
    with Service.start(VersionedStore) as store:
        sync = ModelSync(store, name="shared")
        assert pickle.loads(pickle.dumps(sync)).name == "shared"
        sync.push(linear(0))
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            results = pool.starmap(push_successes, [(sync, 1, 15), (sync, 2, 15)])
            pool.close()
            pool.join()
        every = sorted(results[0] + results[1])
        assert every == list(range(2, 32))  # each acknowledged push a distinct next version
        for versions in results:
            assert versions == sorted(versions)
        sync.close()
