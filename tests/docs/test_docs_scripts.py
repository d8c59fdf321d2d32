"""What the documentation says `scripts/test` runs is what it runs (issue 34, item 27).

The steps are read from the script itself (its `step "NAME" ...` lines, and the names it
builds in `name="..."`), so a step added there fails this test until every page that
describes the whole run names it.
"""

from __future__ import annotations

import re

import pytest
from docblocks import ROOT

#: A step of scripts/test (the start of its "==> " line) -> the words a description uses.
WORDS = {
    "ruff": "ruff",
    "import contracts": "import contracts",
    "mypy": "mypy",
    "pytest": "pytest",
    "docs": "docs build",
}
#: Pages that describe `scripts/test` run without arguments (the whole suite).
PAGES = ["README.md", "docs/index.md", "docs/installation.md", "scripts/README.md"]


def steps() -> list[str]:
    script = (ROOT / "scripts" / "test").read_text(encoding="utf-8")
    found = re.findall(r'^\s*(?:step "([^"$][^"]*)"|name="([^"$][^"]*)")', script, re.M)
    names: list[str] = []
    for line in (a or b for a, b in found):
        name = next((step for step in WORDS if line.startswith(step)), None)
        assert name is not None, f"scripts/test has a step this test does not know: {line!r}"
        if name not in names:
            names.append(name)
    return names


def test_the_script_has_the_steps_this_test_knows():
    assert steps() == ["ruff", "import contracts", "mypy", "pytest", "docs"]


def description(text: str) -> str:
    """The words after `scripts/test` with no arguments: its comment and those under it."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = re.search(r"(?:\$ |`)scripts/test(?: \[pytest args\])?`?\s+(?:#|\|)(.*)", line)
        if match is None:
            continue
        parts = [match.group(1)]
        for following in lines[i + 1 :]:
            comment = re.match(r"\s+#(.*)", following)
            if comment is None:
                break
            parts.append(comment.group(1))
        return " ".join(" ".join(parts).split())
    raise AssertionError("no description of scripts/test found")


@pytest.mark.parametrize("page", PAGES)
def test_every_description_of_the_whole_run_names_every_step(page):
    said = description((ROOT / page).read_text(encoding="utf-8"))
    missing = [WORDS[step] for step in steps() if WORDS[step] not in said]
    assert not missing, f"{page} says scripts/test runs {said!r}; it does not name {missing}"
