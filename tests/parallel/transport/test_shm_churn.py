"""Shared-memory names under churn (issue 20 item 9).

Services, runners and pools started and closed in overlapping cycles under
every start method never remove each other's segments, leave none behind,
and the resource tracker has nothing to complain about at exit. A worker
that cannot open a segment says which one vanished.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
from multiprocessing import util
from pathlib import Path

import pytest

from easycore.common.config import CfgNode
from easycore.common.parallel import UnorderedRunner, WorkerError
from easycore.common.parallel.transport import shm

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "shm_churn.py"


@pytest.mark.timeout(900)
def test_start_close_cycles_interleaved_never_share_or_leave_a_segment():
    env = dict(os.environ)
    env.setdefault("EASYCORE_SHM_CHURN_CYCLES", "60")  # 200 for the stress run
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                          timeout=850, env=env, start_new_session=True)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"failures": [], "left": []}
    # The tracker unlinks at exit only what its owner forgot, and says so.
    assert "resource_tracker" not in proc.stderr, proc.stderr
    assert "FileNotFoundError" not in proc.stderr, proc.stderr


def test_opening_a_removed_segment_says_which_one_vanished():
    name = f"/{shm.make_prefix('ecp')}c1"
    shm.create(name, 4096).close()
    shm.release(name)
    with pytest.raises(FileNotFoundError) as info:
        shm.open_existing(name, 4096)
    assert isinstance(info.value, shm.SegmentVanished)
    message = str(info.value)
    assert repr(name) in message and "vanished" in message
    assert f"owned by pid {os.getpid()}" in message


class _Owner:
    """Holds whose segments a forked worker removes; while it lives."""

    def __init__(self, pid: int) -> None:
        self.pid = pid


def _remove_segments_at_boot(owner: _Owner) -> None:
    """An after-fork hook: the forked worker removes its runner's segments (the
    cfg's) before it opens them (what another process deleting /dev/shm entries
    does)."""
    for entry in os.listdir("/dev/shm"):
        # ecp-<pid>-...: easycore-parallel's; ect-<pid>-... once torch is loaded
        # (the default policy then moves tensors with easycore-torch's transport)
        if entry.startswith("ec") and entry.split("-")[1:2] == [f"{owner.pid:x}"]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/dev/shm/{entry}")


class _Echo(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return data


def test_a_worker_whose_segment_vanished_names_it(no_leaks):
    owner = _Owner(os.getpid())
    # The registry holds `owner` weakly (and the function, a module global,
    # strongly): the hook is gone with `owner`, for every later fork.
    util.register_after_fork(owner, _remove_segments_at_boot)
    cfg = CfgNode({"table": bytearray(1 << 20)})  # big: the workers map its segment
    try:
        with pytest.raises(WorkerError) as info, _Echo(devices=1, cfg=cfg,
                                                        start_method="fork") as runner:
            runner([1])
    finally:
        del owner
        gc.collect()
    assert not any(f is _remove_segments_at_boot for _, _, f in list(util._afterfork_registry))
    message = str(info.value)
    assert "vanished" in message and "the cfg" in message and "'/ec" in message
