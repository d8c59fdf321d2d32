# Instances of classes of __main__ as items, results and queue items, under a
# start method (argv[1]), run as a file or piped to `python -`; argv[2], if
# given, is a tensor_sharing of easycore-torch's Pool (and Queue) to use instead. The first map's
# function brings no class along (a callable instance, a builtin), so workers
# that cannot import __main__ must get the classes with the data. Prints one
# JSON line.
import json
import sys
from dataclasses import dataclass

if len(sys.argv) > 2:
    from easycore.torch.parallel import Pool, Queue
else:
    from easycore.common.parallel import Pool, Queue


@dataclass
class Reading:
    sensor: str
    value: float


class Threshold:  # its code names no other class of __main__
    def __init__(self, limit):
        self.limit = limit

    def __call__(self, reading):
        return reading.value > self.limit


def is_reading(obj):
    return isinstance(obj, Reading)


def take(q):
    return repr(q.get(timeout=60))


if __name__ == "__main__":

    @dataclass
    class Guarded:  # spawn and forkserver workers never run this block
        x: int

    report = {}
    options = {"tensor_sharing": sys.argv[2]} if len(sys.argv) > 2 else {}
    with Pool(2, start_method=sys.argv[1], **options) as pool:

        @dataclass
        class Late:  # defined after fork workers were made
            x: int

        readings = [Reading("a", 1.0), Reading("b", -1.0)] * 3
        report["threshold"] = pool.map(Threshold(0.0), readings, chunksize=1)
        report["guarded"] = pool.map(repr, [Guarded(i) for i in range(3)], chunksize=1)
        report["late"] = pool.map(repr, [Late(i) for i in range(3)], chunksize=1)
        report["isinstance"] = pool.map(is_reading, readings, chunksize=1)
        back = pool.map(lambda r: r, [Reading("c", 2.0), Guarded(3), Late(4)], chunksize=1)
        report["own_classes"] = [type(b) is c for b, c in zip(back, (Reading, Guarded, Late))]
        with Queue() as q:
            q.put(Guarded(7))
            report["queue"] = pool.apply(take, (q,))
    print(json.dumps(report))
