"""A fork pool in a fresh interpreter: when does the resource tracker start?

``small``: a pool of small items (no segment anywhere) then one big argument.
``results``: a pool whose results are big from the first call on (the workers
were forked before the caller had a tracker). Prints JSON: whether a tracker
process ran after each step, the results' checks, and this process's pid
(the test lists the segments it left in /dev/shm once it ended).
"""

import contextlib
import json
import os
import sys

import numpy as np
import psutil

from easycore.common.parallel import Pool
from easycore.common.parallel.transport import shm

SIZE = 256 * 1024  # float64s: 2 MiB per result, over the in-band threshold


def square(x):
    return x * x


def filled(i):
    return np.full(SIZE, float(i))


def total(a):
    return float(a.sum())


def tracker_running():
    """Whether a child of this process runs the resource tracker."""
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):  # gone meanwhile: not running
            if "resource_tracker" in " ".join(child.cmdline()):
                return True
    return False


def main(mode):
    report = {"pid": os.getpid()}
    with Pool(2, start_method="fork") as pool:
        if mode == "small":
            report["sum"] = sum(pool.map(square, range(200)))
            report["tracker_after_small"] = tracker_running() or shm.has_tracker()
            report["big_arg"] = pool.apply(total, (np.ones(SIZE),))
            report["tracker_after_big"] = tracker_running() and shm.has_tracker()
        else:
            checks = []
            for _ in range(3):  # calls: the names a worker asked for serve the next ones
                out = pool.map(filled, range(12), chunksize=1)
                checks.append(all(a.shape == (SIZE,) and a[0] == i == a[-1]
                                  for i, a in enumerate(out)))
                del out
            report["results_right"] = checks
            caller = pool._backend.transport._caller
            report["asked"] = sorted(caller.want_names)
            report["in_segments"] = sorted(caller.big_results)
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
