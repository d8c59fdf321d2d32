"""ModelSync and GradientServer on ``backend="ray"`` (a local Ray the module starts)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ray = pytest.importorskip("ray")

from _services_torch_support import sgd, train_async  # noqa: E402

from easycore.common.parallel.services import Service, VersionedStore  # noqa: E402
from easycore.torch.parallel import GradientServer, ModelSync  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180), pytest.mark.usefixtures("local_ray")]


def test_model_sync_on_a_ray_store():
    with Service.start(VersionedStore, backend="ray") as store:
        sync = ModelSync(store)
        a, b = torch.nn.Linear(4, 2), torch.nn.Linear(4, 2)
        assert sync.push(a) and sync.pull(b)
        assert torch.equal(a.weight, b.weight)
        with torch.no_grad():
            b.weight.fill_(3.0)
        assert sync.push(b) and not sync.push(a)  # a lost, and pulled b's
        assert torch.equal(a.weight, b.weight)


def test_gradient_server_on_ray():
    model = torch.nn.Linear(3, 1)
    with GradientServer.start(model, sgd, backend="ray", reduce_batch_size=2) as server:
        assert ray.get(_train.remote(server, 30)) == 30  # a Ray task as the client
        server.flush(timeout=60)
        stats = server.stats()
        assert stats["received"] == stats["applied"] == 30


@ray.remote
def _train(server, steps):
    return train_async(server, 0, steps)
