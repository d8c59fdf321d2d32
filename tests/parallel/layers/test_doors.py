"""Clean doors (issue 35 items 2, 3, 7): what a user calls, what an extension uses, where.

``easycore.common.parallel.__all__`` holds what a user calls; the seams'
base classes are ``extending``'s (and still import from the package, as the
docs taught). ``pool`` is a package whose every old import path works; the
``ray_backend`` shim is gone; no two modules outside ``services/`` share a
name; clients reach the back-ends only through ``engine.door``.
"""

from __future__ import annotations

import ast
import importlib
from collections import Counter
from pathlib import Path

import pytest

import easycore.common.parallel as parallel
import easycore.common.parallel.extending as extending

SRC = Path(parallel.__file__).parent

SEAMS = ["Backend", "BackendSpec", "ChannelBroken", "WorkerExited", "DevicePolicy",
         "ProcessBackend", "WorkerProgram", "Transport", "PickleTransport",
         "SharedMemoryTransport"]


@pytest.mark.parametrize("name", SEAMS)
def test_a_seam_is_extendings_and_still_imports_from_the_package(name):
    assert name in extending.__all__ and name not in parallel.__all__
    assert getattr(parallel, name) is getattr(extending, name)


def test_the_worker_seam_is_worker_handler_and_executor_is_concurrent_futures():
    import concurrent.futures

    assert "WorkerHandler" in extending.__all__ and "Executor" not in extending.__all__
    assert issubclass(parallel.Executor, concurrent.futures.Executor)
    with pytest.warns(DeprecationWarning, match="WorkerHandler"):
        assert extending.Executor is extending.WorkerHandler  # the old name, deprecated


def test_the_package_offers_what_a_user_calls():
    for name in ("Pool", "Executor", "BaseRunner", "BackgroundTask", "JobQueue", "Queue",
                 "WorkerContext", "WorkerDiedError", "ErrorReport", "Insights"):
        assert name in parallel.__all__, name


def test_every_name_of_the_one_pool_module_still_imports_from_pool():
    pool = importlib.import_module("easycore.common.parallel.pool")
    for name in ("Pool", "AsyncResult", "ApplyResult", "MapResult", "IMapIterator",
                 "IMapUnorderedIterator", "TimeoutError", "PoolJobs", "pool_options",
                 "PoolProgram"):
        assert hasattr(pool, name), name
    assert pool.Pool is parallel.Pool and issubclass(pool.TimeoutError, TimeoutError)


def test_the_ray_backend_shim_is_gone_and_its_names_live_in_backends_ray():
    with pytest.raises(ImportError):
        importlib.import_module("easycore.common.parallel.ray_backend")
    ray_module = importlib.import_module("easycore.common.parallel.backends.ray")
    for name in ("RayBackend", "RayWorkerDiedError", "import_ray", "is_cuda", "acquire_ray",
                 "release_ray"):
        assert hasattr(ray_module, name), name


def test_no_two_modules_outside_services_share_a_name():
    names = Counter(p.name for p in SRC.rglob("*.py")
                    if p.name != "__init__.py" and "services" not in p.relative_to(SRC).parts)
    assert [n for n, k in names.items() if k > 1] == []


@pytest.mark.parametrize("client", ["runner.py", "background.py", "jobqueue.py",
                                    *[f"pool/{p.name}" for p in (SRC / "pool").glob("*.py")]])
def test_a_client_imports_nothing_from_backends(client):
    tree = ast.parse((SRC / client).read_text(encoding="utf-8"))
    reached = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and node.module and node.module.split(".")[0] == "backends"]
    assert not reached, f"{client} imports {reached}: go through engine.door"


def test_runners_and_pools_build_their_engine_through_the_door(monkeypatch, no_leaks):
    from easycore.common.parallel import Pool, UnorderedRunner
    from easycore.common.parallel.engine import door

    started = []
    start = door.start

    def recording(backend, options, policy, **kwargs):
        started.append(type(policy).__name__)
        return start(backend, options, policy, **kwargs)

    monkeypatch.setattr(door, "start", recording)
    with UnorderedRunner(1, backend="thread") as runner:
        runner([1])
    with Pool(1, backend="thread") as pool:
        assert pool.map(abs, [-1]) == [1]
    assert started == ["FailFast", "ReplaceWorker"]
