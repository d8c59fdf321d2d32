"""No source module over 700 lines (the developer guide's rule, issue 35 item 6).

A module that grows past the budget is split where it has seams, not excused
by a paragraph in its docstring: this test holds every module of every
distribution (``packages/*/src``) to it.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 700


def _modules():
    return sorted(ROOT.glob("packages/*/src/**/*.py"))


def test_there_are_modules_to_check():
    assert len(_modules()) > 50


def test_no_source_module_is_over_700_lines():
    over = []
    for path in _modules():
        with path.open(encoding="utf-8") as f:
            n = sum(1 for _ in f)
        if n > LIMIT:
            over.append(f"{path.relative_to(ROOT)}: {n} lines")
    assert not over, f"modules over {LIMIT} lines (split them at a seam): {over}"
