"""A Ray the runner starts itself (``address=None``, nothing running) is shut
down when the last runner using it closes, or fails."""

from __future__ import annotations

import shutil
import tempfile
import warnings

import pytest

ray = pytest.importorskip("ray")

from _ray_runners import Fragile, Runner  # noqa: E402
from _ray_support import LOCAL_INIT, ray_env, wait_gone  # noqa: E402

from easycore.common.parallel import WorkerError  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(150)]


@pytest.fixture
def ray_init_kwargs():
    # address=None joins a Ray that something else started on this machine
    # (found through <temp dir>/ray_current_cluster): a temp dir of our own
    # makes "nothing running" true. Short, for Ray's socket paths.
    path = tempfile.mkdtemp(prefix="ecray-", dir="/tmp")
    assert not ray.is_initialized()
    with ray_env():
        yield dict(LOCAL_INIT, num_cpus=2, _temp_dir=path)
    ray.shutdown()  # only if a test failed half-way
    shutil.rmtree(path, ignore_errors=True)


def test_runner_started_ray_is_shut_down_by_the_last_close(ray_init_kwargs):
    first = Runner(devices=1, backend="ray", address=None, ray_init_kwargs=ray_init_kwargs)
    assert ray.is_initialized()
    # A second runner finds the first one's Ray and shares it.
    second = Fragile(devices=1, cfg={"fail": "raise", "at": 3}, backend="ray")
    pids = first.worker_pids + second.worker_pids
    assert first(range(100)) == 328350
    assert second(range(3)) == [0, 1, 2]
    first.close()
    assert ray.is_initialized()  # still used by `second`
    with pytest.raises(WorkerError):  # a failed call closes `second` too...
        second(range(10))
    assert not ray.is_initialized()  # ...and with it the Ray they started
    assert wait_gone(pids) == []


def test_a_runner_that_fails_to_start_shuts_its_ray_down(ray_init_kwargs):
    with pytest.raises(WorkerError, match="cannot load the model"):
        Fragile(devices=1, cfg={"fail": "init"}, backend="ray", ray_init_kwargs=ray_init_kwargs)
    assert not ray.is_initialized()


def test_a_runner_started_ray_stays_on_loopback_by_default(ray_init_kwargs):
    # Without any address option of ours, the Ray the runner starts must not
    # bind beyond 127.0.0.1 (nothing listens on a non-loopback address by default).
    kwargs = {k: v for k, v in ray_init_kwargs.items()
              if k not in ("_node_ip_address", "include_dashboard")}
    with Runner(devices=1, backend="ray", ray_init_kwargs=kwargs) as runner:
        assert runner(range(10)) == 285
        nodes = ray.nodes()
        assert [node["NodeManagerAddress"] for node in nodes] == ["127.0.0.1"]
    assert not ray.is_initialized()


def test_a_runner_started_ray_that_listens_everywhere_says_so(ray_init_kwargs):
    # Ray 2.x binds its GCS, raylet and worker gRPC servers to 0.0.0.0 whatever
    # the node address: easycore cannot prevent it, so it must say so (naming
    # the ports) rather than promise loopback. Should a Ray release bind
    # loopback only, there is nothing to say and no warning.
    from easycore.common.parallel.backends.ray import exposed_ports

    kwargs = {k: v for k, v in ray_init_kwargs.items()
              if k not in ("_node_ip_address", "include_dashboard")}
    with _record() as caught:
        warnings.simplefilter("always")
        with Runner(devices=1, backend="ray", ray_init_kwargs=kwargs) as runner:
            exposed = exposed_ports()
            assert runner(range(10)) == 285
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    if exposed:
        assert any("every network interface" in m and str(exposed[0]) in m for m in messages)
        # it points at the user's line (the `with Runner(...)` above), not at easycore's
        (where,) = [w for w in caught if "every network interface" in str(w.message)]
        assert where.filename == __file__, f"the warning points at {where.filename}:{where.lineno}"
    else:
        assert not any("every network interface" in m for m in messages)


def _record():
    return warnings.catch_warnings(record=True)
