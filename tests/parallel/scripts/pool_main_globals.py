"""multiprocessing.Pool's idioms with functions of __main__, under argv[1]'s
start method: an initializer that sets a module global the task reads, a
task using a global that cannot be pickled (a lock), and a lambda. Prints one
JSON line."""

import json
import sys
import threading

from easycore.common.parallel import Pool

STATE = None
LOCK = threading.Lock()


def init(value):
    global STATE
    STATE = value


def read_state(x):
    return STATE, x


def locked(x):
    with LOCK:
        return x + 1


if __name__ == "__main__":
    method = sys.argv[1]
    with Pool(2, initializer=init, initargs=(42,), start_method=method) as pool:
        report = {
            "state": pool.map(read_state, range(4)),
            "locked": pool.map(locked, range(4)),
            "lambda": pool.map(lambda x: x * 3, range(4)),  # only by value
        }
    print(json.dumps(report))
