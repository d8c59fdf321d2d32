"""No module of the connection layer, the Queue or services imports a private name
(one underscore) of another module (issue 35 item 5): what another module needs
is public, or lives with it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import easycore.common.parallel as parallel

ROOT = Path(parallel.__file__).parent


@pytest.mark.parametrize("package", ["connection", "queue", "services"])
def test_no_private_name_is_imported_from_another_module(package):
    found = []
    for path in sorted((ROOT / package).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                found += [f"{path.name}:{node.lineno} {alias.name} from {node.module}"
                          for alias in node.names
                          if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert found == []
