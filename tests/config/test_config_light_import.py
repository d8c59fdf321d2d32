"""Light means light: importing the config package does not import PyYAML (issue 16).

An app that builds its config from a dict, or a tool that imports the package
only to type-check, never pays for YAML. Run in a fresh interpreter, since the
test process has long imported everything. (How long the import takes is
measured by benchmarks/bench_import.py, not here.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

TIMEOUT = 60

SCRIPT = textwrap.dedent(
    """
    import json, sys
    HEAVY = ["yaml", "typing", "ast", "difflib", "copy", "tempfile", "collections", "datetime"]
    before = set(sys.modules)
    from easycore.common.config import CfgNode, HierarchicalCfgNode
    after_import = [m for m in HEAVY if m in sys.modules and m not in before]

    cfg = CfgNode({"MODEL": {"NAME": "resnet", "SIZE": (224, 224)}})
    cfg.merge(CfgNode({"MODEL": {"DEPTH": 50}}))
    cfg.MODEL.DEPTH = 101
    cfg.freeze()
    yaml_after_dict_use = "yaml" in sys.modules

    CfgNode.load("A: 1")
    yaml_after_load = "yaml" in sys.modules
    print(json.dumps([after_import, yaml_after_dict_use, yaml_after_load]))
    """
)


def test_importing_and_using_configs_without_yaml_never_imports_pyyaml():
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert result.returncode == 0, result.stderr
    after_import, yaml_after_dict_use, yaml_after_load = json.loads(result.stdout)
    assert after_import == [], f"importing easycore.common.config imported {after_import}"
    assert not yaml_after_dict_use
    assert yaml_after_load  # the first YAML read brings it in


LEAN_SCRIPT = textwrap.dedent(
    """
    import json, pickle, sys
    PARTS = ["hierarchical", "files", "yaml_io", "literal", "overrides"]
    from easycore.common.config import CfgNode
    cfg = pickle.loads(pickle.dumps(CfgNode({"MODEL": {"DEPTH": 50}})))  # as a worker gets it
    cfg.MODEL.DEPTH = 101
    cfg.copy().freeze()
    loaded = [p for p in PARTS if "easycore.common.config." + p in sys.modules]
    from easycore.common.config import HierarchicalCfgNode  # a name still there when asked
    cfg.merge_from_list(["MODEL.DEPTH", "18"])
    print(json.dumps([loaded, HierarchicalCfgNode.__name__, cfg.MODEL.DEPTH]))
    """
)


def test_a_config_built_from_a_dict_loads_no_file_yaml_or_override_part():
    # What a runner's or a pool's workers do with their cfg (unpickle, read, write,
    # copy, freeze): the modules for files, YAML, literals and overrides, and the
    # hierarchical configs, come in only when used (~1 ms of every worker's start).
    result = subprocess.run(
        [sys.executable, "-c", LEAN_SCRIPT], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [[], "HierarchicalCfgNode", 18]
