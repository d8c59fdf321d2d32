"""A fork pool or runner in a fresh interpreter with NumPy loaded: does each first
worker find the caller's thread-pool scan current (a length comparison), or
must it walk ``sys.modules`` for what was imported since?

Prints JSON: per worker, whether its check of the inherited scan found it
current.
"""

import json
import os
import sys

import numpy as np  # noqa: F401 -- a BLAS runtime to limit

from easycore.common.parallel import Pool, UnorderedRunner
from easycore.common.parallel._os import threads

_CHECKS = []  # (pid, whether the scan was current) per check of the inherited scan
_still_valid = threads._still_valid


def recording_still_valid(scanned):
    _CHECKS.append((os.getpid(), scanned is not None and len(sys.modules) == len(scanned[0])))
    return _still_valid(scanned)


def checks(_=None):
    """This worker's checks (not the caller's, inherited with the list)."""
    return [current for pid, current in _CHECKS if pid == os.getpid()][:1]


class Checks(UnorderedRunner):
    """Each worker's checks, gathered by the consumer."""

    producer_work = staticmethod(lambda device, cfg, data: checks())

    @staticmethod
    def consumer_init(cfg):
        cfg.found = []

    @staticmethod
    def consumer_work_batch(cfg, batch):
        cfg.found.extend(batch)

    consumer_end = staticmethod(lambda cfg: list(cfg.found))


if __name__ == "__main__":
    threads._still_valid = recording_still_valid  # the workers inherit it
    if sys.argv[1] == "pool":
        with Pool(2, start_method="fork", cpu_threads=1) as pool:
            out = pool.map(checks, range(2), chunksize=1)
    else:
        with Checks(2, start_method="fork", cpu_threads=1) as runner:
            out = runner(range(2))
    print(json.dumps(out))
