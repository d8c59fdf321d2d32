"""A runner of ``easycore.torch.parallel`` for the Ray tests (imported only
when that package imports)."""

from __future__ import annotations

import torch

from easycore.torch.parallel import OrderedRunner


class Tensors(OrderedRunner):
    """Returns a 512 KB CPU tensor per item, and what the actor's torch looks like."""

    @staticmethod
    def producer_init(device, cfg):
        cfg.threads = torch.get_num_threads()  # setup_worker ran first

    @staticmethod
    def producer_work(device, cfg, data):
        return device, cfg.threads, torch.full((1 << 16,), float(data), device=device)

    @staticmethod
    def consumer_init(cfg):
        cfg.out = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.out.append(data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.out
