"""A fork pool in a fresh interpreter: when does the resource tracker start?

``small``: a pool of small items (no segment anywhere) then one big argument.
``results``: a pool whose results are big from the first call on (the workers
were forked before the caller had a tracker). Prints JSON: whether a tracker
process ran after each step, the results' checks, and this family's segments
still in /dev/shm after the pool closed.
"""

import json
import os
import sys

import numpy as np

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
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if ppid == me and b"resource_tracker" in cmdline:
            return True
    return False


def segments():
    prefix = f"ecp-{os.getpid():x}-"
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix))


def main(mode):
    report = {}
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
    report["left"] = segments()
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
