"""User code that mypy checks (tests/config/test_config_typing.py); it also runs.

Methods that build a config return the class they are called on, so a subclass
keeps its own methods through `open`, `load` and `copy`.
"""

from __future__ import annotations

import io
from typing import Any

from typing_extensions import assert_type

from easycore.common.config import CfgNode, ConfigError, HierarchicalCfgNode


class TrainConfig(CfgNode):
    def learning_rate(self) -> float:
        return float(self.SOLVER.LR)


def main() -> None:
    cfg = TrainConfig.load("SOLVER:\n  LR: 0.1\nMODEL:\n  SIZE: (224, 224)\n")
    assert_type(cfg, TrainConfig)
    assert_type(cfg.copy(), TrainConfig)
    assert_type(TrainConfig.open(io.StringIO("A: 1\n")), TrainConfig)
    assert_type(CfgNode.load("A: 1\n"), CfgNode)
    cfg.merge_from_list(["SOLVER.LR=0.01"])
    lr: float = cfg.learning_rate()
    size: Any = cfg.MODEL.SIZE  # values are Any: a config is data read at run time
    cfg.merge(CfgNode({"SOLVER": {"MOMENTUM": 0.9}}))
    cfg.freeze()
    frozen: bool = cfg.is_frozen()
    text = CfgNode.dump(cfg)
    assert_type(text, "str | None")
    with io.StringIO() as buffer:
        cfg.save(buffer)
    plain: dict[str, Any] = cfg.dict()
    try:
        CfgNode.load("A: [")
    except ConfigError as err:
        message: str = str(err)
        assert message
    assert lr == 0.01 and size == (224, 224) and frozen and text and plain
    _ = HierarchicalCfgNode.__BASE__


if __name__ == "__main__":
    main()
