"""Tutorial: light-weight, safe YAML configs with easycore.common.config.

Follows the easycore config tutorial end to end in the current directory
(``scripts/demo`` runs it in a fresh scratch directory):

    cd "$(mktemp -d)" && python /path/to/examples/10_config_tutorial.py

It writes example.yaml, example-A.yaml and example-B.yaml, then loads, uses,
merges, copies, saves, opens a hierarchical config, freezes, applies
overrides, and shows an unsafe YAML file being refused.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from easycore.common.config import CfgNode as CN
from easycore.common.config import ConfigError, FrozenError, HierarchicalCfgNode

# The documented example.yaml (its "IN_FEATRES" typo corrected to match the code below).
EXAMPLE_YAML = """\
MODEL:
  IN_FEATURES: ["res3", "res4", "res5"]
  INPUT_SIZE: (224, 224)
  NUM_CLASSES: 100
NAME: YuxinZhaozyx
"""

EXAMPLE_A = """\
__BASE__: ./example-B.yaml
A: in example-A.yaml
C: in example-A.yaml
"""

EXAMPLE_B = """\
A: in example-B.yaml
B: in example-B.yaml
"""


def section(title: str) -> None:
    print(f"\n=== {title} " + "=" * max(0, 66 - len(title)))


def show(label: str, value: object) -> None:
    print(f"  {label:<34} {value!r}")


def show_file(path: str) -> None:
    print(f"  --- {path} ---")
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        print(f"  | {line}")


def main() -> None:
    for name, text in [
        ("example.yaml", EXAMPLE_YAML),
        ("example-A.yaml", EXAMPLE_A),
        ("example-B.yaml", EXAMPLE_B),
    ]:
        Path(name).write_text(text, encoding="utf-8")
    print(f"working in {Path.cwd()}")

    section("1. load a config from a yaml file")
    show_file("example.yaml")
    cfg = CN.open("example.yaml")
    with open("example.yaml", encoding="utf-8") as f:
        assert CN.open(f) == cfg  # a file object works too
    print(f"  cfg = {cfg}")
    show("cfg.MODEL.IN_FEATURES (list)", cfg.MODEL.IN_FEATURES)
    show("cfg.MODEL.INPUT_SIZE (tuple!)", cfg.MODEL.INPUT_SIZE)
    show("cfg.MODEL.NUM_CLASSES (int)", cfg.MODEL.NUM_CLASSES)
    show("cfg.NAME (str)", cfg.NAME)
    assert cfg.MODEL.INPUT_SIZE == (224, 224)

    section("2. an empty config, and one from a python dict")
    show("CN()", CN())
    init_dict: dict[str, Any] = {
        "MODEL": {
            "IN_FEATURES": ["res3", "res4", "res5"],
            "INPUT_SIZE": (224, 224),
            "NUM_CLASSES": 100,
        },
        "NAME": "YuxinZhaozyx",
    }
    cfg = CN(init_dict)
    show("CN(init_dict) == the yaml file", cfg == CN.open("example.yaml"))
    shared = CN(init_dict, copy=False)
    same_list = shared.MODEL.IN_FEATURES is init_dict["MODEL"]["IN_FEATURES"]
    show("copy=False shares leaf values", same_list)

    section("3. use the config")
    cfg.LICENSE = "MIT"
    cfg.SOLVER = CN()
    cfg.SOLVER.LEARNING_RATE = 0.001
    cfg.SOLVER.BATCH_SIZE = 128
    show('cfg["SOLVER"]["BATCH_SIZE"]', cfg["SOLVER"]["BATCH_SIZE"])
    print(f"  cfg = {cfg}")
    try:
        print(cfg.MODEL.NUM_CLASS)
    except AttributeError as exc:
        print(f"  a typo names the full path:      {exc}")

    section("4. merge two configs (the argument wins)")
    cfg_a = CN()
    cfg_a.key1 = 1
    cfg_a.key2 = 2
    cfg_b = CN()
    cfg_b.key2 = 3
    cfg_b.key3 = 4
    cfg_a.merge(cfg_b)
    show("cfg_a after cfg_a.merge(cfg_b)", cfg_a.dict())
    assert cfg_a.key2 == 3

    section("5. copy a config (deep)")
    cfg_copy = cfg.copy()
    cfg_copy.MODEL.IN_FEATURES.append("res6")
    show("copy's IN_FEATURES", cfg_copy.MODEL.IN_FEATURES)
    show("original's IN_FEATURES", cfg.MODEL.IN_FEATURES)

    section("6. save to a yaml file and open it again")
    cfg.save("example-save.yaml")
    with open("example-save-2.yaml", "w", encoding="utf-8") as f:
        cfg.save(f)  # file objects work (text or binary)
    show_file("example-save.yaml")
    again = CN.open("example-save.yaml")
    show("reopened == saved", again == cfg)
    show("tuple is still a tuple", again.MODEL.INPUT_SIZE)
    print(f"  CN.dump(cfg_a) -> {CN.dump(cfg_a)!r}")

    section("7. hierarchical configs: __BASE__")
    show_file("example-A.yaml")
    show_file("example-B.yaml")
    cfg = HierarchicalCfgNode.open("./example-A.yaml")
    print(f"  HierarchicalCfgNode.open('./example-A.yaml') = {cfg}")
    cfg.D = "added later"
    HierarchicalCfgNode.save(cfg, "example-A-save.yaml", base_cfg_path="example-B.yaml")
    print("  saved against example-B.yaml, only the differences are written:")
    show_file("example-A-save.yaml")
    assert HierarchicalCfgNode.open("example-A-save.yaml") == cfg

    section("8. freeze: a frozen config refuses every change")
    cfg = CN.open("example.yaml")
    cfg.freeze()
    show("cfg.is_frozen()", cfg.is_frozen())
    for what, change in [
        ("cfg.NAME = 'x'", lambda: setattr(cfg, "NAME", "x")),
        ('cfg["NAME"] = "x"', lambda: cfg.__setitem__("NAME", "x")),
        ("cfg.MODEL.update(NUM_CLASSES=1)", lambda: cfg.MODEL.update(NUM_CLASSES=1)),
    ]:
        try:
            change()
        except FrozenError as exc:
            print(f"  {what:<34} -> FrozenError: {exc}")
    cfg.freeze(False)
    show("after cfg.freeze(False)", cfg.is_frozen())

    section("9. command-line style overrides")
    cfg.merge_from_list(["MODEL.NUM_CLASSES=10", "MODEL.INPUT_SIZE=[320, 320]", "NAME=run1"])
    show("MODEL.NUM_CLASSES", cfg.MODEL.NUM_CLASSES)
    show("MODEL.INPUT_SIZE (kept a tuple)", cfg.MODEL.INPUT_SIZE)
    for bad in (["MODEL.NUM_CLASES=10"], ["MODEL.NUM_CLASSES=ten"]):
        try:
            cfg.merge_from_list(bad)
        except (KeyError, ConfigError) as exc:
            print(f"  {bad[0]:<34} -> {type(exc).__name__}: {exc}")
    command = [sys.executable, "-m", "easycore.common.config", "example-A.yaml", "--set", "B=cli"]
    print("  $ python -m easycore.common.config example-A.yaml --set B=cli")
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    for line in result.stdout.splitlines():
        print(f"  | {line}")

    section("10. config files never run code")
    Path("evil.yaml").write_text(
        "NAME: innocent\nMODEL: !!python/object/apply:os.system ['touch pwned.txt']\n",
        encoding="utf-8",
    )
    show_file("evil.yaml")
    try:
        CN.open("evil.yaml")
    except ConfigError as exc:
        print(f"  refused: {exc}")
    show("pwned.txt exists?", Path("pwned.txt").exists())
    assert not Path("pwned.txt").exists()

    print("\nconfig tutorial done.")


if __name__ == "__main__":
    main()
