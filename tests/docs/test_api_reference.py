"""The API reference documents every public name of the five packages."""

from __future__ import annotations

import importlib
import re

import pytest
from docblocks import DOCS

#: The public modules and where their reference lives.
MODULES = [
    "easycore.common.config",
    "easycore.common.registry",
    "easycore.common.path",
    "easycore.common.network",
    "easycore.common.parallel",
    "easycore.torch.parallel",
    "easycore.torch.distributed",
    "easycore.torch.placement",
]

_DIRECTIVE = re.compile(r"^:::\s*(?P<target>[\w.]+)\s*$")


def _directives() -> list[tuple[str, str]]:
    """(target, options text) of every ``::: target`` in docs/api."""
    found = []
    for page in sorted((DOCS / "api").glob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            match = _DIRECTIVE.match(line)
            if not match:
                continue
            options = []
            for follow in lines[i + 1 :]:
                if follow.strip() and not follow.startswith((" ", "\t")):
                    break
                options.append(follow)
            found.append((match["target"], "\n".join(options)))
    return found


def _documented(module: str, name: str, obj: object, directives: list[tuple[str, str]]) -> bool:
    for target, options in directives:
        if target == f"{module}.{name}":
            return True
        whole = "members:" not in options
        if target == module and whole:
            return True
        if module.startswith(target + ".") and whole and "show_submodules: true" in options:
            return True
        # the same object documented under another module (a re-export)
        owner, _, attr = target.rpartition(".")
        if attr == name and owner != module:
            try:
                if getattr(importlib.import_module(owner), attr) is obj:
                    return True
            except (ImportError, AttributeError):
                pass
    return False


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_is_documented(module: str) -> None:
    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        pytest.fail(f"{module} cannot be imported ({err}); its API page cannot be built")
    names = [n for n in getattr(mod, "__all__", []) if not n.startswith("_")]
    assert names, f"{module} exports nothing (no __all__)"
    directives = _directives()
    missing = [n for n in names if not _documented(module, n, getattr(mod, n), directives)]
    assert not missing, f"not in docs/api/*.md: {', '.join(f'{module}.{n}' for n in missing)}"
