"""Instances of ``__main__``'s classes travel as data under every start method.

A worker that cannot import the caller's ``__main__`` (a script piped to
``python -`` or a notebook, a class defined under ``if __name__ ==
"__main__":`` with ``spawn``/``forkserver``, a class defined after ``fork``
workers were made) used to fail with "Can't get attribute ... on <module
'__main__'>" unless the job's function happened to bring the class along: a
notebook's second ``map`` failed or not depending on which worker had run a
chunk of the first (the order-dependent failure of
``test_pool_main.py::test_a_notebook_like_script_read_from_stdin[forkserver]``).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _parallel_support import METHODS, SCRIPTS, run_script

pytestmark = pytest.mark.timeout(180)

EXPECTED = {
    "threshold": [True, False] * 3,
    "guarded": ["Guarded(x=0)", "Guarded(x=1)", "Guarded(x=2)"],
    "late": ["Late(x=0)", "Late(x=1)", "Late(x=2)"],
    "isinstance": [True] * 6,  # the function's class and the items' are one class
    "own_classes": [True, True, True],  # results come back as the caller's classes
    "queue": "Guarded(x=7)",
}


def _report(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("method", METHODS)
def test_main_classes_as_items_results_and_queue_items_from_a_script(method):
    assert _report(run_script("main_data.py", method, timeout=120)) == EXPECTED


@pytest.mark.parametrize("method", METHODS)
def test_main_classes_as_items_from_a_script_read_from_stdin(method):
    proc = subprocess.run(
        [sys.executable, "-", method], input=(SCRIPTS / "main_data.py").read_text(),
        capture_output=True, text=True, timeout=120, cwd=str(SCRIPTS),
    )
    assert _report(proc) == EXPECTED


@pytest.mark.parametrize("sharing", ["segments", "copy", "torch"])
def test_main_classes_through_easycore_torch_transports(sharing):
    pytest.importorskip("torch")
    proc = subprocess.run(
        [sys.executable, "-", "spawn", sharing], input=(SCRIPTS / "main_data.py").read_text(),
        capture_output=True, text=True, timeout=170, cwd=str(SCRIPTS),
    )
    assert _report(proc) == EXPECTED
