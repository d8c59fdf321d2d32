"""A fork pool's replacement worker (forked by the zygote) starts a subprocess;
the script then exits without closing the pool (argv[1] "forgotten") or
closes it ("closed"). The subprocess must go either way. Prints one JSON
line: the sleepers' pids (the first worker's, the replacement's), the
replacement's pid and its parent's."""

import json
import os
import signal
import subprocess
import sys

from easycore.common.parallel import Pool

_KEPT = []


def start_sleeper():
    _KEPT.append(subprocess.Popen(["sleep", "120"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL))


def sleeper_and_parent(_=None):
    return _KEPT[0].pid, os.getpid(), os.getppid()


if __name__ == "__main__":
    pool = Pool(1, start_method="fork", initializer=start_sleeper)
    first_sleeper, first, _ = pool.apply(sleeper_and_parent)
    os.kill(first, signal.SIGKILL)
    sleeper, worker, parent = pool.apply(sleeper_and_parent)
    print(json.dumps({"sleepers": [first_sleeper, sleeper], "worker": worker,
                      "parent": parent, "pid": os.getpid()}), flush=True)
    if sys.argv[1] == "closed":
        pool.close()
        pool.join()
    # "forgotten": no close(); the exit handlers must end the worker and its subprocess
