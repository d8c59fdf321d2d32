"""tests/slow.txt names tests that exist, and the suite-wide hook marks them ``slow``.

The list is read by tests/conftest.py; a test renamed or removed without its line
following would silently fall back into the everyday (``-m "not slow"``) run.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from markers import SLOW_LIST, needs, slow_ids

ROOT = Path(__file__).resolve().parents[2]


def test_every_listed_test_exists():
    ids = slow_ids()
    assert ids, f"{SLOW_LIST} lists no test"
    for nodeid in sorted(ids):
        path, *names = nodeid.split("::")
        source = ROOT / path
        assert source.is_file(), f"{SLOW_LIST.name}: {nodeid}: no file {path}"
        text = source.read_text(encoding="utf-8")
        for name in (n.split("[", 1)[0] for n in names):
            defined = rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b"
            assert re.search(defined, text, re.M), f"{nodeid}: no {name} in {path}"


@needs("easycore.torch")  # tests/distributed's modules import it
def test_listed_and_ray_tests_are_deselected_by_not_slow():
    listed = sorted(n for n in slow_ids() if n.startswith("tests/distributed/"))
    assert listed, "pick a listed test from another folder for this check"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not slow",
         "-p", "no:randomly", "tests/distributed"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kept = {line.split("[", 1)[0] for line in proc.stdout.splitlines() if "::" in line}
    assert kept, proc.stdout
    assert not kept & set(listed), kept & set(listed)
    assert not any("test_distributed_ray.py" in n for n in kept)  # marked ray
