"""The ``slow`` marker, applied from one list (``pytest -m "not slow"`` is the everyday run).

A test is slow if it is marked ``ray`` (starts a local Ray) or ``packaging`` (builds
wheels and virtual environments), or if its node id is in ``slow.txt`` beside this file.
The list lives in one place, not as decorators in the test files, so marking a test slow
never touches (or conflicts with) a file someone else is editing.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SLOW_LIST = Path(__file__).resolve().parent / "slow.txt"
SLOW_BY_MARKER = ("ray", "packaging")


def slow_ids() -> set:
    """Node ids in slow.txt (one a line, ``#`` comments). An id without ``[params]`` stands
    for all its cases, a file without ``::test`` for all its tests."""
    lines = SLOW_LIST.read_text(encoding="utf-8").splitlines()
    return {line.split("#", 1)[0].strip() for line in lines} - {""}


def mark_slow(items: list) -> None:
    """Add the ``slow`` marker to the collected items that are slow (see above)."""
    listed = slow_ids()
    for item in items:
        nodeid = item.nodeid
        if (nodeid in listed or nodeid.split("[", 1)[0] in listed
                or nodeid.split("::", 1)[0] in listed
                or any(item.get_closest_marker(m) for m in SLOW_BY_MARKER)):
            item.add_marker(pytest.mark.slow)


def needs(*modules: str) -> pytest.MarkDecorator:
    """A mark that skips where one of ``modules`` cannot be imported (easycore-torch in
    ``scripts/test --python 3.13`` or ``scripts/test-dist parallel``). Called from a test
    module, after tests/conftest.py has hidden the test folders named like a library."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}")
