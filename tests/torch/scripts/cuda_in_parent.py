"""CUDA already initialised in the caller: spawned workers still use every GPU,
and a CUDA tensor returned as is arrives on its GPU. Run in a subprocess so
that CUDA initialised here never reaches the test process. Prints JSON."""

from __future__ import annotations

import json

import torch
from _torch_helpers import Probe

from easycore.common.config import CfgNode
from easycore.torch.parallel import OrderedRunner


class CudaResults(OrderedRunner):
    """Returns a CUDA tensor as is (the docs say: return .cpu())."""

    @staticmethod
    def producer_work(device, cfg, data):
        return torch.full((3,), float(data), device=device)

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
    torch.zeros(1, device="cuda")  # CUDA initialised here: forked workers could not use it
    assert torch.cuda.is_initialized()
    devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())] + ["cuda", "cpu"]
    with Probe(devices, cfg=CfgNode({"sleep": 0.05})) as runner:
        infos = runner(range(8 * len(devices)))
        report = {"devices": runner.devices, "budget": runner.cpu_threads, "infos": infos}
    with CudaResults(["cuda:0"]) as runner:
        out = runner(range(3))
    report["result_devices"] = [t.device.type for t in out]
    report["result_values"] = [t.cpu().tolist() for t in out]
    print(json.dumps(report, default=str))
