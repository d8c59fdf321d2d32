"""Workers replaced under ``fork`` while the caller runs threads.

First a ``spawn`` pool made in a thread loses a worker: its workers are
started by easycore's launcher thread, which must be gone once they are, or
every later fork would come from a process with threads. Then, under
``fork``, a pool, a job queue and a background task each lose a worker (it
exits, or runs past ``task_timeout``) and get a replacement, then close. Prints one
JSON line: for each, the replacement's parent pid and what it answered. The
test runs this with every DeprecationWarning shown: CPython 3.12+ warns when
a process with threads forks, which the replacements must not do.
"""

import json
import os
import threading
import time

from easycore.common.parallel import BackgroundTask, JobQueue, Pool, WorkerDiedError

LOCK = threading.Lock()  # inherited by the workers, never pickled


def parent_and_lock(_=None):
    """The worker's parent pid, and whether it holds the caller's inherited lock."""
    return os.getppid(), isinstance(LOCK, type(threading.Lock()))


def die(_=None):
    os._exit(7)


def hang(_=None):
    time.sleep(600)


class Batches:
    """A background task's producer: the third batch kills its worker."""

    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        if self.calls == 3:
            os._exit(7)
        return parent_and_lock()


def spawn_pool_losing_a_worker(report):
    with Pool(1, start_method="spawn") as pool:
        try:
            pool.apply(die)
        except WorkerDiedError as err:
            report["spawn_exitcode"] = err.exitcode
        report["spawn_after"] = pool.apply(abs, (-3,))  # from the replacement


def main():
    report = {"pid": os.getpid()}
    thread = threading.Thread(target=spawn_pool_losing_a_worker, args=(report,))
    thread.start()
    thread.join()
    report["threads_after_spawn"] = [t.name for t in threading.enumerate()]
    # A closure in the initializer: only fork can hand it over (not picklable).
    seen = []
    with Pool(1, start_method="fork", initializer=lambda: seen.append(1)) as pool:
        for x in range(2):  # the second death is a replacement's: its exit code too
            try:
                pool.apply(die, (x,))
            except WorkerDiedError as err:
                report.setdefault("pool_exitcodes", []).append(err.exitcode)
        report["pool"] = pool.broadcast(parent_and_lock)
    with Pool(1, start_method="fork", task_timeout=0.5) as pool:
        try:
            pool.apply(hang)
        except TimeoutError as err:
            report["timeout_error"] = type(err).__name__
        report["timeout"] = pool.apply(parent_and_lock)
    with JobQueue(1, start_method="fork") as jobs:
        jobs.put(die)
        try:
            jobs.get(timeout=60)
        except WorkerDiedError as err:
            report["jobqueue_exitcode"] = err.exitcode
        jobs.put(parent_and_lock)
        report["jobqueue"] = jobs.get(timeout=60)
    with BackgroundTask(Batches(), workers=1, start_method="fork") as task:
        got = []
        for _ in range(4):
            try:
                got.append(task.get(timeout=60))
            except WorkerDiedError:
                got.append("died")
        report["background"] = got
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
