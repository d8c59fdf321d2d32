"""The tutorial's predictor defined in __main__, its workers spawned (as CUDA users run it)."""

import sys

import torch
from network import Net

from easycore.torch.parallel import OrderedRunner


class Predictor(OrderedRunner):
    @staticmethod
    def producer_init(device, cfg):
        torch.manual_seed(0)
        cfg.model = Net()
        cfg.model.to(device)

    @staticmethod
    def producer_work(device, cfg, data):
        with torch.no_grad():
            return cfg.model(torch.Tensor(data).view(-1, 1).to(device)).cpu()

    @staticmethod
    def consumer_init(cfg):
        cfg.data_list = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.data_list.append(data)

    @staticmethod
    def consumer_end(cfg):
        return torch.cat(cfg.data_list, dim=0)


if __name__ == "__main__":
    method = sys.argv[1]
    batches = [list(range(i, i + 10)) for i in range(0, 100, 10)]
    with Predictor(devices=["cpu", "cpu"], start_method=method) as predictor:
        print("start method", predictor.get_mp_context().get_start_method())
        result = predictor(batches)
    torch.manual_seed(0)
    with torch.no_grad():
        expected = Net()(torch.arange(100.0).view(-1, 1))
    print("shape", tuple(result.shape), "equal", torch.allclose(result, expected))
