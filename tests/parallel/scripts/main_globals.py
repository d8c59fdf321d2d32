"""A runner class at the top of a script whose hooks use a global that cannot
be pickled (a lock; a model or an open file would do the same), run with
argv[1]'s start method. Prints one JSON line."""

import json
import sys
import threading

from easycore.common.parallel import OrderedRunner

LOCK = threading.Lock()


class UsesLock(OrderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        with LOCK:
            return data + 1

    @staticmethod
    def consumer_init(cfg):
        cfg.out = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.out.append(data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.out


if __name__ == "__main__":
    with UsesLock(2, start_method=sys.argv[1]) as runner:
        print(json.dumps({"out": runner(range(10))}))
