"""fork, forkserver and spawn, with the runner classes defined in a script's __main__."""

from __future__ import annotations

import json

import pytest
from _parallel_support import METHODS, run_script

pytestmark = pytest.mark.timeout(120)



@pytest.mark.parametrize("method", METHODS)
def test_main_defined_runners_under_each_start_method(method):
    proc = run_script("main_defined.py", method, timeout=90)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["start_method"] == method
    assert report["sum"] == sum(d**3 for d in range(100))
    assert report["sum_again"] == sum(d**3 for d in range(10))
    assert report["ordered"] is True
    err = report["error"]
    assert err["hook"] == "producer_work" and err["device"] in ("cpu:0", "cpu:1")
    assert "bad item 7" in err["text"] and "main_defined.py" in err["text"]
    assert report["closed_after_error"] is True
    assert "leaked" not in proc.stderr  # no resource-tracker warning about shared memory
