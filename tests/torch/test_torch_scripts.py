"""Scripts with runners in ``__main__``: every start method, and no worker outlives its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from _torch_util import EXAMPLES, HERE, SCRIPTS, run_python, wait_gone

pytestmark = pytest.mark.timeout(150)


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_predictor_defined_in_main(tmp_path, method):
    done = run_python(str(SCRIPTS / "spawn_main.py"), method, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"start method {method}" in done.stdout
    assert "shape (100, 3) equal True" in done.stdout


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_workers_die_with_a_killed_parent(tmp_path, method):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(EXAMPLES), str(HERE)]))
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "parent_killed.py"), method],
        stdout=subprocess.PIPE, text=True, cwd=str(tmp_path), env=env,
    )
    try:
        line = proc.stdout.readline()  # bounded: the script prints once its workers are up
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2, line
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert wait_gone(pids, 10.0) == [], "workers outlived their parent"
    finally:
        proc.kill()
        proc.wait(10)
        proc.stdout.close()
