"""What importing easycore-parallel costs: the heavy modules only when used (issue 32, item 1).

A short script pays for every module its import loads, and a worker started
with ``spawn`` or ``forkserver`` pays again (it imports the script). So
``import easycore.common.parallel`` loads none of its parts (PEP 562: each
public name is imported on first use), ``Pool`` and the runners load the
engine but not the heavy modules (``HEAVY``: optional dependencies, the
standard library's slow imports, and easycore's parts a first call does not
need), and a pool's first ``map`` loads none of them either; a worker
started with ``spawn`` or ``forkserver`` imports only what it runs (its loop
and program, not the caller's pool and engine). Each check runs in a fresh
interpreter (nothing of this test session is loaded).
``benchmarks/bench_coldstart.py`` prints the counts and the times.
"""

from __future__ import annotations

import ast
import json
import multiprocessing
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import List, Optional

import pytest

pytestmark = pytest.mark.timeout(120)

#: modules (or packages: their submodules count) a cold start must not load:
#: optional dependencies, the standard library's slow imports that only some
#: features need, and easycore's parts that a first call does not use
HEAVY = (
    "tqdm", "psutil", "cloudpickle", "threadpoolctl", "numpy", "yaml", "ray", "torch",
    "concurrent.futures", "logging", "secrets", "hmac", "statistics", "decimal", "json",
    "asyncio", "ssl", "email", "http", "urllib",
    "easycore.common.parallel.insights", "easycore.common.parallel.services",
    "easycore.common.parallel.queue", "easycore.common.parallel.connection",
    "easycore.common.parallel.shared_list", "easycore.common.parallel.background",
    "easycore.common.parallel.jobqueue", "easycore.common.parallel.backends.thread",
    "easycore.common.parallel.backends.ray",
)


def heavy_in(modules) -> list:
    """The modules of ``modules`` that are (or are inside) one of ``HEAVY``."""
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


#: the caller's parts: a worker runs none of them
CALLER_ONLY = (
    "easycore.common.parallel.engine", "easycore.common.parallel.pool.pool",
    "easycore.common.parallel.pool.results", "easycore.common.parallel.backends.process",
    "easycore.common.parallel.runner",
)


def probe(code: str, cwd: Optional[str] = None) -> List[list]:
    """Run ``code`` in a fresh interpreter: the JSON lines it printed, then what it
    loaded beyond the interpreter's own."""
    script = textwrap.dedent("""
        import json, sys
        _before = set(sys.modules)
        {code}
        print(json.dumps(sorted(set(sys.modules) - _before)))
    """).replace("{code}", textwrap.dedent(code).strip())
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=90, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.strip().splitlines()]


def loaded_by(code: str) -> list:
    """What ``code`` loads in a fresh interpreter, beyond the interpreter's own."""
    return probe(code)[-1]


def test_importing_the_package_loads_none_of_its_parts():
    loaded = loaded_by("import easycore.common.parallel")
    ours = [m for m in loaded if m.startswith("easycore.common.parallel.")]
    assert ours == ["easycore.common.parallel._lazy", "easycore.common.parallel._version"]
    assert heavy_in(loaded) == []


@pytest.mark.parametrize("name", ["Pool", "UnorderedRunner", "OrderedRunner", "WorkerError"])
def test_a_first_name_loads_no_heavy_module(name):
    loaded = loaded_by(f"from easycore.common.parallel import {name}")
    assert heavy_in(loaded) == []


FORK_ONLY = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                               reason="fork is not available here")


@FORK_ONLY
def test_a_pools_first_map_and_close_load_no_heavy_module():
    # abs is found by reference (no cloudpickle); fork named, not left to the
    # default, which CI also makes forkserver (whose start loads the resource
    # tracker: the start methods' own cold paths are bench_coldstart's).
    loaded = loaded_by("""
        from easycore.common.parallel import Pool
        with Pool(2, start_method="fork") as pool:
            assert pool.map(abs, range(-50, 50)) == [abs(x) for x in range(-50, 50)]
    """)
    assert heavy_in(loaded) == []
    assert "typing" not in loaded  # (the _hints module's stand-ins)
    # Only a failed task needs the stdlib pool's error classes (pool_errors),
    # only a segment the resource tracker; ~3 ms of a short script's start.
    banned = ("multiprocessing.pool", "easycore.common.parallel.pool_errors", "traceback",
              "multiprocessing.resource_tracker")
    assert [m for m in banned if m in loaded] == []


@FORK_ONLY
def test_a_runners_first_call_loads_neither_the_pool_nor_the_stdlibs():
    # The errors that are multiprocessing.pool's own classes (pool_errors) come
    # with a Pool only; nothing of dataclasses/inspect on the way (named tuples);
    # traceback (with linecache, tokenize, textwrap: ~2 ms) once a hook fails.
    # fork named: the probe's runner class is made at run time, which a
    # forkserver or spawn worker could not import by name.
    loaded = probe("""
        from _import_probe import runner_class
        with runner_class()(2, start_method="fork") as runner:
            assert runner([1, 2, 3]) is None
    """, cwd=str(Path(__file__).parents[1]))[-1]
    assert "easycore.common.parallel.runner" in loaded
    banned = ("multiprocessing.pool", "easycore.common.parallel.pool_errors",
              "easycore.common.parallel.pool.pool", "dataclasses", "inspect", "traceback",
              "typing")
    assert [m for m in banned if m in loaded] == []


@pytest.mark.parametrize("method", [m for m in ("spawn", "forkserver")
                                    if m in multiprocessing.get_all_start_methods()])
def test_a_fresh_worker_imports_only_what_it_runs(method):
    # The task's module imports nothing of easycore: what the worker has is
    # what its own start imported (its loop, the program, policy, transport).
    worker, loaded = probe(f"""
        from easycore.common.parallel import Pool
        from _import_probe import worker_modules
        with Pool(1, start_method={method!r}) as pool:
            print(json.dumps(pool.apply(worker_modules)))
    """, cwd=str(Path(__file__).parents[1]))
    assert "easycore.common.parallel.pool.pool" in loaded  # the caller's, not the worker's
    assert "easycore.common.parallel.worker.loop" in worker
    assert heavy_in(worker) == []
    assert [m for m in worker if any(m == c or m.startswith(c + ".") for c in CALLER_ONLY)] == []
    assert "traceback" not in worker  # (imported once a hook fails)


@pytest.mark.parametrize("method", [m for m in ("spawn", "forkserver")
                                    if m in multiprocessing.get_all_start_methods()])
def test_a_scripts_pool_worker_imports_not_the_callers_parts(tmp_path, method):
    # A worker imports the script again (spawn; forkserver: its server does), and
    # with it the Pool the script imports: the class, not the caller's parts
    # (docs/platforms.md), which the first Pool() imports.
    script = tmp_path / "pool_script.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys
        from easycore.common.parallel import Pool

        def modules():
            return sorted(sys.modules)

        if __name__ == "__main__":
            with Pool(1, start_method={method!r}) as pool:
                print(json.dumps(pool.apply(modules)))
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=90, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    worker = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "easycore.common.parallel.pool.pool" in worker  # the script's own import
    callers = [m for m in worker if m.startswith((
        "easycore.common.parallel.engine.", "easycore.common.parallel.pool.results",
        "easycore.common.parallel.pool.reader", "easycore.common.parallel.pool.arguments",
        "easycore.common.parallel.options", "easycore.common.parallel.progress",
        "easycore.common.parallel.pool_errors", "multiprocessing.pool", "traceback"))]
    assert callers == ["easycore.common.parallel.engine.door"]


@pytest.mark.parametrize("method", [m for m in ("spawn", "forkserver")
                                    if m in multiprocessing.get_all_start_methods()])
def test_a_runners_fresh_worker_imports_no_back_end_nor_pool(method):
    # docs/platforms.md: the runner's module brings the engine's door, not the engine.
    worker, _ = probe(f"""
        from _import_probe_runner import WorkerModules
        with WorkerModules(1, start_method={method!r}) as runner:
            print(json.dumps(runner([0])))
    """, cwd=str(Path(__file__).parents[1]))
    assert "easycore.common.parallel.runner" in worker and "_import_probe_runner" in worker
    assert heavy_in(worker) == []
    # (the pool's program is the forkserver's preload, for every worker: not banned)
    assert [m for m in worker if m.startswith(("easycore.common.parallel.backends.process",
                                               "easycore.common.parallel.pool.pool",
                                               "easycore.common.parallel.pool.results",
                                               "multiprocessing.pool", "traceback"))] == []
    engine = [m for m in worker if m.startswith("easycore.common.parallel.engine.")]
    assert engine == ["easycore.common.parallel.engine.door"]
    assert [m for m in worker if m.startswith(("easycore.common.parallel._runner_call",
                                               "easycore.common.parallel.options",
                                               "easycore.common.parallel.progress",
                                               "easycore.common.config.lazy_copy"))] == []


def _runtime_typing_imports(path: Path) -> List[str]:
    """The lines of ``path`` that import ``typing`` when the module loads: at its top
    level or in a class body, outside ``if TYPE_CHECKING:`` (a function's own import
    runs only when it is called)."""
    found = []

    def visit(body) -> None:
        for node in body:
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                    and node.test.id == "TYPE_CHECKING":
                visit(node.orelse)
            elif (isinstance(node, ast.Import) and any(a.name == "typing" for a in node.names)) \
                    or (isinstance(node, ast.ImportFrom) and node.module == "typing"):
                found.append(f"{path.name}:{node.lineno}")
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.ClassDef):
                visit(node.body)

    visit(ast.parse(path.read_text()).body)
    return found


def test_no_module_of_the_cold_path_imports_typing_when_it_loads():
    # typing costs a fresh interpreter 2.5-4 ms (a short script's, every worker's):
    # hints import it under ``if TYPE_CHECKING:``, run-time needs come from _hints.
    packages = Path(__file__).parents[3] / "packages"
    roots = [packages / "easycore-parallel" / "src", packages / "easycore-config" / "src"]
    found = [line for root in roots for path in sorted(root.rglob("*.py"))
             for line in _runtime_typing_imports(path)]
    assert found == []


def test_the_hints_stand_ins_behave_at_run_time():
    from easycore.common.parallel._hints import Generic, ParamSpec, Protocol, TypeVar
    from easycore.common.parallel.pool import AsyncResult

    assert TypeVar("T") == "T" and ParamSpec("P") == "P" and Protocol is object
    alias = AsyncResult[int]  # subscriptable as multiprocessing.pool.AsyncResult
    assert alias.__origin__ is AsyncResult and alias.__args__ == (int,)
    assert issubclass(AsyncResult, Generic)

    class Box(Generic["T"]):  # a subclass of a subscripted base is a plain class
        pass

    assert Box.__mro__[1] is Generic and Box[str].__args__ == (str,)


def test_insights_are_imported_when_asked_for():
    loaded = loaded_by("""
        from easycore.common.parallel import Pool
        with Pool(1, insights=True) as pool:
            pool.map(abs, range(4))
            pool.insights()
    """)
    assert "easycore.common.parallel.insights" in loaded


def test_every_public_name_is_importable_and_listed():
    import easycore.common.parallel as ecp

    for name in ecp.__all__:
        assert getattr(ecp, name) is not None, name
    assert set(ecp.__all__) <= set(dir(ecp))
    namespace: dict = {}
    exec("from easycore.common.parallel import *", namespace)
    assert set(ecp.__all__) - {"__version__"} <= set(namespace)
    # The seams' base classes are still importable from the package (not in __all__).
    from easycore.common.parallel import Backend, DevicePolicy, Executor, Transport  # noqa: F401
    from easycore.common.parallel.pool import Pool

    assert ecp.Pool is Pool
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        ecp.NoSuchName  # noqa: B018
    with pytest.raises(ImportError):
        exec("from easycore.common.parallel import NoSuchName", {})


def _import_failure(code: str) -> tuple:
    """Run ``code`` (which prints an ImportError's cause type and message) fresh; both."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    cause, _, message = done.stdout.strip().partition(" | ")
    return cause, message


def test_a_name_whose_module_fails_to_import_says_why():
    # An AttributeError while a lazily exported name's module is imported (a dependency
    # of another version, say) must not read as "cannot import name 'Executor'": here
    # concurrent.futures, which easycore's Executor is built on, cannot import.
    cause, message = _import_failure("""
        import threading
        del threading._register_atexit  # concurrent.futures registers its exit with it
        try:
            from easycore.common.parallel import Executor
        except ImportError as exc:
            print(type(exc.__cause__).__name__, "|", exc)
    """)
    assert cause == "AttributeError"
    assert "'Executor'" in message and "easycore.common.parallel.futures" in message
    assert "_register_atexit" in message
    # A name whose module is given absolute (errors' pool classes) says its path once.
    cause, message = _import_failure("""
        import multiprocessing.pool
        del multiprocessing.pool.MaybeEncodingError
        try:
            from easycore.common.parallel.errors import ResultEncodingError
        except ImportError as exc:
            print(type(exc.__cause__).__name__, "|", exc)
    """)
    assert cause == "AttributeError"
    assert "importing easycore.common.parallel.pool_errors failed" in message
    assert "MaybeEncodingError" in message
