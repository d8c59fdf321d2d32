"""A call interrupted by Ctrl-C: prints whether everything was cleaned up.

The test sends SIGINT (to the process group, like a terminal, or to this
process only) once a worker printed "working".
"""

import faulthandler
import json
import os
import sys
import threading
import time

import psutil

from easycore.common.parallel import UnorderedRunner


class Slow(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        import numpy as np

        if data == 0:
            print("working", flush=True)
        time.sleep(0.005)
        return np.ones(20_000)  # 160 kB: shared memory in flight when interrupted


def helper(proc):
    try:
        cmd = " ".join(proc.cmdline())
    except psutil.Error:
        return False
    return "resource_tracker" in cmd or "forkserver" in cmd


if __name__ == "__main__":
    # A hang shows where it waits (the test waits 60 s for this script).
    faulthandler.dump_traceback_later(45, exit=True)
    runner = Slow(2, start_method=sys.argv[1])
    prefix = runner._engine.backend.transport.prefix
    pids = runner.worker_pids
    caught = False
    start = time.monotonic()
    try:
        runner(range(10**9))
    except KeyboardInterrupt:
        caught = True
    elapsed = time.monotonic() - start
    children = [p.pid for p in psutil.Process().children(recursive=True) if not helper(p)]
    shm = [f for f in os.listdir("/dev/shm") if f.startswith(prefix)]
    print(json.dumps({
        "caught": caught,
        "elapsed": elapsed,
        "is_activate": runner.is_activate,
        "workers_alive": [p for p in pids if psutil.pid_exists(p)
                          and psutil.Process(p).status() != psutil.STATUS_ZOMBIE],
        "children": children,
        "threads": [t.name for t in threading.enumerate() if t is not threading.main_thread()],
        "shm": shm,
    }), flush=True)
