"""Pool tasks written in __main__, run under the start method given as argv[1].

Lambdas, closures, local functions, functions and classes of this script
(as the task, as items and as results). Prints one JSON line with what the
test checks.
"""

import json
import os
import sys
from dataclasses import dataclass

from easycore.common.parallel import Pool


@dataclass
class Point:
    x: int
    y: int

    def norm1(self):
        return abs(self.x) + abs(self.y)


@dataclass
class Summary:
    point: Point
    norm: int


def summarize(p):
    # An item of a __main__ class in, a result of another out; the classes the
    # task sees are the items' classes.
    assert isinstance(p, Point), type(p)
    return Summary(Point(abs(p.x), abs(p.y)), p.norm1())


class Scaler:
    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        return x * self.k


def make_adder(n):
    def add(x):
        return x + n

    return add


TAG = None  # set in each worker by the initializer, as with multiprocessing.Pool


def remember(tag):
    global TAG
    TAG = (tag, os.getpid())


def tag(_):
    return TAG


if __name__ == "__main__":
    method = sys.argv[1]
    offset = 100
    report = {}

    def local_square(x):
        return x * x + offset

    with Pool(2, start_method=method, initializer=remember, initargs=("ready",)) as pool:
        pids = set(pool.worker_pids)
        report["lambda"] = pool.map(lambda x: x + offset, range(4))
        report["closure"] = pool.map(make_adder(offset), range(3))
        report["local"] = list(pool.imap(local_square, range(3)))
        report["starmap_lambda"] = pool.starmap(lambda a, b: a * b, [(2, 3), (4, 5)])
        report["callable_instance"] = pool.map(Scaler(3), range(3))
        summaries = pool.map(summarize, [Point(-1, 2), Point(3, -4)])
        report["classes"] = [
            [type(s) is Summary, type(s.point) is Point, s.point.x, s.point.y, s.norm]
            for s in summaries
        ]
        report["apply_async"] = pool.apply_async(lambda a, b=0: a - b, (10,), {"b": 4}).get(60)
        report["submit"] = pool.submit(local_square, 2).result(60)
        report["initializer"] = sorted({t[0] for t in pool.map(tag, range(6), 1)})
        report["broadcast_pids_match"] = set(pool.broadcast(lambda: os.getpid())) == pids

        def defined_after_the_workers_started(x):
            return -x

        report["defined_late"] = pool.map(defined_after_the_workers_started, range(3))
        report["unordered"] = sorted(pool.imap_unordered(lambda p: p.norm1(),
                                                         [Point(i, i) for i in range(5)]))
    print(json.dumps(report))
