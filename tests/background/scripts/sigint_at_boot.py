"""Ctrl-C landing in a worker while it boots (issue 20 item 26); prints JSON.

A multiprocessing after-fork hook registered at import (it runs in forked
workers and in the fork server's children), and in a spawned worker the
import of this file, send SIGINT to the booting worker itself, before
easycore's worker code runs: a terminal's Ctrl-C during a Pool's or BackgroundTask's start, made
deterministic. The workers must come up anyway (no ``WorkerDiedError``).
"""

import json
import os
import signal
import sys
from multiprocessing import util

from easycore.common.parallel import BackgroundTask, JobQueue, Pool, WorkerDiedError


class _Hook:
    pass


_HOOK = _Hook()


def _ctrl_c_at_boot(_):
    if os.environ.get("EC_SIGINT_AT_BOOT") == "1":
        os.kill(os.getpid(), signal.SIGINT)


util.register_after_fork(_HOOK, _ctrl_c_at_boot)  # fork, and the fork server's children
if __name__ == "__mp_main__" and sys.argv[:1] != ["-c"]:
    # A spawned worker importing this file before it runs anything (not the
    # fork server, which imports it too, as ``-c``).
    _ctrl_c_at_boot(None)


def double(x):
    return 2 * x


def seven():
    return 7


if __name__ == "__main__":
    method = sys.argv[1]
    os.environ["EC_SIGINT_AT_BOOT"] = "1"  # inherited by every worker from now on
    out = {}

    def attempt(name, make):
        try:
            out[name] = make()
        except WorkerDiedError as exc:
            out[name] = f"died: {exc}"

    def pool():
        with Pool(2, start_method=method) as p:
            return p.map(double, range(4))

    def background():
        with BackgroundTask(seven, workers=2, start_method=method) as bg:
            return bg.get(timeout=60)

    def jobqueue():
        with JobQueue(workers=1, start_method=method) as q:
            q.put(double, 21)
            return q.get(timeout=60)

    attempt("pool", pool)
    attempt("background", background)
    attempt("jobqueue", jobqueue)
    print(json.dumps(out))
