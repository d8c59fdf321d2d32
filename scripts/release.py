"""Bump and build the six easycore distributions together, so releases stay in step.

    python scripts/release.py bump 0.6.0
        Writes the new version into every distribution's version source (the file its
        [tool.hatch.version] names) and rewrites every pin on a sibling distribution to
        ">=0.6.0,<0.7", in dependencies and optional dependencies alike.

    python scripts/release.py build [--outdir DIR] [--no-isolation]
        Checks that all version sources agree, then builds an sdist and a wheel (the
        wheel from the sdist) of each distribution into DIR (default: dist/).

The distributions are the folders packages/*/ with a pyproject.toml. Standard library
only (Python 3.11+ for tomllib); `build` needs the `build` package.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import tomllib  # standard library since 3.11; ruff targets 3.9 and sorts it apart

ROOT = Path(__file__).resolve().parent.parent
VERSION_LINE = re.compile(r'^__version__ = "([^"]*)"$', re.MULTILINE)
RELEASE_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")
# A pin on a sibling: name, optional extras, then exactly ">=X.Y.Z,<X.Y".
SIBLING_PIN = re.compile(r"(?P<name>[A-Za-z0-9._-]+)(?P<extras>\[[^\]]*\])?>=[^,;\s]+,<[^,;\s]+")


def distributions() -> dict[str, Path]:
    """Map each distribution name to its folder under packages/."""
    found = {}
    for pyproject in sorted(ROOT.glob("packages/*/pyproject.toml")):
        name = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["name"]
        found[name] = pyproject.parent
    if not found:
        sys.exit(f"no packages/*/pyproject.toml under {ROOT}")
    return found


def version_source(folder: Path) -> Path:
    """The file that [tool.hatch.version] reads for the distribution in `folder`."""
    config = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    return folder / config["tool"]["hatch"]["version"]["path"]


def read_version(source: Path) -> str:
    match = VERSION_LINE.search(source.read_text(encoding="utf-8"))
    if match is None:
        sys.exit(f'{source}: no line `__version__ = "..."`')
    return match.group(1)


def sibling_requirements(folder: Path, siblings: set[str]) -> list[str]:
    """Every requirement string in `folder`'s pyproject that names a sibling distribution."""
    project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        requirements.extend(extra)
    named = [r for r in requirements if re.split(r"[\[<>=!~;\s]", r, maxsplit=1)[0] in siblings]
    return list(dict.fromkeys(named))  # an extra may repeat a requirement


def bump(new_version: str) -> None:
    match = RELEASE_VERSION.fullmatch(new_version)
    if match is None:
        sys.exit(f"expected a release version MAJOR.MINOR.PATCH, got {new_version!r}")
    major, minor = int(match.group(1)), int(match.group(2))
    upper = f"{major}.{minor + 1}"
    dists = distributions()

    # Plan every edit before writing any, so a pin we cannot rewrite leaves the tree as it was.
    edits: dict[Path, str] = {}
    for folder in dists.values():
        source = version_source(folder)
        read_version(source)  # fails clearly if the file has no version line
        text = source.read_text(encoding="utf-8")
        edits[source] = VERSION_LINE.sub(f'__version__ = "{new_version}"', text, count=1)
        pyproject = folder / "pyproject.toml"
        text = pyproject.read_text(encoding="utf-8")
        for requirement in sibling_requirements(folder, set(dists)):
            pin = SIBLING_PIN.fullmatch(requirement)
            if pin is None or f'"{requirement}"' not in text:
                sys.exit(f"{pyproject}: cannot rewrite {requirement!r}; pin as NAME>=X.Y.Z,<X.Y")
            new = f"{pin['name']}{pin['extras'] or ''}>={new_version},<{upper}"
            text = text.replace(f'"{requirement}"', f'"{new}"')
        edits[pyproject] = text

    for path, text in edits.items():
        path.write_text(text, encoding="utf-8")
    print(f"{len(dists)} distributions now at {new_version}; sibling pins >={new_version},<{upper}")


def build(outdir: Path, isolation: bool) -> None:
    dists = distributions()
    versions = {name: read_version(version_source(folder)) for name, folder in dists.items()}
    if len(set(versions.values())) != 1:
        listing = ", ".join(f"{name} {version}" for name, version in versions.items())
        sys.exit(f"versions disagree ({listing}); run `release.py bump VERSION` first")
    flags = [] if isolation else ["--no-isolation"]
    for name, folder in dists.items():
        command = [sys.executable, "-m", "build", *flags, "--outdir", str(outdir), str(folder)]
        if subprocess.run(command).returncode:
            sys.exit(f"building {name} failed (see above)")
    print(f"built {len(dists)} distributions at {next(iter(versions.values()))} into {outdir}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    bump_parser = commands.add_parser("bump", help="set a new version everywhere")
    bump_parser.add_argument("version")
    build_parser = commands.add_parser("build", help="build all sdists and wheels")
    build_parser.add_argument("--outdir", type=Path, default=ROOT / "dist")
    build_parser.add_argument(
        "--no-isolation", action="store_true", help="build with the running environment's hatchling"
    )
    args = parser.parse_args(argv)
    if args.command == "bump":
        bump(args.version)
    else:
        build(args.outdir.resolve(), isolation=not args.no_isolation)


if __name__ == "__main__":
    main()
