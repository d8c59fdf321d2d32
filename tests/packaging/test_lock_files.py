"""The lock files (requirements/lock/*.txt, made by scripts/lock) stay in step with
what they lock, and scripts/lowest_constraints.py follows the pyprojects' floors.

A dependency added to a pyproject or a requirements file after the lock was made
fails here with the command that fixes it, before anyone installs a stale lock.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[2]
LOCKS = ["docs", "test", "bench"]
# The distributions (and extras) each environment holds, as scripts/_env.sh's
# distributions_for says: the docs environment leaves out torch and Ray.
LIGHT = ["easycore-config", "easycore-registry", "easycore-path", "easycore-parallel", "easycore"]
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def pins(name: str) -> dict[str, Version]:
    """Package -> pinned version in requirements/lock/NAME.txt; each pin has hashes."""
    text = (ROOT / "requirements" / "lock" / f"{name}.txt").read_text(encoding="utf-8")
    found = {}
    for entry in re.split(r"\n(?=\S)", text):
        match = _PIN.match(entry)
        if match:
            assert "--hash=sha256:" in entry, f"lock/{name}.txt: {match[1]} has no hash"
            found[canonicalize_name(match[1])] = Version(match[2])
    return found


def distribution_requirements(with_extras: bool) -> list[Requirement]:
    found = []
    for pyproject in sorted(ROOT.glob("packages/*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        if not with_extras and project["name"] not in LIGHT:
            continue
        found += [Requirement(r) for r in project.get("dependencies", [])]
        if with_extras:
            for extra in project.get("optional-dependencies", {}).values():
                found += [Requirement(r) for r in extra]
    return [r for r in found if not canonicalize_name(r.name).startswith("easycore")]


def file_requirements(name: str) -> list[Requirement]:
    """The requirements in requirements/NAME.txt, following `-r` includes."""
    found = []
    for line in (ROOT / "requirements" / name).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r"):
            found += file_requirements(line[2:].strip())
        elif line:
            found.append(Requirement(line))
    return found


@pytest.mark.parametrize("name", LOCKS)
def test_the_lock_satisfies_every_requirement(name: str) -> None:
    locked = pins(name)
    wanted = distribution_requirements(with_extras=name != "docs") + file_requirements(
        f"{name}.txt"
    )
    stale = []
    for requirement in wanted:
        version = locked.get(canonicalize_name(requirement.name))
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            stale.append(f"{requirement} (locked: {version})")
    assert not stale, (
        f"requirements/lock/{name}.txt is out of date: {', '.join(stale)}; "
        "run scripts/lock and commit requirements/lock/"
    )


def test_the_test_lock_has_the_cpu_build_of_torch_and_no_cuda_packages() -> None:
    locked = pins("test")
    assert locked["torch"].local == "cpu"
    assert not [p for p in locked if p.startswith("nvidia-")]


def test_lowest_constraints_are_the_floors_of_the_pyprojects() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "lowest_constraints.py")],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    constraints = dict(line.split("==") for line in out.splitlines() if "==" in line)
    expected: dict[str, str] = {}
    for requirement in distribution_requirements(with_extras=True):
        name = canonicalize_name(requirement.name)
        if name == "torch":  # requirements/test.txt pins the CPU build: it stays
            continue
        (floor,) = [s.version for s in requirement.specifier if s.operator in (">=", "==", "~=")]
        if name not in expected or Version(floor) > Version(expected[name]):
            expected[name] = floor
    assert constraints == expected
