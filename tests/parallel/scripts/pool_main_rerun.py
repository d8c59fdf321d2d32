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

from easycore.common.parallel import OrderedRunner, Pool


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


class Triples(OrderedRunner):
    """A runner written in the script, at its top level."""

    @staticmethod
    def producer_work(device, cfg, data):
        return data + data + data  # (runs in the worker)

    @staticmethod
    def consumer_init(cfg):
        cfg.got = ""  # "0,3,6," as the results come, in order

    @staticmethod
    def consumer_work(cfg, data):
        cfg.got += f"{data},"

    @staticmethod
    def consumer_end(cfg):
        return [int(x) for x in cfg.got.split(",") if x]


if sys.platform != "no such platform":

    def in_a_block(x):
        return x * 3


if __name__ == "__main__":

    def guarded(x):
        return x * 5

    class GuardedTriples(Triples):
        """A runner written inside the guard: no worker defines it again."""

        @staticmethod
        def producer_work(device, cfg, data):
            return -3 * data

    report = {}
    method = sys.argv[1]
    with Pool(2, start_method=method) as pool:
        report["top"] = pool.map(top, range(3))
        report["top_apply"] = pool.apply(top, (4,))
        # The same bytes every time: pickled once for the pool, as a module's function.
        report["cached"] = any(code[0] is top for code in pool._codes)
        report["cloudpickle"] = "cloudpickle" in sys.modules
    # A runner's class goes by reference alone where Python says where its
    # class statement is (3.13+).
    with Triples(1, start_method=method) as runner:
        report["runner"] = runner(range(3))
        report["cloudpickle_runner"] = "cloudpickle" in sys.modules
    with Pool(2, start_method=method) as pool:
        report["decorated"] = pool.map(decorated, range(2))
        report["in_a_block"] = pool.map(in_a_block, range(3))
        report["guarded"] = pool.map(guarded, range(3))
    with GuardedTriples(1, start_method=method) as runner:
        report["guarded_runner"] = runner(range(3))
    print(json.dumps(report))
