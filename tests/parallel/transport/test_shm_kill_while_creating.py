"""A process SIGKILLed while it creates a shared-memory segment leaves none.

Workers die with a SIGKILLed caller (``PR_SET_PDEATHSIG``) at any instant,
maybe between ``shm_open`` and registering the name with the resource tracker:
the segment was then known to nobody and outlived everything (seen once in
``test_workers_exit_when_the_parent_is_sigkilled[fork-busy]`` under load).
The name is now registered before the segment exists.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _parallel_support import SCRIPTS, shm_named
from processes import wait_gone

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("where", ["registering", "reserving"])
def test_a_process_killed_while_creating_a_segment_leaves_none(where):
    proc = subprocess.run([sys.executable, str(SCRIPTS / "shm_killed_creating.py"), where],
                          capture_output=True, text=True, timeout=30, cwd=str(SCRIPTS))
    assert proc.returncode == -9, proc.stdout + proc.stderr
    info = json.loads(proc.stdout.splitlines()[0])
    assert wait_gone([info["tracker"]], 20) == []  # the tracker cleans up, then exits
    assert shm_named(info["name"]) == []
