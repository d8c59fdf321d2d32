"""The network predictor tutorial (examples 2 and 3) on easycore.torch.parallel.

Runs on two CPU workers, or on the GPU(s) when ``torch.cuda.is_available()``:

1. one item at a time (example 2): each producer predicts one number;
2. in batches from a generator (example 3);
3. in batches from a ``torch.utils.data.DataLoader``.

Every producer builds the same model (the weights travel in ``cfg``), so the
outputs are compared with the model run in this process.

Run: ``PYTHONPATH=examples python examples/25_torch_predictor.py``
(``scripts/demo`` does that).
"""

# requires: torch

import time

import torch
from network import Net
from torch.utils.data import DataLoader

from easycore.common.config import CfgNode
from easycore.torch.parallel import OrderedRunner


class Predictor(OrderedRunner):
    """Example 2: one number in, one row of three outputs back."""

    @staticmethod
    def producer_init(device, cfg):
        cfg.model = Net()  # init the producer with a model
        cfg.model.load_state_dict(dict(cfg.weights))  # the caller's weights: comparable results
        cfg.model.to(device)  # transfer the model to this worker's device
        cfg.model.eval()

    @staticmethod
    def producer_work(device, cfg, data):
        with torch.no_grad():
            data = torch.Tensor([[data]])  # preprocess data
            data = data.to(device)  # transfer data to this worker's device
            output = cfg.model(data)  # predict
            output = output.cpu()  # results travel back on the CPU
        return output

    @staticmethod
    def producer_end(device, cfg):
        del cfg.model  # delete the model when all data has been predicted

    @staticmethod
    def consumer_init(cfg):
        cfg.data_list = []  # a list to store the outputs from producers

    @staticmethod
    def consumer_work(cfg, data):
        cfg.data_list.append(data)  # outputs arrive in input order (OrderedRunner)

    @staticmethod
    def consumer_end(cfg):
        return torch.cat(cfg.data_list, dim=0)  # postprocess


class BatchPredictor(Predictor):
    """Example 3: a batch of numbers in, a batch of outputs back."""

    @staticmethod
    def producer_work(device, cfg, data):
        with torch.no_grad():
            data = torch.Tensor(data).view(-1, 1)  # a batch: a list, or a DataLoader tensor
            data = data.to(device)
            output = cfg.model(data)
            output = output.cpu()
        return output


def batch_generator(data_list, batch_size):
    for i in range(0, len(data_list), batch_size):
        yield data_list[i : i + batch_size]


def main():
    if torch.cuda.is_available():
        devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    else:
        devices = ["cpu", "cpu"]
    print(f"devices: {devices}")

    torch.manual_seed(0)
    model = Net().eval()
    cfg = CfgNode()
    # Every producer loads these weights. Config keys must be identifiers, so the
    # state_dict travels as (name, tensor) pairs.
    cfg.weights = list(model.state_dict().items())
    data_list = list(range(100))
    with torch.no_grad():
        expected = model(torch.tensor(data_list, dtype=torch.float32).view(-1, 1))

    start = time.perf_counter()
    with Predictor(devices=devices, cfg=cfg) as predictor:
        print(f"started {len(devices)} workers in {time.perf_counter() - start:.2f} s")
        result = predictor(data_list)
    print(f"1. one item at a time:       {tuple(result.shape)}, first row {result[1].tolist()}")
    assert torch.allclose(result, expected)

    with BatchPredictor(devices=devices, cfg=cfg) as predictor:
        result = predictor(batch_generator(data_list, batch_size=10))
        print(f"2. batches from a generator: {tuple(result.shape)}")
        assert torch.allclose(result, expected)

        # The runner is reusable: same workers, a new call.
        loader = DataLoader(torch.tensor(data_list, dtype=torch.float32), batch_size=16)
        result = predictor(loader)
        print(f"3. batches from a DataLoader: {tuple(result.shape)}")
        assert torch.allclose(result, expected)
    print("outputs equal the model run in this process")


if __name__ == "__main__":
    main()
