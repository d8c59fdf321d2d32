"""No leaks: processes, threads, shared memory; workers die with their parent; Ctrl-C."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time

import pytest
from _parallel_helpers import Arrays, SumSquares
from _parallel_support import (
    METHODS,
    SCRIPTS,
    descendants,
    run_script,
    shm_named,
    shm_segments,
    wait_gone,
)
from ctrl_c import ctrl_c_a_script

from easycore.common.config import CfgNode
from easycore.common.parallel.transport import shm

pytestmark = pytest.mark.timeout(120)

np = pytest.importorskip("numpy")


# --- NumPy results through shared memory ---------------------------------------
def test_arrays_arrive_intact_and_are_views_of_shared_memory(no_leaks):
    with Arrays(2, cfg=CfgNode({"n": 300_000})) as runner:  # 2.4 MB each
        kept = runner(range(40))
        # recycled segments must never be overwritten while an array views them
        again = runner(range(40, 80))
        for i, arr in enumerate(kept + again):
            assert arr.shape == (300_000,) and arr.dtype == np.float64
            assert arr[0] == arr[-1] == float(i)
            assert not arr.flags.owndata  # a view of the segment, not a copy
            assert arr.flags.writeable
    # closed: the names are gone from /dev/shm (no_leaks), the data still reads
    assert float(kept[3].sum()) == 3.0 * 300_000


def test_segments_are_recycled_so_their_number_stays_bounded(no_leaks):
    before = set(shm_segments())
    with DropArrays(2, cfg=CfgNode({"n": 200_000})) as runner:
        for _ in range(3):
            assert runner(range(200)) == sum(range(200))
        live = len(set(shm_segments()) - before)
    # without recycling every one of the 600 results would have its own segment
    assert live <= 2 * (3 + 4 + 2), live


class DropArrays(Arrays):
    @staticmethod
    def consumer_init(cfg):
        cfg.total = [0]

    @staticmethod
    def consumer_work(cfg, data):
        cfg.total[0] += int(data[0])

    @staticmethod
    def consumer_end(cfg):
        return cfg.total[0]


def test_small_arrays_and_mixed_results_travel_in_band(no_leaks):
    with Arrays(2, cfg=CfgNode({"n": 10})) as runner:
        out = runner(range(100))
    assert [a[0] for a in out] == [float(i) for i in range(100)]


def test_numpy_is_not_imported_when_results_hold_no_arrays():
    code = (
        "import sys\n"
        "from _parallel_helpers import SumSquares\n"
        "with SumSquares(2) as r:\n"
        "    assert r(range(1000)) == sum(x * x for x in range(1000))\n"
        "print('numpy' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
        cwd=os.path.dirname(os.path.dirname(__file__)),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


# --- many runners, no growth ---------------------------------------------------
def test_repeated_runners_leave_nothing_behind(no_leaks):
    for _ in range(5):
        with SumSquares(2) as runner:
            assert runner(range(1000)) == sum(x * x for x in range(1000))


def test_a_dropped_runner_is_cleaned_up_when_garbage_collected(no_leaks):
    runner = SumSquares(2)
    assert runner(range(10)) == 285
    pids = runner.worker_pids
    del runner  # no close(): the back-end's finalizer kills and reaps the workers
    gc.collect()
    assert wait_gone(pids, 10) == []


def test_exiting_without_close_does_not_hang_or_leak():
    start = time.monotonic()
    proc = run_script("forgotten_close.py", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - start < 30
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert wait_gone(info["pids"], 10) == []
    assert shm_named(info["prefix"]) == []
    assert "leaked" not in proc.stderr and "Traceback" not in proc.stderr



@pytest.mark.parametrize("how", ["end", "raise"])
@pytest.mark.parametrize("kind", ["pool", "background", "jobqueue"])
def test_exiting_with_a_stream_left_open_does_not_hang_or_leak(kind, how):
    # Their coordinator threads are daemons: frozen at interpreter shutdown,
    # perhaps holding the engine's locks, which a close from __del__ then needs.
    proc = run_script("forgotten_streams.py", kind, how, timeout=30)
    assert proc.returncode == (0 if how == "end" else 1), proc.stderr
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert wait_gone(info["pids"], 10) == []
    assert shm_named(info["prefix"]) == []
    assert "leaked" not in proc.stderr
    if how == "raise":
        assert "RuntimeError: the script failed" in proc.stderr

# --- the parent dies -------------------------------------------------------------
@pytest.mark.parametrize(
    "method, mode",
    [(m, "idle") for m in METHODS] + [(METHODS[0], "busy"), (METHODS[0], "thread")]
    + ([("forkserver", "busy")] if "forkserver" in METHODS else []),
)
def test_workers_exit_when_the_parent_is_sigkilled(method, mode):
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "parent_killed.py"), method, mode],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(SCRIPTS),
    )
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        info = json.loads(line)
        assert len(info["pids"]) == 2 and all(info["pids"])
        if mode == "busy":
            assert _wait_for_shm(info["prefix"], 30), "no result in flight yet"
        family = descendants(proc.pid)  # with the helpers started after the print
        proc.kill()  # SIGKILL: no cleanup code of the parent runs
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
        proc.stderr.close()
    assert wait_gone(info["pids"], 10) == [], "workers outlived their parent"
    # the resource tracker (and forkserver) follow once the workers are gone,
    # and the tracker removes shared memory that was in flight
    assert wait_gone(info["helpers"] + family, 20) == []
    assert shm_named(info["prefix"]) == []


def _wait_for_shm(prefix: str, timeout: float) -> bool:
    """Until a segment of ``prefix`` holds memory (names the caller reserved for
    its workers' segments are there, empty, from the start)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(shm.made("/" + name) for name in shm_named(prefix)):
            return True
        time.sleep(0.02)
    return False


# --- Ctrl-C ----------------------------------------------------------------------
@pytest.mark.parametrize("target", ["group", "parent"])
def test_ctrl_c_during_a_call_cleans_up_everything(target):
    out, err = ctrl_c_a_script(SCRIPTS / "ctrl_c.py", [METHODS[0]], group=target == "group")
    report = json.loads(out.strip().splitlines()[-1])
    assert report["caught"] is True
    assert report["is_activate"] is False
    assert report["workers_alive"] == [] and report["children"] == []
    assert report["threads"] == []
    assert report["shm"] == []
    assert "KeyboardInterrupt" not in err  # workers ignore SIGINT; no stray tracebacks


def test_script_helper_runs(tmp_path):
    # run_script is what the start-method tests rely on; make sure it fails loudly
    proc = run_script("main_defined.py", "not-a-method", timeout=60)
    assert proc.returncode != 0 and "not-a-method" in proc.stderr
