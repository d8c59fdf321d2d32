"""Leaves a Pool open and exits (argv[1]: "quietly", or "raising" from inside a
failed call); the interpreter must still exit promptly, taking the workers and
their shared memory with it. Prints the workers' pids first."""

import json
import sys

import numpy as np

from easycore.common.parallel import Pool


def arrays(x):
    return np.full(100_000, x)


class Unpicklable:
    def __reduce__(self):
        raise TypeError("no pickling this")


def returns_unpicklable(x):
    return Unpicklable()


if __name__ == "__main__":
    pool = Pool(2)
    assert [int(a[0]) for a in pool.map(arrays, range(10))] == list(range(10))
    print(json.dumps({"pids": pool.worker_pids,
                      "prefix": pool._engine.backend.transport.prefix}), flush=True)
    if sys.argv[1] == "raising":
        pool.map(returns_unpicklable, range(4))  # raises; the pool stays open
    # no close(): the exit handlers must do it
