"""A runner defined at a module's top level, as runners are meant to be written:
``test_import_cost`` asks its ``spawn`` and ``forkserver`` workers what they imported
(a worker imports this module, and with it easycore's runner module)."""

import sys

from easycore.common.parallel import UnorderedRunner


class WorkerModules(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return sorted(sys.modules)

    @staticmethod
    def consumer_init(cfg):
        cfg.found = None

    @staticmethod
    def consumer_work(cfg, data):
        cfg.found = data

    @staticmethod
    def consumer_end(cfg):
        return cfg.found
