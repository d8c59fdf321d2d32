"""Benchmark easycore.common.config against plain dicts and PyYAML.

Two measurements, each printed beside its peer from the same run:

1. attribute access ``cfg.A.B`` against a plain ``d["A"]["B"]`` (goal: at most
   3x the dict), with the original easycore design (a dict subclass whose
   Python ``__getattr__`` does ``self[name]``) as an extra row;
2. loading a ~100 KB YAML config with ``CfgNode.load`` against PyYAML's
   pure-Python ``SafeLoader`` (goal: at least 3x faster), with libyaml's
   ``CSafeLoader`` as an informative row. ``CfgNode.load`` does more than
   parse: it bounds the nesting depth before the C parser sees the text (the
   pre-scan has its own informative row), refuses duplicate keys, checks
   aliases, decodes literals in unquoted scalars and builds the nodes.

Run: ``scripts/bench config`` or ``python benchmarks/bench_config.py`` (~10-20 s).
"""

from __future__ import annotations

import platform
import random
import time
import timeit

import yaml

from easycore.common.config import CfgNode
from easycore.common.config.yaml_dialect import _may_nest_deeper_than
from easycore.common.config.yaml_io import MAX_DEPTH

ACCESS_REPEAT = 5
LOAD_REPEAT = 5
TARGET_BYTES = 100_000


class OriginalCfgNode(dict):
    """The original easycore 0.4.2 design: every attribute read runs Python code."""

    def __getattr__(self, name):
        return self[name]


def to_original(value):
    if isinstance(value, dict):
        return OriginalCfgNode({k: to_original(v) for k, v in value.items()})
    return value


# ---------------------------------------------------------------- (1) access
def best_ns_per_op(stmt: str, namespace: dict) -> float:
    timer = timeit.Timer(stmt, globals=namespace)
    number, _ = timer.autorange()  # loops taking >= 0.2 s
    best = min(timer.repeat(repeat=ACCESS_REPEAT, number=number))
    return best / number * 1e9


def bench_access() -> list[tuple[str, float]]:
    plain = {"A": {"B": 1}, "OTHER": {"X": 2}}
    namespace = {
        "d": plain,
        "cfg": CfgNode(plain),
        "orig": to_original(plain),
    }
    return [
        ('d["A"]["B"]        plain dict', best_ns_per_op('d["A"]["B"]', namespace)),
        ("cfg.A.B            CfgNode", best_ns_per_op("cfg.A.B", namespace)),
        ('cfg["A"]["B"]      CfgNode items', best_ns_per_op('cfg["A"]["B"]', namespace)),
        ("orig.A.B           original design", best_ns_per_op("orig.A.B", namespace)),
    ]


# ---------------------------------------------------------------- (2) load
def experiment(rng: random.Random, index: int) -> dict:
    depth = rng.choice([18, 34, 50, 101, 152])
    size = rng.choice([224, 256, 320, 384, 512, 640])
    return {
        "NAME": f"exp{index:03d}_resnet{depth}_{size}",
        "SEED": rng.randrange(10_000),
        "MODEL": {
            "META_ARCHITECTURE": rng.choice(["GeneralizedRCNN", "RetinaNet", "Classifier"]),
            "WEIGHTS": f"/checkpoints/resnet{depth}/model_{rng.randrange(1000):04d}.pth",
            "INPUT_SIZE": f"({size}, {size})",
            "PIXEL_MEAN": "(103.53, 116.28, 123.675)",
            "BACKBONE": {
                "NAME": f"build_resnet{depth}_backbone",
                "DEPTH": depth,
                "FREEZE_AT": rng.randrange(5),
                "NORM": rng.choice(["BN", "GN", "FrozenBN", "SyncBN"]),
                "OUT_FEATURES": ["res2", "res3", "res4", "res5"][rng.randrange(3) :],
                "STRIDE_IN_1X1": rng.random() < 0.5,
            },
            "ANCHOR_GENERATOR": {
                "SIZES": [[32], [64], [128], [256], [512]],
                "ASPECT_RATIOS": [[0.5, 1.0, 2.0]],
                "OFFSET": 0.0,
            },
            "ROI_HEADS": {
                "NUM_CLASSES": rng.choice([10, 80, 100, 1000]),
                "BATCH_SIZE_PER_IMAGE": rng.choice([128, 256, 512]),
                "SCORE_THRESH_TEST": round(rng.uniform(0.01, 0.5), 3),
                "NMS_THRESH_TEST": round(rng.uniform(0.3, 0.7), 2),
                "IN_FEATURES": ["p2", "p3", "p4", "p5"],
            },
        },
        "DATASETS": {
            "TRAIN": [f"coco_2017_train_{rng.randrange(4)}"],
            "TEST": ["coco_2017_val"],
            "ROOT": "/datasets/coco",
        },
        "DATALOADER": {"NUM_WORKERS": rng.choice([2, 4, 8]), "ASPECT_GROUPING": True},
        "SOLVER": {
            "IMS_PER_BATCH": rng.choice([8, 16, 32, 64]),
            "BASE_LR": round(rng.uniform(1e-4, 1e-1), 5),
            "MOMENTUM": 0.9,
            "WEIGHT_DECAY": 0.0001,
            "STEPS": sorted(rng.sample(range(10_000, 200_000, 1_000), 3)),
            "MAX_ITER": rng.choice([90_000, 180_000, 270_000]),
            "WARMUP": {"ITERS": 1000, "FACTOR": 0.001, "METHOD": "linear"},
        },
        "INPUT": {
            "MIN_SIZE_TRAIN": f"({size - 32}, {size}, {size + 32})",
            "MAX_SIZE_TRAIN": 1333,
            "FORMAT": rng.choice(["BGR", "RGB"]),
            "CROP": {"ENABLED": rng.random() < 0.3, "SIZE": "[0.9, 0.9]"},
        },
        "TAGS": rng.sample(["baseline", "ablation", "long", "fp16", "ema", "large"], 3),
        "NOTES": f"run {index} on {rng.choice(['a100', 'h100', 'v100'])} nodes",
    }


def make_config_text(target_bytes: int = TARGET_BYTES) -> str:
    rng = random.Random(0)
    data: dict = {"VERSION": 2, "OUTPUT_DIR": "./output", "EXPERIMENTS": {}}
    text = ""
    index = 0
    while len(text.encode()) < target_bytes:
        for _ in range(10):
            data["EXPERIMENTS"][f"EXP_{index:03d}"] = experiment(rng, index)
            index += 1
        text = yaml.safe_dump(data, default_flow_style=False, sort_keys=False)
    return text


def best_seconds(func, repeat: int = LOAD_REPEAT) -> float:
    func()  # warm up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_load(text: str) -> list[tuple[str, float | None]]:
    rows: list[tuple[str, float | None]] = [
        (
            "yaml.load(SafeLoader)     pure-Python peer",
            best_seconds(lambda: yaml.load(text, Loader=yaml.SafeLoader)),
        ),
        ("CfgNode.load              easycore", best_seconds(lambda: CfgNode.load(text))),
    ]
    c_loader = getattr(yaml, "CSafeLoader", None)
    rows.append(
        (
            "yaml.load(CSafeLoader)    libyaml, informative",
            best_seconds(lambda: yaml.load(text, Loader=c_loader)) if c_loader else None,
        )
    )
    assert not _may_nest_deeper_than(text, MAX_DEPTH)  # the exact count is not needed
    rows.append(
        (
            "depth pre-scan            part of CfgNode.load",
            best_seconds(lambda: _may_nest_deeper_than(text, MAX_DEPTH)),
        )
    )
    return rows


# ---------------------------------------------------------------- report
def main() -> None:
    started = time.perf_counter()
    print(
        f"easycore.common.config benchmark: Python {platform.python_version()}, "
        f"PyYAML {yaml.__version__} (libyaml: {'yes' if yaml.__with_libyaml__ else 'no'})"
    )

    access = bench_access()
    dict_ns = access[0][1]
    cfg_ratio = access[1][1] / dict_ns
    print()
    print(f"(1) attribute access, timeit best of {ACCESS_REPEAT} repeats (>= 0.2 s each)")
    print(f"    {'case':<40} {'ns/read':>9} {'vs dict':>9}")
    for name, ns in access:
        print(f"    {name:<40} {ns:>9.1f} {ns / dict_ns:>8.2f}x")
    verdict = "met" if cfg_ratio <= 3 else "NOT met"
    print(f"    goal: cfg.A.B <= 3x plain dict -> {cfg_ratio:.2f}x ({verdict})")
    print(f"    original design is {access[3][1] / access[1][1]:.1f}x slower than CfgNode")

    text = make_config_text()
    cfg = CfgNode.load(text)
    assert "&" not in text and "*" not in text  # no anchors: a plain, realistic file
    assert cfg.EXPERIMENTS.EXP_000.MODEL.INPUT_SIZE[0] > 0  # tuples decoded
    assert cfg.dict().keys() == yaml.load(text, Loader=yaml.SafeLoader).keys()
    load = bench_load(text)
    safe_s = load[0][1]
    speedup = safe_s / load[1][1]
    print()
    print(
        f"(2) load a {len(text.encode()) / 1000:.1f} KB YAML config "
        f"({len(cfg.EXPERIMENTS)} experiments, {text.count(chr(10)):,} lines), "
        f"best of {LOAD_REPEAT}"
    )
    print(f"    {'case':<48} {'ms':>8} {'speed-up vs SafeLoader':>23}")
    for name, seconds in load:
        if seconds is None:
            print(f"    {name:<48} {'n/a':>8} {'n/a':>23}")
        else:
            print(f"    {name:<48} {seconds * 1e3:>8.1f} {safe_s / seconds:>22.2f}x")
    verdict = "met" if speedup >= 3 else "NOT met"
    print(f"    goal: CfgNode.load >= 3x faster than SafeLoader -> {speedup:.2f}x ({verdict})")
    print()
    print(f"total time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
