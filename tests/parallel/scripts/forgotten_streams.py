"""Leaves a Pool, a BackgroundTask or a JobQueue open and ends, normally or by
an uncaught exception: the interpreter must still exit promptly (their pump
threads are daemons, frozen at shutdown perhaps holding the engine's locks),
taking the workers and their shared memory with it.

Usage: forgotten_streams.py {pool,background,jobqueue} {end,raise}
"""

import json
import sys

from easycore.common.parallel import BackgroundTask, JobQueue, Pool


def one():
    return 1


def square(x):
    return x * x


if __name__ == "__main__":
    kind, how = sys.argv[1], sys.argv[2]
    if kind == "pool":
        obj = Pool(2)
        assert obj.map(square, range(10)) == [x * x for x in range(10)]
        backend = obj._backend
    elif kind == "background":
        obj = BackgroundTask(one, workers=2, prefetch=2)
        assert obj.get(timeout=30) == 1
        backend = obj._pool._backend
    else:
        obj = JobQueue(2)
        obj.put(square, 3)
        assert obj.get(timeout=30) == 9
        backend = obj._pool._backend
    print(json.dumps({"pids": backend.pids, "prefix": backend.transport.prefix}), flush=True)
    if how == "raise":
        raise RuntimeError("the script failed")  # no close(): the exit handlers must do it
