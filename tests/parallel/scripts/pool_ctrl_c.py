"""Ctrl-C during Pool.map (argv[1]: the start method); prints what the test checks.

The test sends SIGINT to this process's group (as a terminal does) once a
worker printed "working". The interrupted call raises KeyboardInterrupt, the
workers (which ignore SIGINT) keep serving the next call, and close/join
leave nothing behind.
"""

import faulthandler
import json
import os
import sys
import threading
import time

import psutil

from easycore.common.parallel import Pool


def slow(x):
    if x == 0:
        print("working", flush=True)
    time.sleep(0.05)
    return x


def helper(proc):
    try:
        cmd = " ".join(proc.cmdline())
    except psutil.Error:
        return False
    return "resource_tracker" in cmd or "forkserver" in cmd


if __name__ == "__main__":
    # A hang shows where it waits (the test waits 60 s for this script).
    faulthandler.dump_traceback_later(45, exit=True)
    pool = Pool(2, start_method=sys.argv[1])
    pids = pool.worker_pids
    prefix = pool._engine.backend.transport.prefix
    caught = False
    try:
        pool.map(slow, range(10**5), 1)
    except KeyboardInterrupt:
        caught = True
    report = {"caught": caught, "same_workers": pool.worker_pids == pids}
    report["after"] = pool.map(abs, range(-3, 0))
    pool.close()
    pool.join()
    report["children"] = [p.pid for p in psutil.Process().children(recursive=True)
                          if not helper(p)]
    report["threads"] = [t.name for t in threading.enumerate()
                         if t is not threading.main_thread()]
    report["shm"] = [f for f in os.listdir("/dev/shm") if f.startswith(prefix)]
    print(json.dumps(report), flush=True)
