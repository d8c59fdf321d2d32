"""Exits without closing a runner whose producer_init started a subprocess
(or is dropped without close, argv[1] "drop"): the workers and what they
started must go. Prints the children's pids first."""

import gc
import os
import subprocess
import sys
import time

from easycore.common.parallel import UnorderedRunner

_KEPT = []


class StartsSleeper(UnorderedRunner):
    @staticmethod
    def producer_init(device, cfg):
        _KEPT.append(subprocess.Popen(["sleep", "120"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))

    @staticmethod
    def producer_work(device, cfg, data):
        return _KEPT[0].pid

    @staticmethod
    def consumer_init(cfg):
        cfg.pids = set()

    @staticmethod
    def consumer_work(cfg, data):
        cfg.pids.add(data)

    @staticmethod
    def consumer_end(cfg):
        return sorted(cfg.pids)


if __name__ == "__main__":
    runner = StartsSleeper(1)
    print(" ".join(str(p) for p in runner([0])), os.getpid(), flush=True)
    if sys.argv[1:] == ["drop"]:
        del runner  # no close(): the garbage collector's finalizer ends the workers
        gc.collect()
        time.sleep(0.5)  # a moment for anything left to show (the test checks)
    # no close(): the exit handlers must do it
