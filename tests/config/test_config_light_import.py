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
