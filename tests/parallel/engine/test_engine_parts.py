"""The engine is parts over one state (issue 35 item 1), checked on its source.

``engine/`` was one class cut into files: a mixin (``Engine(Dispatch)``), a
supervisor that reached into ten of the engine's private members, a ``Job``
that held the engine for its recorder, a ``fail_fast`` branch outside the
policies, and modules that imported each other in a circle. Now the core holds
a dispatcher and a supervisor over one ``EngineState``; they end jobs through
the ``Outcomes`` interface the core implements. These tests read the modules
(the import contracts in ``.importlinter`` check the same imports too).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import easycore.common.parallel.engine as engine_package
from easycore.common.parallel.engine.core import Engine
from easycore.common.parallel.engine.credits import Dispatcher
from easycore.common.parallel.engine.job import Job
from easycore.common.parallel.engine.state import EngineState, Outcomes
from easycore.common.parallel.engine.supervision import FailFast, ReplaceWorker, Supervisor

ENGINE = Path(engine_package.__file__).parent


def _tree(name: str) -> ast.Module:
    return ast.parse((ENGINE / name).read_text(encoding="utf-8"))


def _engine_imports(name: str) -> set:
    """The engine modules ``name`` imports, type-only imports included."""
    found = set()
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return found


def test_no_import_cycle_inside_the_engine_type_hints_included():
    graph = {p.stem: _engine_imports(p.name) for p in ENGINE.glob("*.py")
             if p.stem != "__init__"}
    done: set = set()

    def visit(module, path):
        assert module not in path, f"import cycle: {' -> '.join([*path, module])}"
        if module in done:
            return
        for imported in graph.get(module, ()):
            visit(imported, [*path, module])
        done.add(module)

    for module in graph:
        visit(module, [])
    assert "core" not in graph["supervision"] | graph["credits"] | graph["job"]


@pytest.mark.parametrize("module", ["supervision.py", "credits.py", "state.py", "job.py"])
def test_no_part_touches_a_private_member_of_another_object(module):
    # ``self._x`` is its own; ``other._x`` (``engine._workers``, ``job._retry``) is not.
    reached = sorted({
        f"{ast.unparse(node.value)}.{node.attr}" for node in ast.walk(_tree(module))
        if isinstance(node, ast.Attribute) and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    })
    assert not reached, f"{module} reaches into other objects' privates: {reached}"


def test_the_dispatcher_and_the_supervisor_are_composed_not_inherited():
    assert Engine.__bases__ == (object,)
    assert not issubclass(Engine, Dispatcher) and not issubclass(Engine, Supervisor)
    # The core implements what the parts ask of it.
    for name in ("fail", "finish", "deliver", "after_chunk", "break_engine"):
        assert callable(getattr(Engine, name)), name
        assert name in vars(Outcomes), name


def test_a_job_is_given_its_recorder_not_the_engine():
    import inspect

    params = inspect.signature(Job).parameters
    assert "engine" not in params and "recorder" in params
    assert "engine" not in {node.attr for node in ast.walk(_tree("job.py"))
                            if isinstance(node, ast.Attribute)}
    assert "delivered_items" not in (ENGINE / "job.py").read_text(encoding="utf-8")


def test_fail_fast_is_decided_by_the_policies_only():
    for module in ("core.py", "credits.py", "state.py", "supervision.py"):
        names = {node.attr for node in ast.walk(_tree(module)) if isinstance(node, ast.Attribute)}
        assert "fail_fast" not in names, f"{module} branches on fail_fast"
    assert FailFast().keeps_items is False and ReplaceWorker().keeps_items is True
    assert ReplaceWorker().chunk_failed(None, {0: None}) is None  # type: ignore[arg-type]


def test_the_supervisor_takes_state_outcomes_and_policy():
    import inspect

    assert list(inspect.signature(Supervisor).parameters) == ["state", "outcomes", "policy"]
    assert list(inspect.signature(Dispatcher).parameters) == ["state", "outcomes"]
    assert "lock" in vars(EngineState(_NoWorkers(), credits=1, maxtasksperchild=None,
                                      reorder_bytes=1))


class _NoWorkers:
    def __init__(self):
        self.devices, self.transport, self.pids = [], None, []
