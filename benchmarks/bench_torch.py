"""easycore.torch.parallel against what a PyTorch user would write instead, same run.

Sections (``--only NAME,...``), contenders taking turns, best of the rounds
with the spread of the rounds, every result checked:

* ``transport`` (CPU, always): fresh 8 MB float32 tensors (a new tensor per
  item, its item written on every 4 KiB page, every page checked on the other
  side), as **results** of two workers and as **inputs** made by the caller:

  * ``easycore.torch.parallel``: tensors through recycled shared memory;
  * ``easycore.common.parallel`` with NumPy arrays (results): the reference;
  * ``multiprocessing.Pool.imap`` with tensors pickled by value;
  * ``multiprocessing.Pool.imap`` as it behaves once torch is imported:
    torch's ``ForkingPickler`` reductions move each storage to fresh shared
    memory and pass its file descriptor.

* ``gpu`` (only where ``torch.cuda.is_available()``; a note elsewhere):

  (a) resnet50 fp16 inference on 40 batches of 64 uint8 images (9.6 MB each)
      given to ``OrderedRunner(["cuda:0"] * k)`` as its input items, k = 1, 2,
      3, against a plain loop in one process over the same batches. Goal: at
      least 1.05x with 2 workers.
  (b) CPU preprocessing (resize, crop, flip, normalise) + resnet50 on
      ``cuda:0``: ``k`` runner workers (each preprocesses its batch with its
      thread budget and runs the model) against
      ``DataLoader(num_workers=k, persistent_workers=True, pin_memory=True)``
      feeding a main-process GPU loop, k = 2, 4, 8. Goal: at least 2x at each k.
  (c) the tutorial's predictor (``examples/network.py``) on two workers,
      against a plain loop.

  The model is torchvision's ``resnet50(weights=None)`` when torchvision is
  installed, otherwise a ResNet-50 built here from torch layers (the same
  layers, so the same cost). ``--gpu-on-cpu`` runs (a) and (b) on CPU workers
  with a small model and few images, to check the code without a GPU: those
  numbers say nothing about GPUs.

``--quick`` fits in a few minutes on a 2-core machine; the default is sized
for a 16-core GPU node. Run: ``scripts/bench torch`` or
``python benchmarks/bench_torch.py [--quick] [--rounds N] [--only transport,gpu]``.
"""

from __future__ import annotations

import multiprocessing
import pickle
import sys
import time
from pathlib import Path
from typing import List

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from _harness import (
    Contender,
    available_cpus,
    expect,
    flush,
    goal,
    machine_line,
    parse_args,
    print_rows,
    take_turns,
)

from easycore.common import parallel as common_parallel
from easycore.torch import parallel as torch_parallel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from network import Net

ELEMENTS = 2 << 20  # float32: 8 MiB per item
PAGE = 1024  # float32 elements per 4 KiB page


# ------------------------------------------------------------ (1) transport
def fresh_tensor(i):
    """A new 8 MB tensor with ``i`` on every page (cheap: no full fill)."""
    t = torch.empty(ELEMENTS)
    t[::PAGE] = float(i)
    return t


def fresh_tensors(n):
    for i in range(n):
        yield fresh_tensor(i)


def fresh_array(i):
    a = np.empty(ELEMENTS, dtype=np.float32)
    a[::PAGE] = i
    return a


def pages(t):
    """The sum of the number on every page (reads every page)."""
    return float(t[::PAGE].sum())


def checksum(n):
    return float(ELEMENTS // PAGE) * (n * (n - 1) / 2)


class TensorResults(torch_parallel.UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return fresh_tensor(data)

    @staticmethod
    def consumer_init(cfg):
        cfg.total = 0.0

    @staticmethod
    def consumer_work(cfg, data):
        cfg.total += pages(data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.total


class ArrayResults(common_parallel.UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return fresh_array(data)

    consumer_init = TensorResults.consumer_init
    consumer_work = TensorResults.consumer_work
    consumer_end = TensorResults.consumer_end


class TensorInputs(torch_parallel.UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return pages(data)

    @staticmethod
    def consumer_init(cfg):
        cfg.total = 0.0

    @staticmethod
    def consumer_work(cfg, data):
        cfg.total += data

    consumer_end = TensorResults.consumer_end


def _pool_init():
    torch.set_num_threads(1)


def _by_value(i):
    return pickle.dumps(fresh_tensor(i), protocol=pickle.HIGHEST_PROTOCOL)


def _pages_of_pickle(blob):
    return pages(pickle.loads(blob))


def _pickled_inputs(n):
    for t in fresh_tensors(n):
        yield pickle.dumps(t, protocol=pickle.HIGHEST_PROTOCOL)


def section_transport(cfg):
    n, workers = cfg.n_tensors, 2
    ok = expect(checksum(n))
    print(f"\n[transport] {n} fresh 8 MB float32 tensors per measurement, {workers} workers, "
          f"best of {cfg.rounds} rounds")
    flush()
    ctx = multiprocessing.get_context("fork") if sys.platform.startswith("linux") else None
    pool_cls = ctx.Pool if ctx is not None else multiprocessing.Pool
    with TensorResults(workers) as t_out, ArrayResults(workers) as a_out, \
            TensorInputs(workers) as t_in, pool_cls(workers, initializer=_pool_init) as pool:
        results = take_turns([
            Contender("multiprocessing.Pool.imap, torch fd sharing (ForkingPickler)",
                      lambda: sum(pages(t) for t in pool.imap(fresh_tensor, range(n))), ok),
            Contender("multiprocessing.Pool.imap, tensors pickled by value",
                      lambda: sum(pages(pickle.loads(b)) for b in pool.imap(_by_value, range(n))),
                      ok),
            Contender("easycore.torch.parallel (shared memory)", lambda: t_out(range(n)), ok),
            Contender("easycore.common.parallel, NumPy arrays (reference)",
                      lambda: a_out(range(n)), ok),
        ], cfg.rounds)
        inputs = take_turns([
            Contender("multiprocessing.Pool.imap, torch fd sharing (ForkingPickler)",
                      lambda: sum(pool.imap(pages, fresh_tensors(n))), ok),
            Contender("multiprocessing.Pool.imap, tensors pickled by value",
                      lambda: sum(pool.imap(_pages_of_pickle, _pickled_inputs(n))), ok),
            Contender("easycore.torch.parallel (shared memory)", lambda: t_in(fresh_tensors(n)),
                      ok),
        ], cfg.rounds)
    peer = "multiprocessing.Pool.imap, torch fd sharing (ForkingPickler)"
    print_rows("  8 MB tensors as results (made by the workers)", results, peer, n, "tensors",
               nbytes=ELEMENTS * 4)
    print_rows("  8 MB tensors as inputs (made by the caller)", inputs, peer, n, "tensors",
               nbytes=ELEMENTS * 4)
    ours, ref = results["easycore.torch.parallel (shared memory)"].best, \
        results["easycore.common.parallel, NumPy arrays (reference)"].best
    return [
        goal("torch tensors as results vs NumPy arrays (reference)", ref / ours, 1.0),
        goal("torch tensor results vs Pool's torch sharing", results[peer].best / ours, 1.0),
        goal("torch tensor inputs vs Pool's torch sharing",
             inputs[peer].best / inputs["easycore.torch.parallel (shared memory)"].best, 1.0),
    ]


# ------------------------------------------------------------------ (2) GPU
class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        width = planes
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.down = None
        if stride != 1 or inplanes != planes * 4:
            self.down = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride=stride,
                                                bias=False), nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    """torchvision's ResNet layout from torch layers (``[3, 4, 6, 3]``: ResNet-50)."""

    def __init__(self, layers=(3, 4, 6, 3), widths=(64, 128, 256, 512), classes=1000):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        blocks, inplanes = [], widths[0]
        for i, (n, planes) in enumerate(zip(layers, widths)):
            for j in range(n):
                blocks.append(Bottleneck(inplanes, planes, stride=2 if j == 0 and i > 0 else 1))
                inplanes = planes * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(inplanes, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def make_model(small=False):
    """resnet50(weights=None) from torchvision if installed, else the same from torch layers."""
    torch.manual_seed(0)
    if small:  # --gpu-on-cpu: the code path, not the cost
        return ResNet(layers=(1, 1, 1, 1), widths=(8, 16, 32, 64), classes=10)
    try:
        from torchvision.models import resnet50
    except ImportError:
        return ResNet()
    return resnet50(weights=None)


def model_name(small=False):
    if small:
        return "a tiny ResNet (--gpu-on-cpu)"
    try:
        import torchvision  # noqa: F401
    except ImportError:
        return "ResNet-50 from torch layers (torchvision not installed)"
    return "torchvision resnet50(weights=None)"


MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
BATCH = 64
SIDE = 224


def uint8_batch(i, side=SIDE):
    """A fresh uint8 batch (64 x 3 x side x side), its item written every 4 KiB."""
    b = torch.empty((BATCH, 3, side, side), dtype=torch.uint8)
    b.view(-1)[::4096] = i % 251
    return b


def uint8_batches(n, side=SIDE):
    for i in range(n):
        yield uint8_batch(i, side)


class Inference:
    """A model in fp16 (CUDA) or fp32 (CPU) on ``device``, fed uint8 or float batches."""

    def __init__(self, device, small=False):
        self.device = torch.device(device)
        self.half = self.device.type == "cuda"
        model = make_model(small).to(self.device).eval()
        self.model = model.half() if self.half else model
        dtype = torch.float16 if self.half else torch.float32
        self.mean = MEAN.to(self.device, dtype)
        self.std = STD.to(self.device, dtype)
        self.dtype = dtype

    @torch.inference_mode()
    def uint8(self, batch):
        x = batch.to(self.device, non_blocking=True).to(self.dtype).div_(255)
        return self.model((x - self.mean) / self.std).float().cpu()

    @torch.inference_mode()
    def normalised(self, batch):
        x = batch.to(self.device, non_blocking=True).to(self.dtype)
        return self.model(x).float().cpu()


class InferUint8(torch_parallel.OrderedRunner):
    """(a): input items are uint8 batches; the worker runs the model on its GPU."""

    @staticmethod
    def producer_init(device, cfg):
        cfg.infer = Inference(device, cfg.small)

    @staticmethod
    def producer_work(device, cfg, data):
        return cfg.infer.uint8(data)

    @staticmethod
    def consumer_init(cfg):
        cfg.n = 0

    @staticmethod
    def consumer_work(cfg, data):
        cfg.n += data.shape[0]

    @staticmethod
    def consumer_end(cfg):
        return cfg.n


RAW = (3, 375, 500)  # a decoded ImageNet-sized photo


def raw_image(i, raw=RAW):
    img = torch.empty(raw, dtype=torch.uint8)
    img.view(-1)[::97] = i % 251
    return img


def preprocess(img, i, side=SIDE):
    """Resize (short side 256), crop 224 at an offset from ``i``, flip every other, normalise."""
    x = img.unsqueeze(0).float()
    h, w = x.shape[-2:]
    short = side * 256 // 224
    x = F.interpolate(x, size=(short, max(short, w * short // h)), mode="bilinear",
                      align_corners=False)
    top, left = (i * 7) % (x.shape[-2] - side + 1), (i * 13) % (x.shape[-1] - side + 1)
    x = x[:, :, top : top + side, left : left + side]
    if i % 2:
        x = x.flip(-1)
    x = (x / 255 - MEAN) / STD
    return x[0].contiguous()


class Images(torch.utils.data.Dataset):
    """The DataLoader's side of (b): index -> preprocessed image, as a user writes it."""

    def __init__(self, n, raw=RAW, side=SIDE):
        self.n, self.raw, self.side = n, raw, side

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return preprocess(raw_image(i, self.raw), i, self.side)


class PreprocessInfer(torch_parallel.UnorderedRunner):
    """(b): an item is a batch number; the worker preprocesses it and runs the model."""

    @staticmethod
    def producer_init(device, cfg):
        cfg.infer = Inference(device, cfg.small)

    @staticmethod
    def producer_work(device, cfg, data):
        first = data * BATCH
        batch = torch.stack([preprocess(raw_image(j, tuple(cfg.raw)), j, cfg.side)
                             for j in range(first, first + BATCH)])
        return cfg.infer.normalised(batch)

    consumer_init = InferUint8.consumer_init
    consumer_work = InferUint8.consumer_work
    consumer_end = InferUint8.consumer_end


def gpu_input_items(cfg, device, small):
    n, side = cfg.n_infer_batches, cfg.side
    images = n * BATCH
    ok = expect(images)
    mb = BATCH * 3 * side * side / 1e6
    print(f"\n(a) {model_name(small)} inference on {n} batches of {BATCH} uint8 images "
          f"({mb:.1f} MB each) as input items, vs a plain loop; best of {cfg.rounds} rounds")
    flush()
    local = Inference(device, small)  # CUDA starts here first: runner workers are spawned

    def plain():
        return sum(local.uint8(b).shape[0] for b in uint8_batches(n, side))

    contenders = [Contender("plain loop in one process", plain, ok)]
    runners = []
    try:
        for k in cfg.input_item_workers:
            r = InferUint8([device] * k, cfg={"small": small})
            runners.append(r)
            contenders.append(Contender(f"OrderedRunner([{device!r}] * {k})",
                                        lambda r=r: r(uint8_batches(n, side)), ok))
        got = take_turns(contenders, cfg.rounds)
    finally:
        for r in runners:
            r.close()
    print_rows("  uint8 batches in, logits out", got, "plain loop in one process", images,
               "images")
    two = f"OrderedRunner([{device!r}] * 2)"
    if two not in got:
        return []
    return [goal("(a) input items, 2 workers vs a plain loop",
                 got["plain loop in one process"].best / got[two].best, 1.05)]


def gpu_preprocessing(cfg, device, small):
    n, side, raw = cfg.n_prep_batches, cfg.side, cfg.raw
    images = n * BATCH
    ok = expect(images)
    print(f"\n(b) CPU preprocessing ({raw[1]}x{raw[2]} -> resize, crop {side}, flip, normalise)"
          f" + {model_name(small)} on {device}, {n} batches of {BATCH}; best of {cfg.rounds} "
          "rounds")
    flush()
    local = Inference(device, small)
    pin = torch.cuda.is_available()
    goals = []
    for k in cfg.prep_workers:
        loader = torch.utils.data.DataLoader(
            Images(images, raw, side), batch_size=BATCH, num_workers=k, persistent_workers=True,
            pin_memory=pin)

        def data_loader(loader=loader):
            return sum(local.normalised(x).shape[0] for x in loader)

        runner = PreprocessInfer([device] * k, cfg={"small": small, "raw": list(raw),
                                                    "side": side})
        try:
            got = take_turns([
                Contender(f"DataLoader(num_workers={k}, persistent, pin_memory={pin}) + "
                          "main loop",
                          data_loader, ok),
                Contender(f"UnorderedRunner([{device!r}] * {k}), cpu_threads auto "
                          f"({runner.cpu_threads})", lambda r=runner: r(range(n)), ok),
            ], cfg.rounds)
        finally:
            runner.close()
            del loader  # persistent workers end with it
        peer = next(iter(got))
        print_rows(f"  k = {k}", got, peer, images, "images")
        ours = next(name for name in got if name != peer)
        goals.append(goal(f"(b) preprocessing + inference, k={k} vs DataLoader",
                          got[peer].best / got[ours].best, 2.0))
        flush()
    return goals


class Predictor(torch_parallel.UnorderedRunner):
    """(c): the tutorial's batch predictor (example 3), counting outputs."""

    @staticmethod
    def producer_init(device, cfg):
        torch.manual_seed(0)
        cfg.model = Net().to(device).eval()

    @staticmethod
    def producer_work(device, cfg, data):
        with torch.no_grad():
            data = torch.Tensor(data).view(-1, 1).to(device)
            return cfg.model(data).cpu()

    consumer_init = InferUint8.consumer_init
    consumer_work = InferUint8.consumer_work
    consumer_end = InferUint8.consumer_end


def gpu_tutorial(cfg, device):
    numbers = list(range(cfg.n_tutorial))
    batches = [numbers[i : i + 4096] for i in range(0, len(numbers), 4096)]
    ok = expect(len(numbers))
    print(f"\n(c) the tutorial's predictor (examples/network.py) on {len(numbers):,} numbers "
          f"in batches of 4096; best of {cfg.rounds} rounds")
    torch.manual_seed(0)
    model = Net().to(device).eval()

    def plain():
        with torch.no_grad():
            return sum(model(torch.Tensor(b).view(-1, 1).to(device)).cpu().shape[0]
                       for b in batches)

    with Predictor([device, device]) as runner:
        got = take_turns([Contender("plain loop in one process", plain, ok),
                          Contender(f"UnorderedRunner([{device!r}] * 2)",
                                    lambda: runner(batches), ok)], cfg.rounds)
    print_rows("  numbers in, outputs out", got, "plain loop in one process", len(numbers),
               "items")
    return []


def section_gpu(cfg):
    if cfg.gpu_on_cpu:
        print("\n[gpu] --gpu-on-cpu: parts (a) and (b) on CPU workers with a tiny model, to "
              "check the code; these are NOT GPU numbers")
        gpu_input_items(cfg, "cpu", True)
        gpu_preprocessing(cfg, "cpu", True)
        return []  # no goals: these are not the numbers the goals are about
    if not torch.cuda.is_available():
        print("\n[gpu] skipped: torch.cuda.is_available() is False "
              f"(torch {torch.__version__}); run on a machine with a CUDA GPU "
              "(or --gpu-on-cpu to check the code path)")
        return []
    print(f"\n[gpu] {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"cudnn {torch.backends.cudnn.version()}")
    return (gpu_input_items(cfg, "cuda:0", False) + gpu_preprocessing(cfg, "cuda:0", False)
            + gpu_tutorial(cfg, "cuda:0"))


class Config:
    def __init__(self, args):
        self.cpus = available_cpus()
        quick = args.quick
        self.rounds = args.rounds or (3 if quick else 5)
        self.gpu_on_cpu = args.gpu_on_cpu
        self.n_tensors = 100 if quick else 200
        self.n_tutorial = 100_000 if quick else 400_000
        if args.gpu_on_cpu:
            self.side, self.raw = 64, (3, 96, 128)
            self.n_infer_batches = self.n_prep_batches = 4
            self.input_item_workers = [1, 2]
            self.prep_workers = [2]
        else:
            self.side, self.raw = SIDE, RAW
            self.n_infer_batches = 20 if quick else 40
            self.n_prep_batches = 12 if quick else 24
            self.input_item_workers = [1, 2, 3]
            self.prep_workers = [2, 4, 8]


SECTIONS = {"transport": section_transport, "gpu": section_gpu}


def main():
    args = parse_args(__doc__, lambda p: p.add_argument(
        "--gpu-on-cpu", action="store_true",
        help="run the GPU parts (a) and (b) on CPU workers with a tiny model (a code check)"))
    cfg = Config(args)
    wanted = args.only.split(",") if args.only else list(SECTIONS)
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}; known: {sorted(SECTIONS)}")
    print(f"easycore.torch.parallel, torch {torch.__version__}"
          f"{' (--quick)' if args.quick else ''}")
    print(f"  {machine_line()}")
    print("  ratios: the peer's best time over the contender's (above 1.00x: faster than the "
          "peer); 'per round': the same ratio round by round; 'spread': worst round over best")
    start = time.perf_counter()
    goals: List[str] = []
    for name in wanted:
        goals += SECTIONS[name](cfg)
    print("\nGoals (this run):")
    for line in goals:
        print(line)
    print(f"\n(total {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
