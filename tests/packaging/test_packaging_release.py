"""scripts/release.py on a temporary copy of the packages tree (never the real one).

Its `build` command is exercised by the session's `artifacts` fixture.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
SIBLING_PIN = re.compile(r'"(easycore[a-z-]*(?:\[[a-z]+\])?)>=([^,"]+),<([^"]+)"')


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """scripts/release.py and packages/ copied; the script works on the tree it sits in."""
    (tmp_path / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "release.py", tmp_path / "scripts")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "dist", "build")
    shutil.copytree(ROOT / "packages", tmp_path / "packages", ignore=ignore)
    return tmp_path


def release(tree: Path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(tree / "scripts" / "release.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def snapshot(tree: Path) -> dict[Path, str]:
    files = [*tree.glob("packages/*/pyproject.toml"), *tree.glob("packages/**/*version.py")]
    return {f.relative_to(tree): f.read_text(encoding="utf-8") for f in files}


def pins(files: dict[Path, str]) -> list[tuple[str, str, str]]:
    """(name, lower, upper) of every sibling pin in the snapshot's pyprojects."""
    return [
        pin for f, text in files.items() if f.suffix == ".toml" for pin in SIBLING_PIN.findall(text)
    ]


def test_bump_rewrites_every_version_source_and_sibling_pin(tree):
    before = snapshot(tree)
    done = release(tree, "bump", "0.7.2")
    assert done.returncode == 0, done.stderr
    after = snapshot(tree)

    sources = [f for f in after if f.name.endswith("version.py")]
    assert len(sources) == 6  # five leaves' _version.py and the meta-package's version.py
    for f in sources:
        assert '__version__ = "0.7.2"' in after[f], f

    # parallel on config, torch on parallel, the meta-package's four and its extras' six.
    assert len(pins(before)) == len(pins(after)) == 12
    assert {(low, high) for _, low, high in pins(after)} == {("0.7.2", "0.8")}

    # Nothing else moved: undoing the pins gives back the original pyprojects.
    for f in after:
        if f.name == "pyproject.toml":
            undone = SIBLING_PIN.sub(lambda m: f'"{m.group(1)}>=0.5.0,<0.6"', after[f])
            assert undone == SIBLING_PIN.sub(lambda m: f'"{m.group(1)}>=0.5.0,<0.6"', before[f])


def test_bump_to_a_new_major_pins_below_its_next_minor(tree):
    assert release(tree, "bump", "1.0.0").returncode == 0
    text = (tree / "packages" / "easycore" / "pyproject.toml").read_text(encoding="utf-8")
    assert '"easycore-parallel[ray]>=1.0.0,<1.1"' in text


@pytest.mark.parametrize("version", ["1.2", "v1.2.3", "1.2.3rc1", ""])
def test_bump_refuses_anything_but_major_minor_patch(tree, version):
    before = snapshot(tree)
    done = release(tree, "bump", version)
    assert done.returncode != 0
    assert "MAJOR.MINOR.PATCH" in done.stderr
    assert snapshot(tree) == before


def test_bump_refuses_a_sibling_pin_it_cannot_rewrite_and_changes_nothing(tree):
    pyproject = tree / "packages" / "easycore-torch" / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    pyproject.write_text(text.replace('"easycore-parallel>=0.5.0,<0.6"', '"easycore-parallel"'))
    before = snapshot(tree)
    done = release(tree, "bump", "0.6.0")
    assert done.returncode != 0
    assert "easycore-parallel" in done.stderr
    assert snapshot(tree) == before  # not even the version sources were written


def test_build_refuses_disagreeing_versions_before_building(tree):
    source = tree / "packages" / "easycore-registry" / "src" / "easycore" / "common"
    (source / "registry" / "_version.py").write_text('__version__ = "0.5.1"\n')
    done = release(tree, "build", "--no-isolation", "--outdir", str(tree / "out"))
    assert done.returncode != 0
    assert "easycore-registry 0.5.1" in done.stderr
    assert not (tree / "out").exists()
