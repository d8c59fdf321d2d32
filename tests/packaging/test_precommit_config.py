""".pre-commit-config.yaml runs the same checks as scripts/test, offline.

The hooks are local (the tools of .venv, no repository fetched from the network) and name
the repository's own configs, so a commit is checked by the rules CI checks it by.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
HOOKS = {hook["id"]: hook for repo in CONFIG["repos"] for hook in repo["hooks"]}


def test_every_hook_is_local_so_nothing_is_fetched():
    assert [repo["repo"] for repo in CONFIG["repos"]] == ["local"] * len(CONFIG["repos"])
    assert {hook["language"] for hook in HOOKS.values()} == {"system"}


def test_ruff_hook_uses_the_ruff_of_the_test_environment_and_ruff_toml():
    entry = shlex.split(HOOKS["ruff"]["entry"])
    assert entry[:2] == [".venv/bin/ruff", "check"]
    config = entry[entry.index("--config") + 1]
    assert (ROOT / config).resolve() == ROOT / "ruff.toml"
    # scripts/test runs `ruff check .` from the root, which reads that same file.
    script = (ROOT / "scripts" / "test").read_text(encoding="utf-8")
    assert re.search(r"""/bin/ruff["']?\s+check\s+\.""", script), "scripts/test runs no ruff check"


def test_mypy_hook_checks_the_packages_with_mypy_ini():
    hook = HOOKS["mypy"]
    entry = shlex.split(hook["entry"])
    assert entry[:3] == [".venv/bin/python", "-m", "mypy"]
    assert (ROOT / entry[entry.index("--config-file") + 1]).resolve() == ROOT / "mypy.ini"
    assert hook["pass_filenames"] is False  # mypy.ini names the packages to check
