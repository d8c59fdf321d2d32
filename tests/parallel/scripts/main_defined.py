"""Runner classes defined in __main__, run under the start method given as argv[1].

Prints one JSON line with what the test checks.
"""

import json
import multiprocessing
import sys

from easycore.common.config import CfgNode
from easycore.common.parallel import OrderedRunner, UnorderedRunner, WorkerError


class SumOfPowers(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return data**cfg.exponent

    @staticmethod
    def consumer_init(cfg):
        cfg.sum = 0

    @staticmethod
    def consumer_work(cfg, data):
        cfg.sum += data

    @staticmethod
    def consumer_end(cfg):
        return cfg.sum


class Arrays(OrderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        import numpy as np

        if data == cfg.get("fail_at"):
            raise ValueError(f"bad item {data}")
        return np.full(100_000, data, dtype=np.int64)

    @staticmethod
    def consumer_init(cfg):
        cfg.firsts = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.firsts.append(int(data[0]))

    @staticmethod
    def consumer_end(cfg):
        return cfg.firsts


if __name__ == "__main__":
    method = sys.argv[1]
    report = {"method": method}
    with SumOfPowers(2, cfg=CfgNode({"exponent": 3}), start_method=method) as runner:
        report["start_method"] = multiprocessing.get_context(method).get_start_method()
        report["sum"] = runner(range(100))
        report["sum_again"] = runner(range(10))
    with Arrays(["cpu:0", "cpu:1"], start_method=method) as runner:
        report["ordered"] = runner(range(50)) == list(range(50))
    runner = Arrays(["cpu:0", "cpu:1"], cfg={"fail_at": 7}, start_method=method)
    try:
        runner(range(50))
    except WorkerError as err:
        report["error"] = {"device": err.device, "hook": err.hook, "text": str(err)}
    report["closed_after_error"] = not runner.is_activate
    print(json.dumps(report))
