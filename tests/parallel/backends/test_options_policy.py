"""One options object, one way to pick a back-end, a start method and a transport.

Every client (runners, ``Pool``, ``BackgroundTask``, ``JobQueue``) refuses the
same bad option the same way (``options.WorkerOptions``); every client builds
its back-end from its device policy (``policy.build_backend``), runners
included; ``"module:qualname"`` paths are imported by one helper
(``defaults.import_object``); ``BackgroundTask`` and ``JobQueue`` work on
their pool through ``PoolJobs``, not its private attributes.
"""

from __future__ import annotations

import ast
import copy
import math
import pickle
from pathlib import Path

import pytest
from _parallel_helpers import _Collect

import easycore.common.parallel as parallel
from easycore.common.parallel import (
    BackgroundTask,
    DevicePolicy,
    JobQueue,
    Pool,
    SharedMemoryTransport,
    UnorderedRunner,
)
from easycore.common.parallel.backends.policy import BACKENDS, backend_class
from easycore.common.parallel.defaults import import_object
from easycore.common.parallel.options import WorkerOptions, check_task_timeout
from easycore.common.parallel.pool import PoolJobs, pool_options

pytestmark = pytest.mark.timeout(120)

SRC = Path(parallel.__file__).parent


class EagerTransport(SharedMemoryTransport):
    threshold = 4096


class Echo(_Collect, UnorderedRunner):
    @staticmethod
    def consumer_end(cfg):
        return sorted(cfg.out)


class EagerEcho(Echo):
    device_policy = DevicePolicy(transport_class=EagerTransport)


class SpawnPolicy(DevicePolicy):
    def start_method(self, devices, requested, threads):
        return "spawn"


class SpawnEcho(Echo):
    device_policy = SpawnPolicy()


class SpawnPool(Pool):
    device_policy = SpawnPolicy()


def _square(x):
    return x * x


# ------------------------------------------------------------------ options
def _clients():
    # Each client made with one bad option (the rest default); nothing starts
    # before the options are checked.
    return {
        "runner": lambda **kw: Echo(1, **kw),
        "pool": lambda **kw: Pool(1, **kw),
        "background": lambda **kw: BackgroundTask(_square, (2,), **kw),
        "jobqueue": lambda **kw: JobQueue(1, **kw),
    }


@pytest.mark.parametrize("client", ["runner", "pool", "background", "jobqueue"])
@pytest.mark.parametrize("option, bad, words", [
    ("task_timeout", -1, "task_timeout must be a positive number of seconds, got -1"),
    ("task_timeout", "1", "task_timeout must be a positive number of seconds, got '1'"),
    ("task_timeout", math.nan, "task_timeout must be a positive number of seconds"),
    ("queue_scale", 0, "queue_scale must be a positive finite number, got 0"),
    ("queue_scale", math.inf, "queue_scale must be a positive finite number, got inf"),
    ("backend", "nope", "unknown backend 'nope'; known: \\['process', 'ray', 'thread'\\]"),
])
def test_every_client_refuses_a_bad_option_with_the_same_words(client, option, bad, words,
                                                               no_leaks):
    with pytest.raises(ValueError, match=words):
        _clients()[client](**{option: bad})


@pytest.mark.parametrize("client", ["pool", "background", "jobqueue"])
@pytest.mark.parametrize("bad", [0, -1, "3", 1.5])
def test_every_pool_client_refuses_a_bad_max_deaths(client, bad, no_leaks):
    with pytest.raises(ValueError, match=f"max_deaths must be a positive int, got {bad!r}"):
        _clients()[client](max_deaths=bad)


def test_a_call_s_task_timeout_is_checked_like_the_constructor_s_and_keeps_the_runner(no_leaks):
    with Echo(1) as runner:
        with pytest.raises(ValueError, match="task_timeout must be a positive number"):
            runner([1], task_timeout=math.inf)
        assert runner([1, 2]) == [1, 2]  # a bad argument did not close it
    with Pool(1) as pool, pytest.raises(ValueError, match="task_timeout must be a positive"):
        pool.map(_square, [1], task_timeout=math.inf)


def test_options_are_one_frozen_checked_object():
    options = WorkerOptions(task_timeout=2, queue_scale=1.5, backend_options={"address": "a"})
    assert options.credits == 2 and options.timeout_for(None) == 2
    assert options.timeout_for(0.5) == 0.5
    with pytest.raises(ValueError, match="task_timeout"):
        options.timeout_for(-3)
    with pytest.raises(ValueError, match="queue_scale"):
        options.replace(queue_scale=-1)
    with pytest.raises(AttributeError):
        options.task_timeout = 3  # type: ignore[misc]
    assert check_task_timeout(None) is None
    # Every way to a changed copy checks again (a named tuple has its own).
    with pytest.raises(ValueError, match="queue_scale"):
        options._replace(queue_scale=-1)
    if hasattr(copy, "replace"):  # 3.13+
        with pytest.raises(ValueError, match="max_deaths"):
            copy.replace(options, max_deaths=0)
    assert options.replace(max_deaths=5).max_deaths == 5
    assert pickle.loads(pickle.dumps(options)) == options == copy.deepcopy(options)
    assert WorkerOptions(max_worker_memory="1 KB").max_worker_memory == 1000
    assert WorkerOptions(max_worker_memory="1 KB").replace(insights=True).max_worker_memory == 1000


def test_pool_options_splits_worker_options_pool_arguments_and_backend_options():
    options, rest = pool_options(Pool, {"devices": ["cpu"], "cfg": {"a": 1}, "task_timeout": 3,
                                        "queue_scale": 1, "address": "auto", "backend": "ray"})
    assert rest == {"devices": ["cpu"], "cfg": {"a": 1}}
    assert options.task_timeout == 3 and options.queue_scale == 1
    assert options.backend == "ray" and dict(options.backend_options) == {"address": "auto"}
    with pytest.raises(ValueError, match="unknown backend"):
        pool_options(Pool, {"backend": "nope"})


def test_pool_takes_a_checked_options_object_but_not_both(no_leaks):
    with Pool(1, options=WorkerOptions(task_timeout=30, queue_scale=1)) as pool:
        assert pool.map(_square, [1, 2, 3]) == [1, 4, 9]
        assert pool._engine.credits == 1
    with pytest.raises(TypeError, match="not both: \\['address'\\]"):
        Pool(1, options=WorkerOptions(), address="auto")
    with pytest.raises(TypeError, match="not both: \\['task_timeout', 'queue_scale'\\]"):
        Pool(1, options=WorkerOptions(), task_timeout=3, queue_scale=2)


# -------------------------------------------------------- one back-end table
def test_runners_and_pools_copy_the_one_backend_table():
    assert parallel.BaseRunner.backends == BACKENDS == Pool.backends
    assert parallel.BaseRunner.backends is not Pool.backends  # each class may extend its own
    assert backend_class(BACKENDS, "process") is parallel.ProcessBackend
    assert backend_class(BACKENDS, "thread").__name__ == "ThreadBackend"
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        backend_class(BACKENDS, "nope")


def test_a_runner_takes_its_transport_from_its_device_policy_as_a_pool_does(no_leaks):
    with EagerEcho(1) as runner:
        assert runner([1, 2]) == [1, 2]
        assert type(runner._engine.backend.transport) is EagerTransport
        assert type(runner.make_transport()) is EagerTransport

    class EagerPool(Pool):
        device_policy = EagerEcho.device_policy

    with EagerPool(1) as pool:
        assert type(pool._engine.backend.transport) is EagerTransport


class NamedTransportEcho(Echo):
    # At module level: a worker started with spawn or forkserver (3.14's
    # default) imports the class, which a local one would not let it do.
    transport_class = EagerTransport


def test_a_runner_class_transport_is_folded_into_its_policy(no_leaks):
    with NamedTransportEcho(1) as runner:
        assert type(runner._engine.backend.transport) is EagerTransport
    # the shared policy is untouched
    assert NamedTransportEcho.device_policy.transport_class is SharedMemoryTransport


@pytest.mark.parametrize("cls", [SpawnEcho, SpawnPool])
def test_the_device_policy_picks_the_start_method_of_runners_and_pools(cls, no_leaks):
    with cls(1) as client:
        assert client._engine.backend.start_method == "spawn"
        if isinstance(client, Pool):
            assert client.map(_square, [3]) == [9]
        else:
            assert client.get_mp_context().get_start_method() == "spawn"
            assert client([3]) == [3]


@pytest.mark.parametrize("seam", ["get_mp_context", "make_transport"])
def test_overriding_get_mp_context_or_make_transport_is_refused_naming_device_policy(
        seam, no_leaks):
    # Deprecated in the fourth round (it warned and still chose), retired since
    # (issue 35 item 3): a subclass that overrides one is told what to do
    # instead; it is never silently ignored, and nothing starts.
    class Recording(Echo):
        pass

    setattr(Recording, seam, lambda self: None)
    with pytest.raises(TypeError, match=rf"Recording overrides {seam}\(\).*device_policy"):
        Recording(1)


# ------------------------------------------------------------ import_object
def test_import_object_imports_module_colon_qualname():
    assert import_object("easycore.common.parallel.pool:Pool") is Pool
    assert import_object("easycore.common.parallel.pool:Pool.map") is Pool.map
    with pytest.raises(ImportError):
        import_object("easycore.no_such_module:X")
    with pytest.raises(AttributeError):
        import_object("easycore.common.parallel.pool:NoSuchName")


def test_no_copy_of_the_module_colon_qualname_import_is_left():
    # One helper: nothing else in easycore-parallel splits such paths itself.
    for path in SRC.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if path.name == "defaults.py":
            continue
        assert 'partition(":")' not in text, f"{path.relative_to(SRC)} imports a path itself"


# ----------------------------------------------------------------- the seam
@pytest.mark.parametrize("module", ["background.py", "jobqueue.py"])
def test_background_clients_use_the_pool_through_its_seam(module):
    tree = ast.parse((SRC / module).read_text(encoding="utf-8"))
    private = {"_engine", "_submit", "_recorder", "_MAP"}
    reached = sorted({node.attr for node in ast.walk(tree)
                      if isinstance(node, ast.Attribute) and node.attr in private}
                     | {alias.name for node in ast.walk(tree)
                        if isinstance(node, ast.ImportFrom) and node.module == "pool"
                        for alias in node.names if alias.name.startswith("_")})
    assert not reached, f"{module} reaches into Pool's privates: {reached}"


def test_pool_jobs_runs_a_job_and_reports_the_pool(no_leaks):
    from easycore.common.parallel.extending import JobSink

    class Collect(JobSink):
        def __init__(self):
            self.out, self.done = [], None

        def deliver(self, first_index, results, failed):
            self.out.extend(results)

        def finish(self, error):
            self.done = error

    with Pool(1) as pool:
        jobs = PoolJobs(pool)
        sink = Collect()
        job = jobs.submit(_square, [1, 2, 3], sink, ordered=True)
        job.finished.wait(60)
        assert sink.out == [1, 4, 9] and sink.done is None
        assert not jobs.broken and len(jobs.worker_seconds()) == 1
        assert jobs.forked == (pool._engine.backend.start_method == "fork")
        with pytest.raises(RuntimeError, match="insights"):
            jobs.insights()
