"""The lock files (requirements/lock/*.txt, made by scripts/lock) stay in step with
what they lock, the universal ones fit every Python the distributions admit, and
scripts/lowest_constraints.py follows the pyprojects' floors.

A dependency added to a pyproject or a requirements file after the lock was made
fails here with the command that fixes it, before anyone installs a stale lock.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[2]
LOCKS = ["docs", "test", "bench", "test-light", "demo"]
# Locks resolved for every Python the distributions admit (scripts/lock --universal).
UNIVERSAL = ["test-light", "demo"]
PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)(?:\s*;\s*([^\\\n]+?))?\s*(?:\\|$)", re.M)


def pins(name: str, python: str | None = None) -> dict[str, list[Version]]:
    """Package -> pinned versions in requirements/lock/NAME.txt (one, or one per Python
    in a universal lock); each pin has hashes. With ``python``, only the pins whose
    marker holds there (on Linux x86_64)."""
    text = (ROOT / "requirements" / "lock" / f"{name}.txt").read_text(encoding="utf-8")
    found: dict[str, list[Version]] = {}
    for entry in re.split(r"\n(?=\S)", text):
        match = _PIN.match(entry)
        if not match:
            continue
        assert "--hash=sha256:" in entry, f"lock/{name}.txt: {match[1]} has no hash"
        if python is not None and match[3]:
            where = {"python_version": python, "python_full_version": f"{python}.0",
                     "sys_platform": "linux", "platform_system": "Linux",
                     "platform_machine": "x86_64", "implementation_name": "cpython",
                     "platform_python_implementation": "CPython", "os_name": "posix"}
            if not Marker(match[3]).evaluate(where):
                continue
        found.setdefault(canonicalize_name(match[1]), []).append(Version(match[2]))
    return found


def distributions_for(name: str) -> list[Requirement]:
    """The distributions (with extras) environment NAME holds: scripts/_env.sh says."""
    out = subprocess.run(
        ["bash", "-c", 'source scripts/_env.sh && distributions_for "$1"', "-", name],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    return [Requirement(word) for word in out.split()]


def distribution_requirements(lock: str | None = None) -> list[Requirement]:
    """What the distributions of lock ``lock`` require (with the extras it installs
    them with); None: every distribution with every extra."""
    wanted = None if lock is None else {
        canonicalize_name(r.name): r.extras for r in distributions_for(lock)}
    found = []
    for pyproject in sorted(ROOT.glob("packages/*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        name = canonicalize_name(project["name"])
        if wanted is not None and name not in wanted:
            continue
        found += [Requirement(r) for r in project.get("dependencies", [])]
        for extra, requirements in project.get("optional-dependencies", {}).items():
            if wanted is None or extra in wanted[name]:
                found += [Requirement(r) for r in requirements]
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
    wanted = distribution_requirements(name) + file_requirements(f"{name}.txt")
    stale = []
    for requirement in wanted:
        versions = locked.get(canonicalize_name(requirement.name))
        if not versions or not all(
            requirement.specifier.contains(v, prereleases=True) for v in versions
        ):
            stale.append(f"{requirement} (locked: {versions})")
    assert not stale, (
        f"requirements/lock/{name}.txt is out of date: {', '.join(stale)}; "
        "run scripts/lock and commit requirements/lock/"
    )


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("name", UNIVERSAL)
def test_a_universal_lock_pins_each_package_once_for_every_python(name: str, python: str):
    # `scripts/test --python 3.10` and a user's `scripts/demo` on 3.13 install the same
    # file: on each Python it must give one version of everything it needs.
    locked = pins(name, python)
    twice = {package: versions for package, versions in locked.items() if len(versions) > 1}
    assert not twice, f"lock/{name}.txt pins more than one version on {python}: {twice}"
    wanted = distribution_requirements(name) + file_requirements(f"{name}.txt")
    missing = [str(r) for r in wanted if canonicalize_name(r.name) not in locked]
    assert not missing, f"lock/{name}.txt has no pin on Python {python} for {missing}"
    assert "tomli" in pins(name, "3.10") or name == "demo"  # pytest needs it before 3.11


def test_the_universal_locks_start_at_the_distributions_floor() -> None:
    for pyproject in sorted(ROOT.glob("packages/*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        assert project["requires-python"] == f">={PYTHONS[0]}", pyproject


def test_the_test_lock_has_the_cpu_build_of_torch_and_no_cuda_packages() -> None:
    locked = pins("test")
    assert [v.local for v in locked["torch"]] == ["cpu"]
    assert not [p for p in locked if p.startswith("nvidia-")]


@pytest.mark.parametrize("name", ["test-light", "demo"])
def test_the_light_locks_hold_neither_torch_nor_ray(name: str) -> None:
    locked = pins(name)
    assert not {"torch", "ray"} & set(locked)


def test_lowest_constraints_are_the_floors_of_the_pyprojects() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "lowest_constraints.py")],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    constraints = dict(line.split("==") for line in out.splitlines() if "==" in line)
    expected: dict[str, str] = {}
    for requirement in distribution_requirements():
        name = canonicalize_name(requirement.name)
        if name == "torch":  # requirements/test.txt pins the CPU build: it stays
            continue
        (floor,) = [s.version for s in requirement.specifier if s.operator in (">=", "==", "~=")]
        if name not in expected or Version(floor) > Version(expected[name]):
            expected[name] = floor
    assert constraints == expected
