"""Extract runnable examples from the documentation's Markdown files.

The convention (written up for authors in ``docs/about-examples.md``):

* Every fenced ``python`` block of a page is an example. The blocks of one
  page run **together, in page order, as one script**, in a fresh temporary
  directory (the working directory), in a subprocess with a timeout. Later
  blocks may use names and files made by earlier ones.
* A fenced block of any language with a ``title="relative/path"`` attribute is
  a **file**: it is written into that directory before the script starts and is
  not executed (``title="network.py"`` makes ``import network`` work, a
  ``yaml`` block titled ``example.yaml`` is the file the example opens).
* A block whose first line is ``# requires: NAME[, NAME...]`` runs only where
  those are available; see :data:`REQUIREMENTS`. For each set of requirements
  used on a page the page yields one more script: the plain blocks plus the
  blocks that need (a subset of) that set. Plain blocks never depend on gated ones.
* Other languages (``text``, ``console``, ``bash``, ``yaml`` without a title)
  are shown, never run.

The generated script keeps every example line at its line number in the
Markdown file, so a traceback's line numbers are the page's line numbers.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# Markdown files outside docs/ whose examples are tested too: the READMEs.
EXTRA_PAGES = [
    "README.md",
    "packages/easycore-config/README.md",
    "packages/easycore-registry/README.md",
    "packages/easycore-parallel/README.md",
    "packages/easycore-path/README.md",
    "packages/easycore-torch/README.md",
    "packages/easycore/README.md",
]

_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>.*)$")
_REQUIRES = re.compile(r"^#\s*requires:\s*(?P<names>.+?)\s*$")
_TITLE = re.compile(r"""title\s*=\s*(?P<q>["'])(?P<title>.+?)(?P=q)""")
_URL = re.compile(r"""\b(?:https?|ftp)://(?P<host>\[[^\]]*\]|[^/:\s"'{}]*)(?P<next>.?)""")
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]"}


def _have_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


@cache
def _have_cuda() -> bool:
    if not _have_module("torch"):
        return False
    # In a subprocess: importing torch (and initialising CUDA) in the test
    # process would slow down and change every other test.
    probe = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"
    try:
        return subprocess.run([sys.executable, "-c", probe], timeout=120).returncode == 0
    except subprocess.TimeoutExpired:
        return False


#: name -> (is it available here?, why a block is skipped when it is not).
REQUIREMENTS = {
    "torch": (lambda: _have_module("torch"), "PyTorch is not installed"),
    "ray": (lambda: _have_module("ray"), "Ray is not installed"),
    # A page's example that starts a local cluster of several nodes (slow) runs as a
    # script of its own, not with the page's other Ray examples.
    "ray-nodes": (lambda: _have_module("ray"), "Ray is not installed"),
    # the peers of the "Coming from" pages: their side runs where they are installed
    # (the bench environment), so the page shows both giving the same answer
    "joblib": (lambda: _have_module("joblib"), "joblib is not installed"),
    "mpire": (lambda: _have_module("mpire"), "mpire is not installed"),
    "cuda": (_have_cuda, "no CUDA GPU"),
    "cluster": (
        lambda: bool(os.environ.get("EASYCORE_DOCS_CLUSTER")),
        "needs a running Ray cluster (set EASYCORE_DOCS_CLUSTER=1 on a cluster node)",
    ),
    "network": (
        lambda: False,
        "documentation only: would contact a host other than loopback",
    ),
}


@dataclass
class Block:
    """One fenced block of a Markdown file."""

    page: str  # path relative to the repository root
    start: int  # 1-based line number of the first line inside the fence
    lang: str
    title: str | None
    lines: list[str]
    requires: frozenset[str] = field(default_factory=frozenset)

    @property
    def is_example(self) -> bool:
        return self.lang in {"python", "py", "python3"} and self.title is None

    @property
    def is_file(self) -> bool:
        return self.title is not None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.start}"


@dataclass
class Script:
    """The examples of one page that run together under one set of requirements."""

    page: str
    requires: frozenset[str]
    blocks: list[Block]  # examples, in page order
    files: list[Block]  # file blocks of the page
    n_lines: int

    @property
    def id(self) -> str:
        suffix = f"[{','.join(sorted(self.requires))}]" if self.requires else ""
        return f"{self.page}{suffix}"

    def source(self) -> str:
        """The script text, each example line at its line number in the page."""
        out = [""] * self.n_lines
        for block in self.blocks:
            for offset, line in enumerate(block.lines):
                out[block.start - 1 + offset] = line
        return "\n".join(out) + "\n"

    def missing(self) -> list[str]:
        """Reasons this script cannot run here (empty when it can)."""
        return [
            REQUIREMENTS[name][1] for name in sorted(self.requires) if not REQUIREMENTS[name][0]()
        ]


def parse_blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, with its language, title and requirements."""
    page = path.relative_to(ROOT).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = _FENCE_OPEN.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, info = match["indent"], match["fence"], match["info"]
        if fence[0] == "`" and "`" in info:  # CommonMark: inline code, not a fence
            i += 1
            continue
        close = re.compile(rf"^{re.escape(indent)}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        if j == len(lines):
            raise ValueError(f"{page}:{i + 1}: code fence is never closed")
        body = textwrap.dedent("\n".join(line.removeprefix(indent) for line in lines[i + 1 : j]))
        lang = info.strip().lstrip("{").strip().lstrip(".").split(maxsplit=1)
        title = _TITLE.search(info)
        block = Block(
            page=page,
            start=i + 2,
            lang=lang[0].lower().rstrip("}") if lang else "",
            title=title["title"] if title else None,
            lines=body.split("\n") if body else [],
        )
        if block.is_example and block.lines:
            req = _REQUIRES.match(block.lines[0].strip())
            if req:
                names = frozenset(n.strip() for n in req["names"].split(",") if n.strip())
                unknown = names - REQUIREMENTS.keys()
                if unknown:
                    raise ValueError(
                        f"{block.where}: unknown requirement(s) {sorted(unknown)}; "
                        f"known: {sorted(REQUIREMENTS)}"
                    )
                block.requires = names
        blocks.append(block)
        i = j + 1
    return blocks


def pages() -> list[Path]:
    """The Markdown files whose examples are tested."""
    found = sorted(DOCS.rglob("*.md"))
    found += [ROOT / p for p in EXTRA_PAGES if (ROOT / p).is_file()]
    return found


def scripts_of(path: Path) -> list[Script]:
    """The scripts one page yields: its plain examples, then one per requirement set."""
    blocks = parse_blocks(path)
    examples = [b for b in blocks if b.is_example]
    files = [b for b in blocks if b.is_file]
    n_lines = len(path.read_text(encoding="utf-8").splitlines())
    page = path.relative_to(ROOT).as_posix()
    sets = sorted({b.requires for b in examples if b.requires}, key=sorted)
    out = []
    if any(not b.requires for b in examples):
        plain = [b for b in examples if not b.requires]
        out.append(Script(page, frozenset(), plain, files, n_lines))
    for req in sets:
        chosen = [b for b in examples if b.requires <= req]
        out.append(Script(page, req, chosen, files, n_lines))
    return out


def all_scripts() -> list[Script]:
    return [s for p in pages() for s in scripts_of(p)]


def foreign_hosts(script: Script) -> list[str]:
    """URLs in a script's examples whose host is not loopback (examples must not use them)."""
    bad = []
    for block in script.blocks:
        for offset, line in enumerate(block.lines):
            for match in _URL.finditer(line):
                if match["host"] in LOOPBACK_HOSTS:
                    continue
                if not match["host"] and match["next"] in ("", '"', "'"):
                    continue  # a bare scheme prefix such as "http://"
                bad.append(f"{block.page}:{block.start + offset}: {match.group(0)}")
    return bad
