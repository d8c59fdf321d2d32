"""hatch.toml stays in step with the rest of the repository.

Hatch cannot read `-r requirements/...` files, so hatch.toml repeats them; these tests
fail when the two drift apart, or when a distribution or script is missing from it.
(That hatch itself accepts the file was checked by hand with hatch 1.18; hatch is not a
test dependency.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement

pytestmark = pytest.mark.packaging
tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[2]
ENVS = tomllib.loads((ROOT / "hatch.toml").read_text(encoding="utf-8"))["envs"]


def normalized(requirements) -> set[str]:
    return {str(Requirement(r)).lower() for r in requirements}


def requirement_file(name: str) -> set[str]:
    """The requirements in requirements/NAME, following `-r` includes."""
    found = set()
    for line in (ROOT / "requirements" / name).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r"):
            found |= requirement_file(line[2:].strip())
        elif line:
            found |= normalized([line])
    return found


def test_default_env_installs_requirements_test_txt():
    assert normalized(ENVS["default"]["dependencies"]) == requirement_file("test.txt")


def test_bench_env_adds_requirements_bench_txt():
    bench = ENVS["bench"]
    assert bench.get("template", "default") == "default"
    extra = normalized(bench["extra-dependencies"])
    assert normalized(ENVS["default"]["dependencies"]) | extra == requirement_file("bench.txt")


def test_default_env_has_every_distribution_as_workspace_member():
    members = ENVS["default"]["workspace"]["members"]
    assert sorted(members) == sorted(
        f"packages/{p.parent.name}" for p in ROOT.glob("packages/*/pyproject.toml")
    )
    assert ENVS["default"]["skip-install"] is True  # there is no project at the top


def test_scripts_point_at_files_that_exist():
    assert {"test", "lint", "demo", "docs"} <= set(ENVS["default"]["scripts"])
    assert (ROOT / ENVS["default"]["scripts"]["demo"]).is_file()
    assert (ROOT / ENVS["bench"]["scripts"]["run"].split()[0]).is_file()
    for script in ENVS["release"]["scripts"].values():
        assert script.split()[:2] == ["python", "scripts/release.py"], script
    assert (ROOT / "scripts" / "release.py").is_file()


def test_release_env_is_light():
    release = ENVS["release"]
    # Without its own template it would inherit the workspace and torch/ray from default.
    assert release["template"] == "release"
    assert normalized(release["dependencies"]) == {"build>=1.2"}
