"""BackgroundTask and JobQueue on ``backend="ray"``, against a local Ray the module starts."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")
np = pytest.importorskip("numpy")

from _background_targets import Dataset, die, draws, fail, identity, nap  # noqa: E402

from easycore.common.parallel import (  # noqa: E402
    BackgroundTask,
    JobQueue,
    WorkerDiedError,
    WorkerError,
)

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180), pytest.mark.usefixtures("local_ray")]

WAIT = 60.0


def test_elektronn2_example_on_ray():
    kwargs = {"flip": True, "grey_augment_channels": [0]}
    with BackgroundTask(Dataset().getbatch, (3,), kwargs, workers=2, backend="ray") as bg:
        for _ in range(6):
            data, label = bg.get(timeout=WAIT)
            assert data.shape == (3, 2, 8, 8) and data.dtype == np.float32
            assert label.dtype == np.int16
    assert ray.is_initialized()  # the test's Ray: left up


def test_seeded_calls_draw_what_processes_draw():
    def run(backend: str) -> list:
        with BackgroundTask(draws, workers=2, seed=5, ordered=True, backend=backend) as bg:
            return [bg.get(timeout=WAIT) for _ in range(5)]

    assert run("ray") == run("process")  # call k is call k, wherever it runs


def test_errors_and_deaths_on_ray():
    with BackgroundTask(fail, ("on ray",), backend="ray") as bg:
        with pytest.raises(WorkerError, match="on ray") as info:
            bg.get(timeout=WAIT)
        assert isinstance(info.value.__cause__, ValueError)
    with BackgroundTask(die, (3,), backend="ray") as bg, pytest.raises(WorkerDiedError):
        bg.get(timeout=WAIT)


def test_job_queue_on_ray_is_fifo():
    with JobQueue(2, backend="ray") as q:
        q.put(nap, 0.5, "slow")
        q.put(identity, "fast")
        q.put(np.add, np.ones(3), 1)
        assert q.get(timeout=WAIT) == "slow"
        assert q.get(timeout=WAIT) == "fast"
        assert q.get(timeout=WAIT).tolist() == [2.0, 2.0, 2.0]


def test_workers_are_not_forked_from_a_ray_driver():
    # Ray's gRPC client does not survive a fork of the driver: after process
    # workers were forked here, ray.cluster_resources() once waited forever.
    from easycore.common.parallel import Pool

    with Pool(1) as pool:
        assert pool._backend._method != "fork"
        assert pool.apply(abs, (-3,)) == 3
    with BackgroundTask(identity, (4,), workers=1) as bg:  # the process back-end
        assert bg.get(timeout=WAIT) == 4
    assert ray.cluster_resources()["CPU"] == 2  # the driver still talks to its GCS
