"""Upgrading a real easycore 0.4.2, taken from the package index, to the wheels built here.

`pip install --upgrade easycore` installs the micro-packages first and uninstalls 0.4.2
last, whose RECORD lists files that now belong to them, so pip deletes those files and
still reports success. No packaging metadata can change pip's order (dependencies first),
so the meta-package ships a start-up check that reports the damage with the command that
repairs it (docs/installation.md, "Upgrading from easycore 0.4.2"). These tests run that
story end to end, with the pip that comes with this Python, as a user would:

(a) the documented upgrade (uninstall 0.4.2, then install) leaves a sound install;
(b) `pip install --upgrade` damages it, and the check says so at start-up and on import;
(c) the command the check prints repairs it.

The index is needed once, to download 0.4.2 and the dependencies into a local wheelhouse;
everything after that installs from the wheelhouse with --no-index. Where the index cannot
be reached (offline CI), the tests skip after one quick probe.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(600)]

OLD = "easycore==0.4.2"
LIGHT = ["easycore-config", "easycore-parallel", "easycore-path", "easycore-registry"]
# Every module of the meta-package's four, imported with a name each documents.
IMPORTS = (
    "from easycore.common.config import CfgNode\n"
    "from easycore.common.registry import Registry\n"
    "from easycore.common.path import PathManager\n"
    "from easycore.common.network import download_file\n"
    "from easycore.common.parallel import UnorderedRunner\n"
    "import easycore\n"
    "assert getattr(easycore, '__file__', None) is None, 'a stray easycore/__init__.py'\n"
    "print('imports ok')"
)
PROBE_TIMEOUT = 45  # seconds for pip to fetch one 22 kB wheel, or to give up


@pytest.fixture(scope="module")
def wheelhouse(artifacts, running_env, tmp_path_factory) -> Path:
    """easycore 0.4.2, the wheels built here and all their dependencies, in one folder."""
    house = tmp_path_factory.mktemp("wheelhouse")
    # One quick try (no retries, short socket timeout) tells whether the index answers.
    probe = [sys.executable, "-m", "pip", "download", "--dest", str(house), "--no-deps"]
    probe += ["--timeout", "10", "--retries", "0", OLD]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=PROBE_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.skip(f"the package index did not answer in {PROBE_TIMEOUT} s")
    if done.returncode:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"the package index is unreachable ({reason})")
    # It answers: from here on a failure is a failure, not a reason to skip.
    running_env.pip("download", "--dest", str(house), OLD)
    ours = [str(artifacts.wheels[name]) for name in ["easycore", *LIGHT]]
    running_env.pip("download", "--dest", str(house), *ours)
    return house


def offline(house: Path) -> list[str]:
    return ["--no-index", "--find-links", str(house)]


@pytest.fixture
def with_0_4_2(make_venv, wheelhouse):
    """A fresh environment with its own pip and easycore 0.4.2 installed and working."""
    env = make_venv("upgrade", with_pip=True)
    env.own_pip("install", *offline(wheelhouse), OLD)
    assert env.run("import easycore.common.config.config; print('ok')").strip() == "ok"
    return env


def start_up_stderr(env) -> str:
    done = env.attempt("pass")
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_documented_upgrade_uninstall_then_install_is_sound(with_0_4_2, wheelhouse):
    env = with_0_4_2
    env.own_pip("uninstall", "--yes", "easycore")
    env.own_pip("install", *offline(wheelhouse), "easycore")
    assert env.run(IMPORTS).strip().endswith("imports ok")
    assert start_up_stderr(env) == ""
    env.own_pip("check")
    # Nothing of 0.4.2 is left behind (its config module was easycore/common/config/config.py).
    assert not (env.site_packages / "easycore" / "common" / "config" / "config.py").exists()


def test_pip_upgrade_damage_is_reported_and_the_printed_command_repairs_it(
    with_0_4_2, wheelhouse, artifacts
):
    env = with_0_4_2
    version = artifacts.wheels["easycore"].name.split("-")[1]
    pip_version = env.own_pip("--version").split()[1]
    env.own_pip("install", *offline(wheelhouse), "--upgrade", "easycore")
    env.own_pip("check")  # pip sees nothing wrong ...

    # ... but the files are gone. If this starts failing, pip changed its order: update
    # docs/installation.md and the start-up check's explanation.
    broken = env.attempt("from easycore.common.config import CfgNode")
    assert broken.returncode != 0, f"pip {pip_version} no longer damages the upgrade from 0.4.2"

    # The check speaks once at start-up (though site.py runs the .pth twice) ...
    stderr = start_up_stderr(env)
    assert stderr.count("easycore: the installation in") == 1, stderr
    pins = " ".join(f"{name}=={version}" for name in LIGHT)
    command = f"{env.python} -m pip install --force-reinstall --no-deps {pins}"
    assert f"    {command}\n" in stderr
    # ... and again in the ImportError, for whoever missed it (a notebook, say).
    assert f"ImportError: easycore: the installation in {env.site_packages}" in broken.stderr
    assert command in broken.stderr

    # The command, as printed (plus where to find the wheels in this test), repairs it.
    python, dash_m, pip, *arguments = shlex.split(command)
    assert (python, dash_m, pip) == (str(env.python), "-m", "pip")
    env.own_pip(*arguments, *offline(wheelhouse))
    assert env.run(IMPORTS).strip().endswith("imports ok")
    assert start_up_stderr(env) == ""
    env.own_pip("check")
