"""A worker SIGKILLed after its result segment's name was registered, before the segment exists.

argv[1]: the start method; argv[2]: "runner" (the call fails, the runner
closes), "pool" (the pool replaces the worker and goes on), "jobqueue" (a
JobQueue's job) or "background" (a BackgroundTask's worker); argv[3]: a path
that does not exist yet (one worker dies, the first to get there). Prints one
JSON line with what the caller saw; the test reads the resource tracker's
warnings from stderr, which the tracker writes when the whole process family
has exited.
"""

import json
import os
import signal
import sys

import numpy as np

from easycore.common.parallel import BackgroundTask, JobQueue, Pool, UnorderedRunner
from easycore.common.parallel.transport import shm

SMALL, BIG = 200_000, 2_000_000  # int64s: both in segments; no grant fits a BIG one


def die_as_it_makes_a_segment():
    """Die in the ``shm_open`` that makes its result's segment (or, under a reserved
    name, opens the caller's empty one to size it): the name is registered, no
    segment made. The result is the next thing this worker opens a segment for."""

    def shm_open(name, flags, mode=0o777):
        os.kill(os.getpid(), signal.SIGKILL)

    shm._posixshmem.shm_open = shm_open


def work(x):
    if x == 5:
        try:
            os.close(os.open(sys.argv[3], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return np.full(SMALL, x)  # a replacement: the death happened once
        die_as_it_makes_a_segment()
        return np.full(BIG, x)
    return np.full(SMALL, x)


class Arrays(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return work(data)

    @staticmethod
    def consumer_init(cfg):
        cfg.got = 0

    @staticmethod
    def consumer_work(cfg, data):
        cfg.got += 1

    @staticmethod
    def consumer_end(cfg):
        return cfg.got


class Batches:
    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return work(5 if self.calls == 3 else 0)


if __name__ == "__main__":
    method, kind = sys.argv[1], sys.argv[2]
    # A caller with a tracker from the start, so that every worker has names
    # before its first result (under fork the tracker otherwise starts once a
    # worker asks for names: test_shm_tracker_lazily.py).
    shm.ensure_tracker()
    report = {"kind": kind, "pid": os.getpid()}
    if kind == "runner":
        runner = Arrays(2, start_method=method)
        try:
            runner(range(10))
        except Exception as err:  # noqa: BLE001 -- reported to the test
            report["error"] = type(err).__name__
        report["closed"] = not runner.is_activate
    elif kind == "pool":
        with Pool(2, start_method=method) as pool:
            outcomes = []
            for r in [pool.apply_async(work, (x,)) for x in range(10)]:
                try:
                    outcomes.append(int(r.get(timeout=60)[0]))
                except Exception as err:  # noqa: BLE001 -- reported to the test
                    outcomes.append(type(err).__name__)
            report["outcomes"] = outcomes
            report["after"] = int(pool.apply(work, (1,))[0])  # a replacement took over
    elif kind == "jobqueue":
        with JobQueue(2, start_method=method) as jobs:
            outcomes = []
            for x in range(10):
                jobs.put(work, x)
            for _ in range(10):
                try:
                    outcomes.append(int(jobs.get(timeout=60)[0]))
                except Exception as err:  # noqa: BLE001 -- reported to the test
                    outcomes.append(type(err).__name__)
            report["outcomes"] = outcomes
            jobs.put(work, 1)
            report["after"] = int(jobs.get(timeout=60)[0])  # a replacement took over
    else:
        task = BackgroundTask(Batches(), workers=1, start_method=method)
        try:
            for _ in range(5):
                task.get(timeout=60)
        except Exception as err:  # noqa: BLE001 -- reported to the test
            report["error"] = type(err).__name__
        finally:
            task.shutdown()
    print(json.dumps(report), flush=True)
