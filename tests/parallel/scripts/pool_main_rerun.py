"""Functions of a main script under the start method given as argv[1], wherever they are defined.

A worker started with ``spawn`` or ``forkserver`` imports the script again,
so it has the functions of the script's top level: those go by reference
alone (no copy of their code, no cloudpickle). A function defined inside
the ``if __name__ == "__main__":`` block, in a top-level block, or wrapped
by a decorator whose code lives elsewhere may not be there: it goes by value
too. Run as a file, or with ``python -m pool_main_rerun`` (the worker imports
it again by name). Prints one JSON line.
"""

import functools
import json
import sys

from easycore.common.parallel import Pool


def traced(fn):
    @functools.wraps(fn)
    def wrapper(x):
        return fn(x) + 1000

    return wrapper


def top(x):
    return x * 2


@traced
def decorated(x):
    return x


if sys.platform != "no such platform":

    def in_a_block(x):
        return x * 3


if __name__ == "__main__":

    def guarded(x):
        return x * 5

    report = {}
    with Pool(2, start_method=sys.argv[1]) as pool:
        report["top"] = pool.map(top, range(3))
        report["top_apply"] = pool.apply(top, (4,))
        report["cloudpickle"] = "cloudpickle" in sys.modules
        report["decorated"] = pool.map(decorated, range(2))
        report["in_a_block"] = pool.map(in_a_block, range(3))
        report["guarded"] = pool.map(guarded, range(3))
    print(json.dumps(report))
