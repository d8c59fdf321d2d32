"""The caller is SIGKILLed just as a worker makes its result's segment, under ``fork``.

argv[1]: a folder that exists. The pool's workers are forked before the
caller's resource tracker starts, so they do not hold its pipe: once the
caller is gone, the tracker removes every name the caller registered, the
names it reserved for its workers' segments among them, and exits. The first
worker to make a segment after item ``ARM`` then kills its caller (and its
zygote, which would kill it on seeing the caller gone), waits for the tracker
to be gone, and only then lets ``shm_open`` run: the widest the window ever
is (the kernel's parent-death signal, turned off here, otherwise kills the
worker a moment after). It writes what ``shm_open`` did to ``outcome-<pid>``
in the folder and exits.

Prints one JSON line (the caller's pid) before the call that gets it killed.
"""

import contextlib
import ctypes
import json
import os
import signal
import sys
import time

import numpy as np
import psutil

from easycore.common.parallel import Pool
from easycore.common.parallel._os import lifeline
from easycore.common.parallel.transport import shm

ARM = 10
SMALL, BIG = 200_000, 2_000_000  # int64s: both in segments; no grant fits a BIG one
FOLDER = sys.argv[1]


def _gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def kill_the_caller_as_it_makes_a_segment():
    real = shm._posixshmem.shm_open

    def shm_open(name, flags, mode=0o777):
        parts = name.lstrip("/").split("-")
        if len(parts) < 4 or not parts[3].startswith("w"):
            return real(name, flags, mode=mode)  # not a segment of a worker's own
        with open(os.path.join(FOLDER, "info.json")) as f:
            info = json.load(f)
        ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG off: outlive the caller
        lifeline.parent_gone = lambda expected_ppid: False  # and its watchdog
        # The zygote that forked this worker kills its workers when it sees its
        # caller's end of their socket close, which can come before its own
        # parent-death signal: it goes first, while the caller is stopped (a caller
        # that saw its zygote die would kill the workers too).
        caller, parent = info["caller"], os.getppid()
        with contextlib.suppress(ProcessLookupError):  # (the other worker was first)
            os.kill(caller, signal.SIGSTOP)
            if parent != caller:
                os.kill(parent, signal.SIGKILL)
            os.kill(caller, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while not _gone(info["tracker"]) and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            os.close(real(name, flags, mode=mode))
            outcome = "made"
        except OSError as exc:
            outcome = type(exc).__name__
        with open(os.path.join(FOLDER, f"outcome-{os.getpid()}"), "w") as f:
            f.write(outcome)
        os._exit(0)

    shm._posixshmem.shm_open = shm_open


def work(x):
    if x >= ARM:
        kill_the_caller_as_it_makes_a_segment()
        return np.zeros(BIG)
    return np.zeros(SMALL)


if __name__ == "__main__":
    with Pool(2, start_method="fork") as pool:
        pool.map(work, [0, 0], 1)  # both workers forked: the tracker starts after them
        shm.ensure_tracker()
        info = {"caller": os.getpid(), "tracker": shm.resource_tracker._resource_tracker._pid}
        with open(os.path.join(FOLDER, "info.json"), "w") as f:
            json.dump(info, f)
        print(json.dumps(info), flush=True)
        pool.map(work, range(1, 40), 1)  # killed during this
    print("not killed", flush=True)
