"""scripts/demo installs what the tutorials need, not the test environment.

The demo environment (requirements/demo.txt, locked in requirements/lock/demo.txt) holds
the light distributions and what they import; a tutorial that needs more says so on a
``# requires:`` line, and scripts/demo skips it with a one-line note where its
environment lacks it (scripts/demo_needs.py). Read from the sources, so these tests run
in any environment.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TUTORIALS = sorted(EXAMPLES.glob("[0-9]*.py"))
NEEDS_SCRIPT = ROOT / "scripts" / "demo_needs.py"

_spec = importlib.util.spec_from_file_location("demo_needs", NEEDS_SCRIPT)
assert _spec is not None and _spec.loader is not None
demo_needs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(demo_needs)

# Module -> its distribution, where the names differ.
DISTRIBUTION_OF = {"yaml": "pyyaml"}
# Top-level modules that only a `# requires:` name brings.
REQUIRED_BY = {"torch": "torch", "s3fs": "s3", "moto": "s3", "ray": "ray"}


def requirement_of(module: str) -> str | None:
    """The `# requires:` name that ``module`` needs (easycore.torch: easycore-torch, torch)."""
    if module == "easycore.torch" or module.startswith("easycore.torch."):
        return "torch"
    return REQUIRED_BY.get(module.split(".")[0])


def imported_modules(path: Path, seen: set | None = None) -> set:
    """Every module ``path`` imports, following the tutorials' own helpers in examples/."""
    seen = set() if seen is None else seen
    if path in seen:
        return set()
    seen.add(path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    for module in list(found):
        local = EXAMPLES / f"{module.split('.')[0]}.py"
        if local.is_file():
            found |= imported_modules(local, seen)
    return found


def demo_lock() -> set:
    text = (ROOT / "requirements" / "lock" / "demo.txt").read_text(encoding="utf-8")
    return {m.group(1).lower().replace("_", "-")
            for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", text, re.M)}


@pytest.mark.parametrize("tutorial", TUTORIALS, ids=lambda p: p.stem)
def test_what_a_tutorial_imports_is_in_the_demo_lock_or_on_its_requires_line(tutorial):
    locked = demo_lock()
    declared = set(demo_needs.declared(tutorial))
    lacking = []
    for module in sorted(imported_modules(tutorial)):
        top = module.split(".")[0]
        needed = requirement_of(module)
        if needed is not None:
            if needed not in declared:
                lacking.append(f"{module} (add `# requires: {needed}`)")
        elif not (top in sys.stdlib_module_names or top == "easycore"
                  or (EXAMPLES / f"{top}.py").is_file()
                  or DISTRIBUTION_OF.get(top, top).replace("_", "-") in locked):
            lacking.append(f"{module} (not in requirements/lock/demo.txt)")
    assert not lacking, f"{tutorial.name} would fail in .venv-demo: {', '.join(lacking)}"


def test_the_demo_lock_leaves_out_the_test_environment():
    locked = demo_lock()
    assert "numpy" in locked and "pyyaml" in locked
    heavy = {"torch", "ray", "moto", "s3fs", "mkdocs", "mypy", "ruff", "pytest", "matplotlib"}
    assert not locked & heavy


def test_the_tutorials_that_need_torch_or_s3_say_so():
    declared = {t.stem: demo_needs.declared(t) for t in TUTORIALS}
    assert declared["25_torch_predictor"] == ["torch"]
    assert declared["26_torch_distributed"] == ["torch"]
    assert declared["45_object_storage"] == ["s3"]
    assert not declared["20_parallel_tutorial"]


def needs_in_a_python_without(
    tmp_path: Path, text: str, *hidden: str
) -> subprocess.CompletedProcess:
    """Run scripts/demo_needs.py on a tutorial of ``text`` where ``hidden`` cannot import."""
    tutorial = tmp_path / "99_tutorial.py"
    tutorial.write_text(text, encoding="utf-8")
    hide = "".join(f"sys.modules[{name!r}] = None; " for name in hidden)
    code = (f"import runpy, sys; {hide}sys.argv = [sys.argv[1], sys.argv[2]]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code, str(NEEDS_SCRIPT), str(tutorial)],
                          capture_output=True, text=True, timeout=60)


def test_what_the_environment_lacks_is_named_for_the_skip_note(tmp_path):
    text = '"""A tutorial."""\n\n# requires: torch, s3\n\nimport torch\n'
    done = needs_in_a_python_without(tmp_path, text, "torch", "s3fs", "moto", "moto.server")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "PyTorch, an S3 server (moto, s3fs)"


def test_a_tutorial_without_a_requires_line_needs_nothing_more(tmp_path):
    done = needs_in_a_python_without(tmp_path, "print('hi')\n", "torch")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_an_unknown_requirement_names_the_tutorial(tmp_path):
    done = needs_in_a_python_without(tmp_path, "# requires: tensorflow\n")
    assert done.returncode != 0
    assert "99_tutorial.py: unknown requirement 'tensorflow'" in done.stderr
    assert "known: torch, s3, ray" in done.stderr
