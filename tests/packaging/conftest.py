"""Fixtures for the packaging tests: the six distributions built once per session, and
throwaway virtual environments to install them into.

Everything runs in subprocesses with timeouts, so a stuck build or install fails the test
instead of hanging CI. Builds use the running environment's hatchling (no build isolation,
so nothing is downloaded to build); installs into the throwaway environments go through
the running environment's pip (`pip --python`, pip >= 22.3), whose configuration and
index apply as usual.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Seconds a single waiting step may take before the test fails; pytest-timeout's 180 s
# per test (pytest.ini) still bounds the whole test. Typical: build 6 s for all six,
# install of all wheels with torch 35 s, a run 1-3 s.
BUILD_TIMEOUT = 120
INSTALL_TIMEOUT = 150
RUN_TIMEOUT = 60


def attempt(
    command: list[str], *, timeout: float, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """Run `command` and return what happened, whatever its exit status; fail on a timeout."""
    try:
        return subprocess.run(
            command,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"},
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"timed out after {timeout}s: {' '.join(command)}\n{exc.stdout}\n{exc.stderr}")


def run(command: list[str], *, timeout: float, cwd: Path | None = None) -> str:
    """Run `command`; return its output, or fail the test showing that output."""
    done = attempt(command, timeout=timeout, cwd=cwd)
    if done.returncode:
        pytest.fail(
            f"exit {done.returncode}: {' '.join(command)}\n"
            f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        )
    return done.stdout


@dataclass
class Artifacts:
    """The built distributions, by distribution name."""

    wheels: dict[str, Path]
    sdists: dict[str, Path]


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Artifacts:
    """Build all six sdists and wheels once, the way a release does (scripts/release.py)."""
    outdir = tmp_path_factory.mktemp("dist")
    release = [sys.executable, str(ROOT / "scripts" / "release.py")]
    run([*release, "build", "--no-isolation", "--outdir", str(outdir)], timeout=BUILD_TIMEOUT)
    names = [path.parent.name for path in ROOT.glob("packages/*/pyproject.toml")]

    def one(pattern: str) -> Path:
        found = sorted(outdir.glob(pattern))
        assert len(found) == 1, f"expected one {pattern} in {outdir}, found {found}"
        return found[0]

    # File names use the normalized project name: easycore-config -> easycore_config-0.5.0...
    return Artifacts(
        wheels={n: one(f"{n.replace('-', '_')}-*.whl") for n in names},
        sdists={n: one(f"{n.replace('-', '_')}-*.tar.gz") for n in names},
    )


class Env:
    """A Python environment to install into and run code in, always in a subprocess."""

    def __init__(self, python: Path, home: Path):
        self.python = python
        self.home = home  # the environment's folder (sys.prefix); commands run there

    def pip(self, *args: str) -> str:
        """The running environment's pip, acting on this environment (pip >= 22.3)."""
        command = [sys.executable, "-m", "pip", "--python", str(self.python), *args]
        return run(command, timeout=INSTALL_TIMEOUT)

    def install(self, *requirements: str) -> None:
        self.pip("install", "--quiet", *requirements)

    def own_pip(self, *args: str) -> str:
        """The environment's own pip (make_venv(..., with_pip=True)), as a user runs it."""
        return run([str(self.python), "-m", "pip", *args], timeout=INSTALL_TIMEOUT)

    def run(self, code: str, *args: str) -> str:
        """Run `code` isolated (-I: no PYTHONPATH, no user site, no cwd on sys.path)."""
        command = [str(self.python), "-I", "-c", code, *args]
        return run(command, timeout=RUN_TIMEOUT, cwd=self.home)

    def attempt(self, code: str, *args: str) -> subprocess.CompletedProcess:
        """Like `run`, but return the finished process (stderr, exit status) even on failure."""
        command = [str(self.python), "-I", "-c", code, *args]
        return attempt(command, timeout=RUN_TIMEOUT, cwd=self.home)

    @property
    def site_packages(self) -> Path:
        return Path(self.run("import sysconfig; print(sysconfig.get_path('purelib'))").strip())

    def run_json(self, code: str, *args: str):
        """Run `code`, which must print one JSON document as its last line."""
        return json.loads(self.run(code, *args).strip().splitlines()[-1])

    def distributions(self) -> set[str]:
        """Normalized names of the distributions installed in this environment."""
        code = (
            "import importlib.metadata as m, json, re\n"
            "print(json.dumps(sorted({re.sub(r'[-_.]+', '-', d.metadata['Name']).lower()"
            " for d in m.distributions()})))"
        )
        return set(self.run_json(code))


@pytest.fixture(scope="session")
def make_venv(tmp_path_factory: pytest.TempPathFactory):
    """Factory: make_venv("name") -> an Env for a fresh virtual environment.

    Without pip by default (the running environment's pip installs into it); with
    `with_pip=True` it gets the pip that ships with this Python (ensurepip, offline).
    """

    def make(name: str, with_pip: bool = False) -> Env:
        home = tmp_path_factory.mktemp(name) / "venv"
        venv.create(home, with_pip=with_pip, symlinks=True)
        return Env(home / "bin" / "python", home)

    return make


@pytest.fixture(scope="session")
def running_env() -> Env:
    """The environment running the tests (the development one)."""
    return Env(Path(sys.executable), Path(sys.prefix))
