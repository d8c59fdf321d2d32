"""Starts a runner, prints its worker pids, then waits to be SIGKILLed.

argv: start method; "main" or "thread" (the thread that builds the runner,
a short-lived one for "thread"); "idle" (between calls) or "native" (every
worker busy in C code that holds the GIL, so no Python thread of the worker
can react: only the kernel can end it); a folder where each busy worker
writes a file named after its pid before it goes native.
"""

import json
import os
import sys
import threading
import time
from multiprocessing import forkserver, resource_tracker

from easycore.common.parallel import UnorderedRunner


class Native(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        with open(os.path.join(data, str(os.getpid())), "w"):
            pass
        return sum(range(10**12))  # minutes in one C call that never releases the GIL


if __name__ == "__main__":
    method, where, state, folder = sys.argv[1:5]
    made = {}

    def make():
        made["runner"] = Native(2, start_method=method)

    if where == "thread":
        t = threading.Thread(target=make)
        t.start()
        t.join()  # the thread that made the workers is gone before the parent dies
    else:
        make()
    runner = made["runner"]
    helpers = [resource_tracker._resource_tracker._pid]
    if method == "forkserver":
        helpers.append(forkserver._forkserver._forkserver_pid)
    print(json.dumps({"pids": runner.worker_pids, "helpers": [p for p in helpers if p]}),
          flush=True)
    if state == "native":
        runner([folder, folder])  # one item per worker; runs until killed
    else:
        time.sleep(600)
