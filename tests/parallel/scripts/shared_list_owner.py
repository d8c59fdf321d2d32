"""Makes a SharedList, starts a reader of it, then waits to be SIGKILLed.

argv[1]: the reader's start method. Prints one JSON line once the reader has
read: the segment's name, the owner's, the reader's and the resource tracker's
pids.
"""

import json
import multiprocessing
import os
import sys
import time
from multiprocessing import resource_tracker

from easycore.common.parallel import SharedList


def read_forever(items, ready):
    assert items[-1] == {"id": len(items) - 1}
    ready.set()
    while True:
        sum(item["id"] for item in items)
        time.sleep(0.01)


if __name__ == "__main__":
    ctx = multiprocessing.get_context(sys.argv[1])
    items = SharedList({"id": i} for i in range(10_000))
    ready = ctx.Event()
    reader = ctx.Process(target=read_forever, args=(items, ready), daemon=True)
    reader.start()
    if not ready.wait(60):
        sys.exit("the reader did not start")
    print(json.dumps({"name": items._segment.name.lstrip("/"), "owner": os.getpid(),
                      "reader": reader.pid,
                      "tracker": resource_tracker._resource_tracker._pid}), flush=True)
    time.sleep(600)
