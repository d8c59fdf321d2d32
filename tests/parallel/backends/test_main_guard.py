"""A script without ``if __name__ == "__main__":`` under spawn and forkserver (issue 32, item 9).

Python 3.14 made ``forkserver`` the default on Linux, and macOS uses ``spawn``:
each worker imports the main script again, so a script that starts workers at
its top level starts them from every worker. easycore names the cause and the
one-line fix (``MainGuardError``) instead of the standard library's
bootstrapping ``RuntimeError`` per worker followed by a bare "exit code 1".
Each case is a real script in a fresh interpreter.
"""

from __future__ import annotations

import pickle

import pytest
from _parallel_support import METHODS, run_script

from easycore.common.parallel import WorkerDiedError
from easycore.common.parallel._os.startup import EXIT_NO_GUARD, ForkServerExited, MainGuardError

pytestmark = pytest.mark.timeout(180)

FRESH = [m for m in METHODS if m != "fork"]
GUARD = 'if __name__ == "__main__":'


@pytest.mark.parametrize("kind", ["pool", "runner"])
@pytest.mark.parametrize("method", FRESH)
def test_a_missing_guard_is_named_with_its_fix(method, kind):
    proc = run_script("no_main_guard.py", method, kind, timeout=120)
    assert proc.returncode != 0
    assert "sum" not in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    # The caller's error: its type, the script, the start method and the fix.
    assert last.startswith("easycore.common.parallel._os.startup.MainGuardError: "), proc.stderr
    assert "no_main_guard.py starts worker processes when it is imported" in last
    assert repr(method) in last and GUARD in last
    # Each worker said so once, naming the line, and the standard library's
    # bootstrapping RuntimeError (a storm of them) never came.
    assert "no_main_guard.py, line " in proc.stderr
    assert "bootstrapping phase" not in proc.stderr
    assert "RuntimeError" not in proc.stderr


@pytest.mark.parametrize("kind", ["pool", "runner"])
def test_a_missing_guard_is_named_when_the_fork_server_imports_the_script(kind):
    # Python 3.13.8 and 3.14.1 on: the fork server preloads __main__, so the
    # server, not a worker, runs the script's top level, exits, and the first
    # worker's start failed with the standard library's bare EOFError.
    if "forkserver" not in METHODS:
        pytest.skip("no forkserver on this platform")
    proc = run_script("no_main_guard.py", "forkserver", kind, "preloads", timeout=120)
    assert proc.returncode != 0
    assert "sum" not in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("easycore.common.parallel._os.startup.MainGuardError: "), proc.stderr
    assert "no_main_guard.py starts worker processes when it is imported" in last
    assert "the fork server imports it" in last and GUARD in last
    assert "no_main_guard.py, line " in proc.stderr  # the server said where, once
    assert "RuntimeError" not in proc.stderr


@pytest.mark.parametrize("kind", ["pool", "runner"])
def test_a_script_that_raises_in_the_fork_server_is_named(kind):
    # The sibling with a guard: the script's top level raises as the server
    # imports it; the server dies, and its first worker's start with it.
    if "forkserver" not in METHODS:
        pytest.skip("no forkserver on this platform")
    proc = run_script("raises_in_fork_server.py", kind, timeout=120)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("easycore.common.parallel._os.startup.ForkServerExited: "), \
        proc.stderr
    assert "could not start: the fork server (pid " in last and "exited with code 1" in last
    assert "raises_in_fork_server.py first" in last
    assert "ValueError: this script runs only as the main script" in proc.stderr  # the server's


@pytest.mark.parametrize("kind", ["pool", "runner"])
def test_fork_needs_no_guard(kind):
    # A forked worker never imports the script: the same script just works.
    if "fork" not in METHODS:
        pytest.skip("no fork on this platform")
    proc = run_script("no_main_guard.py", "fork", kind, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["sum", str(sum(x * x for x in range(20)))]


def test_the_error_is_a_worker_death_and_a_runtime_error():
    err = MainGuardError("cpu", 1, 1234, EXIT_NO_GUARD, method="forkserver")
    assert isinstance(err, WorkerDiedError) and isinstance(err, RuntimeError)
    assert err.exitcode == EXIT_NO_GUARD and err.worker_index == 1
    assert "'forkserver'" in str(err) and GUARD in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is MainGuardError and str(again) == str(err)
    by_server = MainGuardError("cpu", 0, None, EXIT_NO_GUARD, method="forkserver", by_server=True)
    again = pickle.loads(pickle.dumps(by_server))
    assert again.by_server and "the fork server imports it" in str(again)
    server = ForkServerExited("cpu", 1, 4321, 1)
    assert isinstance(server, WorkerDiedError) and server.server_pid == 4321
    again = pickle.loads(pickle.dumps(server))
    assert type(again) is ForkServerExited and str(again) == str(server)
