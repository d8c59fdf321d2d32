"""Starts a runner, prints its worker pids, then waits to be SIGKILLed.

argv: start method, then "idle" (between calls), "busy" (in a call whose
results travel through shared memory) or "thread" (runner created in a
non-main thread, so only the portable lifeline applies).
"""

import json
import sys
import threading
import time
from multiprocessing import forkserver, resource_tracker

from easycore.common.parallel import UnorderedRunner


class Slow(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        import numpy as np

        time.sleep(0.01)
        return np.zeros(50_000)  # 400 kB: travels through shared memory

    @staticmethod
    def consumer_init(cfg):
        cfg.kept = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.kept.append(data)  # hold segments, so some are in use when killed


if __name__ == "__main__":
    method, mode = sys.argv[1], sys.argv[2]
    made = {}

    def make():
        made["runner"] = Slow(2, start_method=method)

    if mode == "thread":
        t = threading.Thread(target=make)
        t.start()
        t.join()
    else:
        make()
    runner = made["runner"]
    helpers = [resource_tracker._resource_tracker._pid]
    if method == "forkserver":
        helpers.append(forkserver._forkserver._forkserver_pid)
    info = {
        "pids": runner.worker_pids,
        "helpers": [p for p in helpers if p],
        "prefix": runner._engine.backend.transport.prefix,
    }
    print(json.dumps(info), flush=True)
    if mode == "busy":
        runner(iter(lambda: 1, 0))  # endless: runs until killed
    else:
        time.sleep(600)
