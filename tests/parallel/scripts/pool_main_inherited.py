"""Functions of __main__ under the start method given as argv[1]: inherited, and defined again.

Under ``fork`` the workers have this script's functions as they were when
the pool started: those go by reference, without a copy of their code (and
without importing cloudpickle). A function defined again since then (a
notebook cell run again) must run as it is now, not as the workers' old copy.
Prints one JSON line.
"""

import functools
import json
import sys

from easycore.common.parallel import JobQueue, Pool


def square(x):
    return x * x


def offset(x):
    return x + 100


def scale(x, k):
    return x * k


if __name__ == "__main__":
    report = {}
    method = sys.argv[1]
    with Pool(2, start_method=method) as pool, JobQueue(1, start_method=method) as jobs:
        report["map"] = pool.map(square, range(4))
        report["apply"] = [pool.apply(square, (k,)) for k in (5, 6)]
        jobs.put(square, 7)  # inside easycore's wrapper: the same rule
        report["jobqueue"] = jobs.get(timeout=60)
        report["partial"] = pool.map(functools.partial(scale, k=3), range(3))
        report["cloudpickle"] = "cloudpickle" in sys.modules
        exec("def square(x):\n    return -x\n", globals())
        exec("def scale(x, k):\n    return -x * k\n", globals())
        report["redefined"] = pool.map(square, range(4))
        report["redefined_apply"] = pool.apply(square, (5,))
        jobs.put(square, 7)
        report["redefined_jobqueue"] = jobs.get(timeout=60)
        report["redefined_partial"] = pool.map(functools.partial(scale, k=3), range(3))
        report["untouched"] = pool.map(offset, range(2))
    print(json.dumps(report))
