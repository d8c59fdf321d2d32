"""What the six built wheels and sdists contain, read straight from the archives.

No installation here: these tests open the files that `scripts/release.py build` wrote
and compare them with the layout the project promises (one leaf package per
distribution, PEP 420 namespaces, py.typed, one version, minimal dependencies).
"""

from __future__ import annotations

import importlib.util
import re
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path, PurePosixPath

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("release", ROOT / "scripts" / "release.py")
release = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(release)

# The import packages each wheel ships (its "leaves"); everything else under easycore/
# is a namespace shared with the other distributions.
LEAVES = {
    "easycore-config": {"easycore.common.config"},
    "easycore-registry": {"easycore.common.registry"},
    "easycore-path": {"easycore.common.path", "easycore.common.network"},
    "easycore-parallel": {"easycore.common.parallel"},
    "easycore-torch": {"easycore.torch"},
    "easycore": set(),  # the meta-package ships no package, only its start-up check
}
# Files at the top of site-packages: the meta-package's check for the upgrade from 0.4.2.
TOP_LEVEL = {"easycore": {"_easycore_install_check.py", "easycore-install-check.pth"}}

# Requires-Dist by extra ("" = always), as names with extras, nothing more.
REQUIRES = {
    "easycore-config": {"": {"pyyaml"}},
    "easycore-registry": {},
    "easycore-path": {
        "": {"requests", "tqdm", "filelock", "platformdirs"},
        "fsspec": {"fsspec"},
    },
    "easycore-parallel": {
        "": {"easycore-config", "tqdm", "cloudpickle", "psutil", "threadpoolctl"},
        "ray": {"ray"},
        "plot": {"matplotlib"},
    },
    "easycore-torch": {"": {"easycore-parallel", "torch"}},
    "easycore": {
        "": {"easycore-config", "easycore-registry", "easycore-path", "easycore-parallel"},
        "torch": {"easycore-torch"},
        "ray": {"easycore-parallel[ray]"},
        "fsspec": {"easycore-path[fsspec]"},
        "all": {"easycore-torch", "easycore-parallel[ray]", "easycore-path[fsspec]"},
    },
}
SIBLINGS = set(LEAVES)
DISTRIBUTIONS = sorted(LEAVES)


def test_every_distribution_is_covered(artifacts):
    assert set(artifacts.wheels) == SIBLINGS, "packages/ and LEAVES disagree"


def wheel_files(wheel: Path) -> list[PurePosixPath]:
    """Files of the wheel outside its .dist-info folder."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    return [PurePosixPath(n) for n in names if ".dist-info/" not in n]


def metadata(wheel: Path):
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return Parser().parsestr(archive.read(name).decode("utf-8"))


def version_in_source(distribution: str) -> str:
    """The version in the file that [tool.hatch.version] reads for `distribution`."""
    return release.read_version(release.version_source(ROOT / "packages" / distribution))


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_wheel_never_ships_the_namespace_packages(artifacts, distribution):
    files = {str(f) for f in wheel_files(artifacts.wheels[distribution])}
    assert "easycore/__init__.py" not in files
    assert "easycore/common/__init__.py" not in files


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_wheel_ships_exactly_its_leaf_packages_with_py_typed(artifacts, distribution):
    files = wheel_files(artifacts.wheels[distribution])
    assert {str(f) for f in files if len(f.parts) == 1} == TOP_LEVEL.get(distribution, set())
    files = [f for f in files if len(f.parts) > 1]
    inits = {f.parent for f in files if f.name == "__init__.py"}
    # A leaf is a regular package whose parent is not one (easycore.torch, not .parallel).
    leaves = {".".join(p.parts) for p in inits if p.parent not in inits}
    assert leaves == LEAVES[distribution]
    for f in files:
        assert any(f.is_relative_to(*leaf.split(".")) for leaf in leaves), f"{f} is outside a leaf"
        assert "__pycache__" not in f.parts and f.suffix != ".pyc", f"{f} is a build leftover"
    for leaf in leaves:
        assert PurePosixPath(*leaf.split("."), "py.typed") in files, f"{leaf} has no py.typed"


def test_no_two_wheels_ship_the_same_file(artifacts):
    owner: dict[PurePosixPath, str] = {}
    for distribution, wheel in artifacts.wheels.items():
        for f in wheel_files(wheel):
            assert f not in owner, f"{f} is in both {owner[f]} and {distribution}"
            owner[f] = distribution


def test_all_six_share_one_version_read_from_their_sources(artifacts):
    versions = {d: metadata(w)["Version"] for d, w in artifacts.wheels.items()}
    assert versions == {d: version_in_source(d) for d in DISTRIBUTIONS}
    assert set(versions.values()) == {version_in_source("easycore")}, versions
    for distribution, wheel in artifacts.wheels.items():
        assert wheel.name.startswith(f"{distribution.replace('-', '_')}-{versions[distribution]}-")


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_requires_dist_is_exactly_the_documented_minimum(artifacts, distribution):
    meta = metadata(artifacts.wheels[distribution])
    version = meta["Version"]
    found: dict[str, set[str]] = {}
    for line in meta.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        marker = str(requirement.marker) if requirement.marker else ""
        extra = re.fullmatch(r'extra == "([^"]+)"', marker)
        group = extra.group(1) if extra else marker  # any other marker shows up as a mismatch
        extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
        name = canonicalize_name(requirement.name)
        found.setdefault(group, set()).add(name + extras)
        if name in SIBLINGS:
            # Siblings move in lockstep: this release, not the next minor one.
            major, minor = map(int, version.split(".")[:2])
            assert requirement.specifier.contains(version), line
            assert not requirement.specifier.contains(f"{major}.{minor + 1}.0"), line
    assert found == REQUIRES[distribution]
    assert set(meta.get_all("Provides-Extra") or []) == set(REQUIRES[distribution]) - {""}


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_sdist_has_the_sources_and_no_namespace_init(artifacts, distribution):
    with tarfile.open(artifacts.sdists[distribution]) as archive:
        names = [PurePosixPath(n) for n in archive.getnames()]
    top = {n.parts[0] for n in names}
    assert len(top) == 1, top
    inside = {PurePosixPath(*n.parts[1:]) for n in names if len(n.parts) > 1}
    assert {PurePosixPath("pyproject.toml"), PurePosixPath("README.md")} <= inside
    assert not [n for n in inside if "__pycache__" in n.parts or n.suffix == ".pyc"]
    for namespace in ("src/easycore/__init__.py", "src/easycore/common/__init__.py"):
        assert PurePosixPath(namespace) not in inside
    # The wheel was built from this sdist, so every shipped module came through it.
    shipped = {PurePosixPath("src", f) for f in wheel_files(artifacts.wheels[distribution])}
    assert shipped <= inside


def test_meta_package_pth_runs_only_the_check(artifacts):
    with zipfile.ZipFile(artifacts.wheels["easycore"]) as archive:
        lines = archive.read("easycore-install-check.pth").decode("utf-8").splitlines()
    # site.py executes lines that start with "import"; anything else it would add to sys.path.
    code = [line for line in lines if line.strip() and not line.startswith("#")]
    assert code == ["import _easycore_install_check; _easycore_install_check.check()"]


# --------------------------------------------------------------------- project metadata

URLS = {
    "Documentation": "https://easycore-dev.github.io/easycore/",
    "Repository": "https://github.com/easycore-dev/easycore",
    "Changelog": "https://github.com/easycore-dev/easycore/blob/main/CHANGELOG.md",
    "Issues": "https://github.com/easycore-dev/easycore/issues",
}
# The Pythons the suites run on (docs/platforms.md): CI runs the main suite on 3.11
# and the light ones on 3.10 and 3.13 (scripts/test), 3.12 was run by hand
# (`scripts/test --python 3.12`). easycore-torch's suite runs on 3.11 only, the one
# Python the CPU build of torch is at hand for on the test machines.
PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
TESTED = {d: ["3.11"] if d == "easycore-torch" else PYTHONS for d in LEAVES}


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_metadata_links_the_same_repository_docs_changelog_and_issues(artifacts, distribution):
    meta = metadata(artifacts.wheels[distribution])
    urls = dict(entry.split(", ", 1) for entry in meta.get_all("Project-URL") or [])
    assert urls == URLS


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_metadata_classifiers_state_pythons_and_status(artifacts, distribution):
    meta = metadata(artifacts.wheels[distribution])
    classifiers = meta.get_all("Classifier") or []
    versions = [c.rsplit(" :: ", 1)[1] for c in classifiers if re.fullmatch(r".*:: 3\.\d+", c)]
    assert versions == TESTED[distribution]
    # Python 3.9 is dropped; the classifiers name only what is tested (torch: 3.11).
    assert meta["Requires-Python"] == f">={PYTHONS[0]}"
    assert len([c for c in classifiers if c.startswith("Development Status :: ")]) == 1
    assert ("Typing :: Typed" in classifiers) == bool(LEAVES[distribution])


def test_scripts_test_runs_the_pythons_the_classifiers_name():
    script = (ROOT / "scripts" / "test").read_text(encoding="utf-8")
    default = re.search(r"\$\{EASYCORE_TEST_PYTHONS-([0-9. ]+)\}", script)
    assert default, "scripts/test names no other Pythons"
    assert set(default[1].split()) | {"3.11"} <= set(PYTHONS)


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_readme_is_the_description_and_links_the_documentation(artifacts, distribution):
    meta = metadata(artifacts.wheels[distribution])
    readme = (ROOT / "packages" / distribution / "README.md").read_text(encoding="utf-8")
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().strip() == readme.strip()
    assert URLS["Documentation"] in readme
