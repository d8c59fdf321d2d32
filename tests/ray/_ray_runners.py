"""Runner classes for the Ray tests: Ray workers import them (``conftest`` puts
this folder on their ``PYTHONPATH``), as a cluster's workers would import yours."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import ray

from easycore.common.parallel import OrderedRunner, UnorderedRunner


class Runner(UnorderedRunner):
    """Tutorial example 1: the sum of squares."""

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


class PowerSum(Runner):
    """Tutorial example 4: a parameter from ``cfg``."""

    @staticmethod
    def producer_work(device, cfg, data):
        return data**cfg.exponent


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


class WhereOrdered(_Collect, OrderedRunner):
    """Results say which node, process and device made them; uneven delays
    make the actors finish out of order."""

    @staticmethod
    def producer_init(device, cfg):
        cfg.node = ray.get_runtime_context().get_node_id()
        cfg.gpus = [str(g) for g in ray.get_gpu_ids()]
        cfg.visible = os.environ.get("CUDA_VISIBLE_DEVICES")

    @staticmethod
    def producer_work(device, cfg, data):
        time.sleep(0.002 * (data % 3))
        return data, device, cfg.node, os.getpid(), cfg.gpus, cfg.visible


class WhereUnordered(_Collect, UnorderedRunner):
    producer_init = WhereOrdered.producer_init
    producer_work = WhereOrdered.producer_work


class Arrays(_Collect, OrderedRunner):
    """Returns a 2 MB array per item."""

    @staticmethod
    def producer_work(device, cfg, data):
        return np.full(1 << 18, data, dtype=np.float64)


class Fragile(_Collect, OrderedRunner):
    """Fails the way ``cfg.fail`` says, on item ``cfg.at``."""

    @staticmethod
    def producer_init(device, cfg):
        if cfg.get("fail") == "init":
            raise RuntimeError("cannot load the model")

    @staticmethod
    def producer_work(device, cfg, data):
        if data == cfg.get("at", -1):
            if cfg.fail == "raise":
                raise ValueError(f"bad item {data}")
            if cfg.fail == "exit":
                os._exit(7)
            if cfg.fail == "unpicklable":
                return threading.Lock()
        return data

    @staticmethod
    def producer_end(device, cfg):
        if cfg.get("fail") == "end":
            raise KeyError("cannot flush")


class Slow(_Collect, OrderedRunner):
    """20 ms per item, so chunks stay one item long."""

    @staticmethod
    def producer_work(device, cfg, data):
        time.sleep(0.02)
        return data


class Gated(_Collect, OrderedRunner):
    """Items from ``cfg.after`` on wait at the gate in ``cfg.folder`` (see ``_ray_elastic``)."""

    @staticmethod
    def producer_work(device, cfg, data):
        from _ray_elastic import Gate, held

        return held(data, Gate(cfg.folder), cfg.after)[0]
