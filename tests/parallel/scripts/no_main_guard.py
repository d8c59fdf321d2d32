"""A script that forgets ``if __name__ == "__main__":``: starts workers at its top level.

``python no_main_guard.py METHOD KIND`` (KIND: ``pool`` or ``runner``). Under
fork it works (a forked worker never imports the script); under spawn and
forkserver every worker imports it again, and easycore must say why they die
(``MainGuardError``) instead of a ``RuntimeError`` per worker and a bare death.
"""

import multiprocessing
import sys

from easycore.common.parallel import Pool, UnorderedRunner

multiprocessing.set_start_method(sys.argv[1], force=True)


def square(x):
    return x * x


class Squares(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return data * data

    @staticmethod
    def consumer_init(cfg):
        cfg.sum = 0

    @staticmethod
    def consumer_work(cfg, data):
        cfg.sum += data

    @staticmethod
    def consumer_end(cfg):
        return cfg.sum


if sys.argv[2] == "pool":
    with Pool(2) as pool:
        print("sum", sum(pool.map(square, range(20))))
else:
    with Squares(devices=2) as runner:
        print("sum", runner(range(20)))
