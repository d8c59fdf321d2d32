"""Runner classes shared by the tests (importable by spawned workers too)."""

from __future__ import annotations

import ctypes
import os
import signal
import time

from easycore.common.parallel import OrderedRunner, UnorderedRunner

HOOKS = (
    "producer_init", "producer_work", "producer_end",
    "consumer_init", "consumer_work", "consumer_end",
)


class SumSquares(UnorderedRunner):
    """Tutorial example 1; the consumer accumulates in a list cell (fast path)."""

    @staticmethod
    def producer_work(device, cfg, data):
        return data * data

    @staticmethod
    def consumer_init(cfg):
        cfg.acc = [0]

    @staticmethod
    def consumer_work(cfg, data):
        cfg.acc[0] += data

    @staticmethod
    def consumer_end(cfg):
        return cfg.acc[0]


class _Collect:
    @staticmethod
    def consumer_init(cfg):
        cfg.out = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.out.append(data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.out


class SleepyOrdered(_Collect, OrderedRunner):
    """Items sleep ``data[1]`` seconds; results are ``data[0]``."""

    @staticmethod
    def producer_work(device, cfg, data):
        time.sleep(data[1])
        return data[0]


class SleepyUnordered(_Collect, UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        time.sleep(data[1])
        return data[0]


class Identity(_Collect, OrderedRunner):
    pass


class WorkerState(_Collect, OrderedRunner):
    """Producer cfg lives across calls; results show device, pid, counter, cfg values."""

    @staticmethod
    def producer_init(device, cfg):
        cfg.calls = 0

    @staticmethod
    def producer_work(device, cfg, data):
        cfg.calls += 1
        return (device, os.getpid(), cfg.calls, cfg.get("scale", 1) * data)


class Fail(_Collect, UnorderedRunner):
    """Raises ValueError in the hook named by ``cfg.fail`` (producer_work: on item cfg.item)."""

    @staticmethod
    def producer_init(device, cfg):
        if cfg.fail == "producer_init" and device == cfg.get("device", device):
            raise ValueError(f"boom in producer_init on {device}")

    @staticmethod
    def producer_work(device, cfg, data):
        if cfg.fail == "producer_work" and data == cfg.item:
            raise ValueError(f"boom in producer_work at {data}")
        return data

    @staticmethod
    def producer_end(device, cfg):
        if cfg.fail == "producer_end":
            raise ValueError(f"boom in producer_end on {device}")

    @staticmethod
    def consumer_init(cfg):
        if cfg.fail == "consumer_init":
            raise ValueError("boom in consumer_init")
        cfg.out = []

    @staticmethod
    def consumer_work(cfg, data):
        if cfg.fail == "consumer_work" and data == cfg.item:
            raise ValueError(f"boom in consumer_work at {data}")
        cfg.out.append(data)

    @staticmethod
    def consumer_end(cfg):
        if cfg.fail == "consumer_end":
            raise ValueError("boom in consumer_end")
        return cfg.out


def _die(how):
    if how == "exit":
        os._exit(3)
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "segfault":
        ctypes.string_at(0)


class Die(_Collect, UnorderedRunner):
    """The worker that gets item ``cfg.item`` dies the way ``cfg.how`` says.

    With ``cfg.where`` "init" or "end", the worker on device "cpu:1" (init) or
    every worker (end) dies in ``producer_init`` / ``producer_end`` instead.
    """

    @staticmethod
    def producer_init(device, cfg):
        if cfg.get("where") == "init" and device == "cpu:1":
            _die(cfg.how)

    @staticmethod
    def producer_work(device, cfg, data):
        if data == cfg.item:
            _die(cfg.how)
        return data

    @staticmethod
    def producer_end(device, cfg):
        if cfg.get("where") == "end":
            _die(cfg.how)


class Arrays(_Collect, OrderedRunner):
    """Returns a float64 array of ``cfg.n`` elements filled with the item."""

    @staticmethod
    def producer_work(device, cfg, data):
        import numpy as np

        return np.full(cfg.n, float(data))


class ReportsExit(_Collect, OrderedRunner):
    """Each worker reports its exit into ``cfg.exit_dir`` (see ``report_exit_to``)."""

    @staticmethod
    def producer_init(device, cfg):
        from _pool_funcs import report_exit_to

        report_exit_to(cfg.exit_dir)


class HeapSeen(_Collect, OrderedRunner):
    """Each item answers ``heap_seen_by_worker()``: what the worker's collector visits."""

    @staticmethod
    def producer_work(device, cfg, data):
        from _pool_funcs import heap_seen_by_worker

        return heap_seen_by_worker()
