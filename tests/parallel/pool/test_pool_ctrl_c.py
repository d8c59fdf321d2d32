"""Ctrl-C during a Pool call: ``KeyboardInterrupt`` at once, and the pool still serves.

In this process (SIGINT to the main thread from another thread, once the
call is under way) and in a script whose whole process group gets SIGINT,
as from a terminal.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import threading
import time

import pytest
from _parallel_support import METHODS, SCRIPTS
from _pool_funcs import announce_and_nap, announce_then_block, nap, square, wait_for_file
from ctrl_c import ctrl_c_a_script, needs_python_sigint_handler

from easycore.common.parallel import Pool

pytestmark = [pytest.mark.timeout(120), needs_python_sigint_handler]

WAIT = 30
SLACK = 5.0  # "promptly": far below the seconds the interrupted call had left


class _CtrlC:
    """Sends SIGINT to this process once ``path`` exists; notes when it did."""

    def __init__(self, path):
        self.sent_at = None
        self.thread = threading.Thread(target=self._run, args=(path,))
        self.thread.start()

    def _run(self, path):
        wait_for_file(path, WAIT)
        self.sent_at = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)

    def join(self):
        self.thread.join(WAIT + 5)
        assert not self.thread.is_alive()


def test_ctrl_c_during_map_raises_keyboardinterrupt_and_the_pool_serves_on(tmp_path, no_leaks):
    with Pool(2) as pool:
        before = pool.worker_pids
        task = functools.partial(announce_and_nap, folder=str(tmp_path), seconds=0.05)
        ctrl_c = _CtrlC(tmp_path / "0.started")
        try:
            with pytest.raises(KeyboardInterrupt):
                pool.map(task, range(2000), 1)  # 50 s of work: it cannot end first
            interrupted_at = time.monotonic()
        finally:
            ctrl_c.join()
        assert interrupted_at - ctrl_c.sent_at < SLACK
        assert pool.map(square, range(5)) == [0, 1, 4, 9, 16]
        assert pool.worker_pids == before
        # The interrupted call sends nothing more: only what was in flight ran.
        started = len(list(tmp_path.glob("*.started")))
        assert started < 100


@pytest.mark.parametrize("call", ["apply", "imap", "get"])
def test_ctrl_c_while_waiting_in_any_blocking_call(call, tmp_path, no_leaks):
    with Pool(1) as pool:
        ctrl_c = _CtrlC(tmp_path / "0")
        block = functools.partial(announce_then_block, folder=str(tmp_path), seconds=1.0)
        try:
            with pytest.raises(KeyboardInterrupt):
                if call == "apply":
                    pool.apply(block, (0,))
                elif call == "imap":
                    list(pool.imap(block, range(3)))
                else:
                    pool.apply_async(block, (0,)).get(timeout=WAIT)
        finally:
            ctrl_c.join()
        # The blocked task finishes (1 s) and the pool takes the next call.
        assert pool.apply(square, (6,)) == 36


@pytest.mark.parametrize("method", [m for m in METHODS if m in ("fork", "spawn")])
def test_ctrl_c_from_a_terminal_to_the_whole_process_group(method):
    # The script prints its threads' stacks and exits if it still runs after 45 s.
    out, err = ctrl_c_a_script(SCRIPTS / "pool_ctrl_c.py", [method])
    report = json.loads(out.strip().splitlines()[-1])
    assert report == {
        "caught": True,
        "same_workers": True,  # the workers ignored the group's SIGINT
        "after": [3, 2, 1],
        "children": [],
        "threads": [],
        "shm": [],
    }
    assert "KeyboardInterrupt" not in err


def _ctrl_c_as_submit_returns(frame, event, arg):
    """A trace function: a KeyboardInterrupt raised as ``Pool._submit`` returns, the
    moment between a job's submission and the wait for its result."""
    if event == "call" and frame.f_code is Pool._submit.__code__:
        def on_return(frame, event, arg):
            if event == "return":
                raise KeyboardInterrupt
            return on_return

        return on_return
    return None


@pytest.mark.parametrize("call", ["map", "starmap"])
def test_a_ctrl_c_between_submitting_and_waiting_cancels_the_job(call, no_leaks):
    # The job's 2,000 items of 50 ms would keep the workers busy for 50 s: a job
    # left running there held the pool's next calls (and its join) until its
    # result was garbage-collected.
    with Pool(2) as pool:
        sys.settrace(_ctrl_c_as_submit_returns)
        try:
            with pytest.raises(KeyboardInterrupt):
                if call == "map":
                    pool.map(nap, [0.05] * 2000, 1)
                else:
                    pool.starmap(nap, [(0.05,)] * 2000, 1)
        finally:
            sys.settrace(None)
        assert pool.map(square, range(3)) == [0, 1, 4]
        pool.close()
        joiner = threading.Thread(target=pool.join)
        joiner.start()
        joiner.join(WAIT)
        assert not joiner.is_alive(), "the interrupted job ran on"
