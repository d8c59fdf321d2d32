"""Code written in ``__main__`` runs in the pool's workers under every start method.

Lambdas, closures, local functions, functions and classes of a script (as
tasks, items and results), an initializer setting a global that tasks read
(the stdlib's pattern), and the same from a notebook-like script piped to
``python -``. Each case runs in a fresh interpreter (a script), so that its
``__main__`` is the user's.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _parallel_support import METHODS, SCRIPTS, run_script, shm_named
from processes import wait_gone

pytestmark = pytest.mark.timeout(180)


def _report(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("method", METHODS)
def test_lambdas_closures_and_main_classes_in_a_script(method):
    report = _report(run_script("pool_main.py", method, timeout=120))
    assert report == {
        "lambda": [100, 101, 102, 103],
        "closure": [100, 101, 102],
        "local": [100, 101, 104],
        "starmap_lambda": [6, 20],
        "callable_instance": [0, 3, 6],
        # __main__ classes in and out: the caller gets its own classes back
        "classes": [[True, True, 1, 2, 3], [True, True, 3, 4, 7]],
        "apply_async": 6,
        "submit": 104,
        "initializer": ["ready"],
        "broadcast_pids_match": True,
        "defined_late": [0, -1, -2],
        "unordered": [0, 2, 4, 6, 8],
    }


@pytest.mark.parametrize("method", METHODS)
def test_functions_of_main_inherited_and_defined_again(method):
    report = _report(run_script("pool_main_inherited.py", method, timeout=120))
    assert report["map"] == [0, 1, 4, 9] and report["apply"] == [25, 36]
    assert report["jobqueue"] == 49 and report["partial"] == [0, 3, 6]
    # Inherited by forked workers, defined again by spawned ones as they import
    # the script: by reference, no copy of the code to make.
    assert report["cloudpickle"] is False
    # Defined again after the workers started: the new code runs, not their copy,
    # also inside a wrapper (a JobQueue's call, a partial).
    assert report["redefined"] == [0, -1, -2, -3] and report["redefined_apply"] == -5
    assert report["redefined_jobqueue"] == -7
    assert report["redefined_partial"] == [0, -3, -6]
    assert report["untouched"] == [100, 101]


@pytest.mark.parametrize("how", ["file", "module"])
@pytest.mark.parametrize("method", METHODS)
def test_functions_of_a_script_wherever_they_are_defined(method, how):
    script = "pool_main_rerun.py"
    if how == "file":
        proc = run_script(script, method, timeout=120)
    else:  # python -m: the workers import it again by name
        proc = subprocess.run([sys.executable, "-m", script[:-3], method], capture_output=True,
                              text=True, timeout=120, cwd=str(SCRIPTS))
    report = _report(proc)
    assert report["runner"] == [0, 3, 6]
    # The runner's class: inherited under fork; a spawned worker defines it
    # again, which this process can tell where Python says where the class
    # statement is (3.13+): by reference alone then, without cloudpickle.
    assert report["cloudpickle_runner"] is (method != "fork" and sys.version_info < (3, 13))
    assert report["top"] == [0, 2, 4] and report["top_apply"] == 8
    assert report["cached"] is True
    # Top-level functions: forked workers have them, spawned ones define them again.
    assert report["cloudpickle"] is False
    assert report["decorated"] == [1000, 1001]
    assert report["in_a_block"] == [0, 3, 6]
    assert report["guarded"] == [0, 5, 10]
    assert report["guarded_runner"] == [0, -3, -6]


def test_functions_of_a_package_run_with_dash_m_go_by_value_too(tmp_path):
    # python -m package runs package/__main__.py, which spawned workers do not
    # import again: its top-level functions are not there by reference.
    package = tmp_path / "rerun_package"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(
        "import json, sys\n"
        "from easycore.common.parallel import Pool\n"
        "def top(x):\n"
        "    return x * 2\n"
        "if __name__ == '__main__':\n"
        "    with Pool(2, start_method='spawn') as pool:\n"
        "        print(json.dumps(pool.map(top, range(3))))\n")
    proc = subprocess.run([sys.executable, "-m", "rerun_package"], capture_output=True,
                          text=True, timeout=120, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [0, 2, 4]


@pytest.mark.parametrize("method", [*METHODS, "forkserver-preloading-main"])
def test_a_notebook_like_script_read_from_stdin(method):
    # "forkserver-preloading-main": a fork server that imports __main__ before it
    # forks any worker (Python 3.13.8 and 3.14.1 on) must not be handed "<stdin>"
    # either (it died, and every worker's start with it).
    extra = []
    if method == "forkserver-preloading-main":
        if "forkserver" not in METHODS:
            pytest.skip("no forkserver on this platform")
        method, extra = "forkserver", ["preloads"]
    source = (SCRIPTS / "pool_notebook.py").read_text()
    proc = subprocess.run(
        [sys.executable, "-", method, *extra], input=source, capture_output=True, text=True,
        timeout=120, cwd=str(SCRIPTS),
    )
    report = _report(proc)
    assert report["classes"] == [True, True]
    assert report["calibrated"] == [["A", 3.0], ["B", -0.5]]
    assert report["threshold"] == [True, False]
    assert report["lambda"] == ["AA", "BB"]
    assert report["apply"] is True
    assert wait_gone(report["pids"]) == []


@pytest.mark.parametrize("how", ["quietly", "raising"])
def test_a_script_that_never_closes_its_pool_exits_and_leaves_nothing(how):
    proc = run_script("pool_forgotten.py", how, timeout=60)  # a hang fails here
    info = json.loads(proc.stdout.strip().splitlines()[0])
    if how == "quietly":
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode == 1 and "no pickling this" in proc.stderr
    assert wait_gone(info["pids"], 10) == []
    assert shm_named(info["prefix"]) == []
