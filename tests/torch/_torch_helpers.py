"""Runner classes for the torch tests, importable by spawned workers too.

The predictors are the tutorial's examples 2 and 3 as written (plus a seed,
so every producer builds the same model and results can be compared with the
model run in the test's process).
"""

from __future__ import annotations

import os
import signal
import time

import torch
from network import Net  # examples/network.py, the tutorial's model

from easycore.torch.parallel import OrderedRunner, UnorderedRunner

#: set to "changed" by a test in its own process: forked workers see that, spawned ones do not
MARKER = "module"


# ------------------------------------------------------------- the tutorial
class Predictor(OrderedRunner):
    """Example 2: one item at a time."""

    @staticmethod
    def producer_init(device, cfg):
        torch.manual_seed(cfg.get("seed", 0))  # the same weights in every process
        cfg.model = Net()  # init the producer with a model
        cfg.model.to(device)  # transfer the model to certain device

    @staticmethod
    def producer_work(device, cfg, data):
        with torch.no_grad():
            data = torch.Tensor([[data]])  # preprocess data
            data = data.to(device)  # transfer data to certain device
            output = cfg.model(data)  # predict
            output = output.cpu()  # transfer result to cpu
        return output

    @staticmethod
    def producer_end(device, cfg):
        del cfg.model  # delete the model when all data has been predicted.

    @staticmethod
    def consumer_init(cfg):
        cfg.data_list = []  # prepare a list to store all data from producers.

    @staticmethod
    def consumer_work(cfg, data):
        cfg.data_list.append(data)  # store data from producers.

    @staticmethod
    def consumer_end(cfg):
        data = torch.cat(cfg.data_list, dim=0)  # postprocess data.
        return data


class BatchPredictor(Predictor):
    """Example 3: batches from a generator or a DataLoader."""

    @staticmethod
    def producer_work(device, cfg, data):
        with torch.no_grad():
            data = torch.Tensor(data).view(-1, 1)
            data = data.to(device)
            output = cfg.model(data)
            output = output.cpu()
        return output


class WeightsPredictor(BatchPredictor):
    """Example 3 with the caller's weights, sent through cfg as (name, tensor) pairs."""

    @staticmethod
    def producer_init(device, cfg):
        cfg.model = Net()
        cfg.model.load_state_dict(dict(cfg.weights))
        cfg.model.to(device)


class UnorderedBatchPredictor(BatchPredictor, UnorderedRunner):
    """Example 3, unordered: each result carries its batch so the test can match them."""

    @staticmethod
    def producer_work(device, cfg, data):
        time.sleep(0.02 if int(data[0]) % 20 == 0 else 0.0)  # shuffle the finishing order
        return torch.Tensor(data).view(-1, 1), BatchPredictor.producer_work(device, cfg, data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.data_list


def batch_generator(data_list, batch_size):
    for i in range(0, len(data_list), batch_size):
        data_batch = data_list[i : i + batch_size]
        yield data_batch


def reference_outputs(inputs: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """The tutorial's model run in this process on an (N, 1) float tensor.

    The weights come from ``seed`` as in the workers, without touching this
    process's global random state (``fork_rng``): no test sees another's seed.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Net()
    with torch.no_grad():
        return model(inputs)


# --------------------------------------------------------------- transport
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


def make_case(name: str):
    """A result built from scratch (seeded), the same in a worker and in the test."""
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    base = torch.randn(300, 400, generator=g)
    big = torch.randn(1 << 20, generator=g)  # 4 MiB: through a shared-memory segment
    cases = {
        "float32": lambda: base,
        "float64": lambda: base.double(),
        "float16": lambda: base.half(),
        "bfloat16": lambda: base.bfloat16(),
        "int8": lambda: (base * 50).to(torch.int8),
        "uint8": lambda: (base * 50).to(torch.uint8),
        "int64": lambda: (base * 1e6).long(),
        "bool": lambda: base > 0,
        "complex64": lambda: torch.complex(base, -base),
        "scalar": lambda: torch.tensor(3.25),
        "big": lambda: big,
        "transposed": lambda: base.t(),
        "column_slice": lambda: base[:, ::2],
        "sparse_rows": lambda: big[::1000],
        "narrow_view": lambda: big[1000:3000],
        "expanded": lambda: torch.arange(7.0).expand(50_000, 7),
        "zero_rows": lambda: torch.zeros(0, 3),
        "zero_view": lambda: base[:, 5:5],
        "conj": lambda: torch.complex(base, base).conj(),
        "neg_view": lambda: torch.complex(base, base).conj().imag,  # a real tensor, neg bit
        "requires_grad": lambda: base.clone().requires_grad_(True),
        "parameter": lambda: torch.nn.Parameter(big.clone()),
        "nested": lambda: (base, {"a": [big, base[0]], "b": (torch.ones(2), "text", 5)}),
        "aliased": lambda: (big, big),
        "views_of_one": lambda: (base, base[100:300], base[10:20]),
        "attribute": lambda: _with_attribute(base.clone()),
        "sparse": lambda: (base * (base > 1.5)).to_sparse(),
    }
    return cases[name]()


def _with_attribute(t: torch.Tensor) -> torch.Tensor:
    t.note = "kept"  # a Python attribute: pickled by torch itself, still correct
    return t


CASE_NAMES = [
    "float32", "float64", "float16", "bfloat16", "int8", "uint8", "int64", "bool",
    "complex64", "scalar", "big", "transposed", "column_slice", "sparse_rows",
    "narrow_view", "expanded", "zero_rows", "zero_view", "conj", "neg_view", "requires_grad",
    "parameter", "nested", "aliased", "views_of_one", "attribute", "sparse",
]


class MakeCases(_Collect, OrderedRunner):
    """Each item names a case; the worker builds it and returns it."""

    @staticmethod
    def producer_work(device, cfg, data):
        return make_case(data)


class BigTensors(_Collect, UnorderedRunner):
    """Returns ``cfg.n`` float32 elements filled with the item (a fresh tensor each)."""

    @staticmethod
    def producer_work(device, cfg, data):
        return torch.full((cfg.n,), float(data))


class Sum(UnorderedRunner):
    """Large results, consumed and dropped at once (segments recycle)."""

    @staticmethod
    def producer_work(device, cfg, data):
        return torch.full((cfg.n,), float(data))

    @staticmethod
    def consumer_init(cfg):
        cfg.acc = [0.0]

    @staticmethod
    def consumer_work(cfg, data):
        cfg.acc[0] += float(data[0])

    @staticmethod
    def consumer_end(cfg):
        return cfg.acc[0]


# ----------------------------------------------------------------- devices
class Probe(_Collect, OrderedRunner):
    """What a worker sees: its device, threads, pid, and whether it was forked."""

    @staticmethod
    def producer_work(device, cfg, data):
        time.sleep(cfg.get("sleep", 0.0))  # spreads items over all workers
        info = {
            "device": device,
            "threads": torch.get_num_threads(),
            "pid": os.getpid(),
            "marker": MARKER,
        }
        if device.startswith("cuda"):
            info["current"] = torch.cuda.current_device()
            info["default_tensor_device"] = str(torch.zeros(1, device="cuda").device)
        return info


class ThreadedProbe(Probe):
    """cpu_threads=None: torch's default threads, so workers must be spawned."""

    cpu_threads = None


class TwoThreadProbe(Probe):
    cpu_threads = 2


class HeavyCompute(_Collect, UnorderedRunner):
    """Multi-threaded-capable torch ops in the worker (OpenMP after a fork)."""

    @staticmethod
    def producer_work(device, cfg, data):
        a = torch.randn(300, 300)
        return float((a @ a).exp().clamp(max=1e6).sum() > 0) + torch.randn(200_000).exp().numel()


# ------------------------------------------------------------------ errors
class Fail(_Collect, UnorderedRunner):
    """Raises ValueError in the hook named by ``cfg.fail`` (producer_work: at cfg.item)."""

    @staticmethod
    def producer_init(device, cfg):
        if cfg.fail == "producer_init":
            raise ValueError(f"boom in producer_init on {device}")

    @staticmethod
    def producer_work(device, cfg, data):
        if cfg.fail == "producer_work" and data == cfg.item:
            raise ValueError(f"boom in producer_work at {data}")
        return torch.full((cfg.get("n", 4),), float(data))

    @staticmethod
    def producer_end(device, cfg):
        if cfg.fail == "producer_end":
            raise ValueError(f"boom in producer_end on {device}")

    @staticmethod
    def consumer_work(cfg, data):
        if cfg.fail == "consumer_work" and float(data[0]) == cfg.item:
            raise ValueError(f"boom in consumer_work at {cfg.item}")
        cfg.out.append(data)


class Die(_Collect, UnorderedRunner):
    """The worker that gets item ``cfg.item`` dies the way ``cfg.how`` says; large results."""

    @staticmethod
    def producer_work(device, cfg, data):
        if data == cfg.item:
            if cfg.how == "exit":
                os._exit(3)
            if cfg.how == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            if cfg.how == "hang":  # tells the test its pid, to be killed from outside
                with open(cfg.pidfile + ".tmp", "w") as f:
                    f.write(str(os.getpid()))
                os.replace(cfg.pidfile + ".tmp", cfg.pidfile)
                time.sleep(120)
        return torch.full((cfg.get("n", 1 << 20),), float(data))


class Interrupt(Probe):
    """Ctrl-C arrives while the consumer works."""

    @staticmethod
    def consumer_work(cfg, data):
        raise KeyboardInterrupt
