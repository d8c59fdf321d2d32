"""Services on ``backend="ray"``: Ray named actors, on a local Ray the module starts."""

from __future__ import annotations

import multiprocessing
import pickle

import pytest

ray = pytest.importorskip("ray")

from _services_support import FailingFactory, Tool  # noqa: E402

from easycore.common.parallel import WorkerError  # noqa: E402
from easycore.common.parallel.services import (  # noqa: E402
    Service,
    ServiceDiedError,
    ServiceNotFoundError,
    VersionedStore,
    lookup,
)

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180), pytest.mark.usefixtures("local_ray")]


def test_calls_and_errors():
    with Service.start(Tool, "r", backend="ray") as h:
        assert h.backend == "ray" and h.is_owner
        assert h.call("echo", 1, k=2) == ((1,), {"k": 2})
        assert h.call("record", "x") == 1
        futures = [h.call_async("record", i) for i in range(20)]
        assert [f.result(timeout=60) for f in futures] == list(range(2, 22))
        with pytest.raises(WorkerError, match=r"boom.. of service .* raised ValueError") as info:
            h.call("boom")
        assert isinstance(info.value.__cause__, ValueError)
        assert "_services_support.py" in info.value.remote_traceback
        with pytest.raises(WorkerError, match="no method 'nope'"):
            h.call("nope")
        assert h.call("pid") == h.pid


def test_the_compare_and_set_table_on_ray():
    from test_services_store import run_table

    with Service.start(VersionedStore, depth=2, backend="ray") as store:
        run_table(store.call)


def test_a_failing_factory():
    with pytest.raises(WorkerError, match=r"starting service <FailingFactory>.*cannot build"):
        Service.start(FailingFactory, backend="ray")


def test_names_lookup_and_tasks():
    with Service.start(Tool, name="ray-tools", backend="ray") as owner:
        found = lookup("ray-tools", backend="ray")
        assert found.pid == owner.pid and not found.is_owner
        with pytest.raises(ValueError, match="already running"):
            Service.start(Tool, name="ray-tools", backend="ray")
        # a handle passed into a task, and a lookup inside one
        assert ray.get(_use.remote(owner, "passed")) == 1
        assert ray.get(_find_and_use.remote(owner.namespace, "looked up")) == 2
        assert owner.call("history") == ["passed", "looked up"]
        found.close()
    with pytest.raises(ServiceNotFoundError):
        lookup("ray-tools", backend="ray", timeout=0)
    with Service.start(Tool, name="ray-tools", backend="ray") as again:  # the name is free
        assert again.call("history") == []


@ray.remote
def _use(handle, value):
    return handle.call("record", value)


@ray.remote
def _find_and_use(namespace, value):
    with lookup("ray-tools", backend="ray", namespace=namespace) as h:
        return h.call("record", value)


def test_a_handle_in_a_process_outside_ray():
    with Service.start(Tool, backend="ray") as h:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(1) as pool:
            assert pool.apply(_call_record, (h, "outsider")) == 1
        assert h.call("history") == ["outsider"]


def _call_record(handle, value):
    try:
        return handle.call("record", value)
    finally:
        handle.close()  # disconnects from Ray too


def test_a_killed_actor_fails_blocked_clients(tmp_path):
    h = Service.start(Tool, backend="ray", name="doomed")
    other = pickle.loads(pickle.dumps(h))
    try:
        blocked = h.call_async("wait_for", str(tmp_path / "never"))
        queued = other.call_async("echo", 1)
        ray.kill(ray.get_actor("doomed", namespace=h.namespace), no_restart=True)
        for future in (blocked, queued):
            with pytest.raises(ServiceDiedError, match="Ray"):
                future.result(timeout=10)
        with pytest.raises(ServiceDiedError):
            h.call("echo", 2)
    finally:
        other.close()
        h.close()


def test_run_and_remote_refs_on_ray(tmp_path):
    from _services_support import Counter, Tracked, wait_for_file

    from easycore.common.parallel.services import RemoteRef

    offset = 2
    with Service.start(Tool, backend="ray") as h:
        assert h.run(lambda x: x + offset, 1) == 3
        assert h.run(lambda: __import__("os").getpid()) == h.pid
        assert h.run_async(lambda: 5).result(timeout=60) == 5
        (fn,), _ = h.call("echo", lambda: 7)
        assert fn() == 7
        ref = h.run(Counter, 1, remote=True)
        assert isinstance(ref, RemoteRef)
        assert ref.call("add", 2) == 3 and ref.get().value() == 3
        marker = tmp_path / "collected"
        tracked = h.run(Tracked, str(marker), remote=True)
        del tracked
        assert wait_for_file(marker), "the Ray service kept the value after its last reference"


def test_groups_and_pairs_on_ray():
    from easycore.common.parallel.services import get_paired, names, pair

    with Service.start(Tool, name="rg-a", groups="rg", backend="ray"), \
            Service.start(Tool, name="rg-b", backend="ray") as b:
        assert names("rg", backend="ray") == ["rg-a"]
        assert {"rg-a", "rg-b"} <= set(names(backend="ray"))
        b.close()
        assert "rg-b" not in names(backend="ray")
    with pair("ray-lr", 0.25, backend="ray"):
        assert get_paired("ray-lr", backend="ray") == 0.25
