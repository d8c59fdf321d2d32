"""Benchmark easycore.torch.parallel: tensors through shared memory, and GPU inference.

1. **8 MB results** (CPU, always): two workers each return an 8 MB float32
   tensor per item; the consumer reads one element of each. Rows, all measured
   in this run on the same items:

   * ``easycore.torch.parallel``: tensors through recycled shared memory
     (goal: at least as fast as the NumPy row);
   * ``easycore.common.parallel``: 8 MB NumPy arrays, the reference;
   * ``multiprocessing.Pool.imap``, tensors pickled by value (``pickle.dumps``
     in the worker, ``pickle.loads`` in the caller);
   * ``multiprocessing.Pool.imap`` as it behaves once torch is imported:
     torch's ForkingPickler reductions move each storage to fresh shared
     memory and pass its file descriptor (``torch.multiprocessing``'s way).

2. **GPU inference** (only when ``torch.cuda.is_available()``; otherwise a
   note is printed): two workers on ``cuda:0``, the tutorial predictor
   (``Net``, batches of 4096 numbers) and an MLP with four 4096-wide layers
   (batches of 256 inputs made in the worker, outputs returned on the CPU),
   in items/s, beside the same model in a plain loop in one process.

Run: ``scripts/bench torch`` or ``python benchmarks/bench_torch.py`` (about a minute).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import platform
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np
import torch
from easycore.common import parallel as common_parallel
from easycore.torch import parallel as torch_parallel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from network import Net  # noqa: E402  (the tutorial's model, from examples/)

ELEMENTS = 2 << 20  # float32: 8 MiB per item
ITEMS = 150  # per measurement: 1.2 GiB through each easycore runner
REPEAT = 5  # best of, taking turns
WORKERS = 2


# ------------------------------------------------------------ (1) transport
class TorchTensors(torch_parallel.UnorderedRunner):
    @staticmethod
    def producer_init(device, cfg):
        cfg.t = torch.ones(ELEMENTS)  # one buffer per worker: this measures the transport

    @staticmethod
    def producer_work(device, cfg, data):
        cfg.t[0] = data  # the transport copies before the next item overwrites it
        return cfg.t

    @staticmethod
    def consumer_init(cfg):
        cfg.total = [0.0]

    @staticmethod
    def consumer_work(cfg, data):
        cfg.total[0] += float(data[0])

    @staticmethod
    def consumer_end(cfg):
        return cfg.total[0]


class NumpyArrays(common_parallel.UnorderedRunner):
    @staticmethod
    def producer_init(device, cfg):
        cfg.a = np.ones(ELEMENTS, dtype=np.float32)

    @staticmethod
    def producer_work(device, cfg, data):
        cfg.a[0] = data
        return cfg.a

    consumer_init = TorchTensors.consumer_init
    consumer_work = TorchTensors.consumer_work
    consumer_end = TorchTensors.consumer_end


_POOL_TENSOR = None


def _pool_init() -> None:
    global _POOL_TENSOR
    torch.set_num_threads(1)
    _POOL_TENSOR = torch.ones(ELEMENTS)


def _pool_by_value(data: int) -> bytes:
    _POOL_TENSOR[0] = data
    return pickle.dumps(_POOL_TENSOR, protocol=pickle.HIGHEST_PROTOCOL)


def _pool_torch_sharing(data: int) -> torch.Tensor:
    # A fresh tensor per item: torch moves a storage into shared memory in place,
    # so returning the same one twice would not measure a transfer.
    t = torch.ones(ELEMENTS)
    t[0] = data
    return t


def best_seconds(run: Callable[[], float], expected: float, repeat: int = REPEAT) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        total = run()
        best = min(best, time.perf_counter() - start)
        assert total == expected, (total, expected)
    return best


def interleaved_best(runs: Dict[str, Callable[[], float]], expected: float) -> Dict[str, float]:
    """Best seconds of each run, taking turns, so that a noisy moment hits all alike."""
    best = {name: float("inf") for name in runs}
    for _ in range(REPEAT):
        for name, run in runs.items():
            best[name] = min(best[name], best_seconds(run, expected, repeat=1))
    return best


def bench_transport() -> List[Tuple[str, float]]:
    items = list(range(ITEMS))
    expected = float(sum(items))
    with TorchTensors(WORKERS) as tensors, NumpyArrays(WORKERS) as arrays:
        for runner in (tensors, arrays):
            runner(range(WORKERS * 4))  # warm: segments exist, chunk sizes settled
        best = interleaved_best(
            {"torch": lambda: tensors(items), "numpy": lambda: arrays(items)}, expected
        )
    rows = [
        ("easycore.torch.parallel   tensors, shared memory", best["torch"]),
        ("easycore.common.parallel  numpy arrays (reference)", best["numpy"]),
    ]
    # The pools are an order of magnitude slower: a few items, best of 2, suffice.
    few = items[: ITEMS // 3]
    few_expected = float(sum(few))
    with multiprocessing.get_context("fork").Pool(WORKERS, initializer=_pool_init) as pool:
        list(pool.imap(_pool_by_value, range(WORKERS * 2)))

        def by_value() -> float:
            return sum(float(pickle.loads(b)[0]) for b in pool.imap(_pool_by_value, few))

        seconds = best_seconds(by_value, few_expected, repeat=2) * len(items) / len(few)
        rows.append(("multiprocessing.Pool.imap tensors pickled by value", seconds))
        list(pool.imap(_pool_torch_sharing, range(WORKERS * 2)))

        def torch_sharing() -> float:
            return sum(float(t[0]) for t in pool.imap(_pool_torch_sharing, few))

        seconds = best_seconds(torch_sharing, few_expected, repeat=2) * len(items) / len(few)
        rows.append(("multiprocessing.Pool.imap torch fd sharing (ForkingPickler)", seconds))
    return rows


def print_transport(rows: List[Tuple[str, float]]) -> None:
    mib = ELEMENTS * 4 / (1 << 20)
    reference = rows[1][1]
    print(f"\n(1) {ITEMS} results of {mib:.0f} MiB, {WORKERS} workers, best of {REPEAT} "
          "(pools: a third of the items, best of 2)")
    print(f"    {'':60s} {'items/s':>9s} {'GiB/s':>7s} {'vs numpy':>9s}")
    for name, seconds in rows:
        rate = ITEMS / seconds
        gib = rate * mib / 1024
        print(f"    {name:60s} {rate:9.1f} {gib:7.2f} {reference / seconds:8.2f}x")
    ratio = rows[1][1] / rows[0][1]
    verdict = "met" if ratio >= 1.0 else "NOT met (noisy machine? rerun)"
    print(f"    goal: torch tensors at least as fast as numpy arrays: {ratio:.2f}x, {verdict}")


# ------------------------------------------------------------------ (2) GPU
def batch_generator(data_list, batch_size):
    for i in range(0, len(data_list), batch_size):
        yield data_list[i : i + batch_size]


class Predictor(torch_parallel.UnorderedRunner):
    """The tutorial's batch predictor (example 3), counting outputs."""

    @staticmethod
    def producer_init(device, cfg):
        torch.manual_seed(0)
        cfg.model = Net().to(device).eval()

    @staticmethod
    def producer_work(device, cfg, data):
        with torch.no_grad():
            data = torch.Tensor(data).view(-1, 1).to(device)
            return cfg.model(data).cpu()

    @staticmethod
    def consumer_init(cfg):
        cfg.n = [0]

    @staticmethod
    def consumer_work(cfg, data):
        cfg.n[0] += data.shape[0]

    @staticmethod
    def consumer_end(cfg):
        return cfg.n[0]


def make_mlp(width: int = 4096, layers: int = 4) -> torch.nn.Module:
    blocks: list = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*blocks)


class MLPPredictor(Predictor):
    """Each item is a batch size; inputs are made on the GPU, outputs come back on the CPU."""

    @staticmethod
    def producer_init(device, cfg):
        torch.manual_seed(0)
        cfg.model = make_mlp().to(device).eval()

    @staticmethod
    def producer_work(device, cfg, data):
        with torch.no_grad():
            x = torch.randn(data, 4096, device=device)
            return cfg.model(x).cpu()


def bench_gpu() -> None:
    if not torch.cuda.is_available():
        print("\n(2) GPU benchmark skipped: torch.cuda.is_available() is False "
              f"(torch {torch.__version__}); run on a machine with a CUDA GPU.")
        return
    print(f"\n(2) GPU inference on {torch.cuda.get_device_name(0)}, items/s (best of {REPEAT})")
    numbers = list(range(400_000))
    tutorial_batches = list(batch_generator(numbers, 4096))
    mlp_batches = [256] * 200

    def in_process(model: torch.nn.Module, batches, make_input) -> float:
        model = model.to("cuda:0").eval()
        best = float("inf")
        for _ in range(REPEAT):
            start = time.perf_counter()
            with torch.no_grad():
                n = sum(model(make_input(b)).cpu().shape[0] for b in batches)
            best = min(best, time.perf_counter() - start)
        return n / best

    def tutorial_input(b):
        return torch.Tensor(b).view(-1, 1).to("cuda:0")

    def mlp_input(b):
        return torch.randn(b, 4096, device="cuda:0")

    torch.manual_seed(0)
    rows = [("tutorial Net, one process, plain loop",
             in_process(Net(), tutorial_batches, tutorial_input))]
    with Predictor(devices=["cuda:0", "cuda:0"]) as runner:
        runner(tutorial_batches[:8])
        seconds = best_seconds(lambda: float(runner(tutorial_batches)), float(len(numbers)))
        rows.append(("tutorial Net, easycore.torch.parallel [cuda:0, cuda:0]",
                     len(numbers) / seconds))
    torch.manual_seed(0)
    rows.append(("MLP 4x4096, one process, plain loop",
                 in_process(make_mlp(), mlp_batches, mlp_input)))
    total = float(sum(mlp_batches))
    with MLPPredictor(devices=["cuda:0", "cuda:0"]) as runner:
        runner(mlp_batches[:8])
        seconds = best_seconds(lambda: float(runner(mlp_batches)), total)
        rows.append(("MLP 4x4096, easycore.torch.parallel [cuda:0, cuda:0]", total / seconds))
    for name, rate in rows:
        print(f"    {name:60s} {rate:12.0f} items/s")


def main() -> None:
    print(f"torch {torch.__version__}, numpy {np.__version__}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, {platform.machine()}")
    print_transport(bench_transport())
    bench_gpu()


if __name__ == "__main__":
    main()
