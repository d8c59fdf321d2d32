"""Uses a runner and exits without closing it: the interpreter must still exit
promptly, taking the workers and their shared memory with it."""

import json

from easycore.common.parallel import OrderedRunner


class Arrays(OrderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        import numpy as np

        return np.full(100_000, data)

    @staticmethod
    def consumer_init(cfg):
        cfg.kept = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.kept.append(data)

    @staticmethod
    def consumer_end(cfg):
        return [int(a[0]) for a in cfg.kept]


if __name__ == "__main__":
    runner = Arrays(2)
    assert runner(range(20)) == list(range(20))
    prefix = runner._engine.backend.transport.prefix
    print(json.dumps({"pids": runner.worker_pids, "prefix": prefix}))
    # no close(): the exit handlers must do it
