"""The meta-package's start-up check (`_easycore_install_check`) on made-up site-packages.

An installed distribution is a folder of files plus a `NAME-VERSION.dist-info` whose RECORD
lists them; these tests write both, remove files the way pip's uninstall of easycore 0.4.2
does, and look at what the check finds. Anything that touches `sys.meta_path` or stderr
runs in a subprocess. The real upgrade from 0.4.2 is in test_packaging_upgrade.py.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "packages" / "easycore" / "src" / "_easycore_install_check.py"
_spec = importlib.util.spec_from_file_location("_easycore_install_check_under_test", SOURCE)
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)

# Distribution -> files, as the 0.5.0 wheels lay them out (abridged).
FILES = {
    "easycore-config": ["easycore/common/config/__init__.py", "easycore/common/config/node.py"],
    "easycore-registry": [
        "easycore/common/registry/__init__.py",
        "easycore/common/registry/registry.py",
    ],
    "easycore-path": [
        "easycore/common/path/__init__.py",
        "easycore/common/path/manager.py",
        "easycore/common/network/__init__.py",
        "easycore/common/network/download.py",
    ],
    "easycore-torch": [
        "easycore/torch/__init__.py",
        "easycore/torch/_version.py",
        "easycore/torch/parallel/__init__.py",
        "easycore/torch/parallel/runner.py",
    ],
}


def install(site: Path, name: str, version: str = "0.5.0") -> None:
    """Write `name`'s files and a dist-info whose RECORD lists them (and itself)."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for file in FILES[name]:
        (site / file).parent.mkdir(parents=True, exist_ok=True)
        (site / file).write_text("# code\n")
    listed = [*FILES[name], f"{info.name}/METADATA", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in listed))


def remove_what_0_4_2_owned(site: Path) -> None:
    """What uninstalling easycore 0.4.2 deletes of these files: each __init__.py and registry.py."""
    for path in site.glob("easycore/**/*.py"):
        if path.name in ("__init__.py", "registry.py"):
            path.unlink()


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site-packages"
    for name in FILES:
        install(site, name)
    return site


def test_a_sound_install_passes_the_fast_test(site):
    assert not check.looks_damaged(site)
    assert check.damaged_distributions(site) == {}


def test_removed_files_are_found_with_the_packages_they_break(site):
    remove_what_0_4_2_owned(site)
    assert check.looks_damaged(site)
    assert check.damaged_distributions(site) == {
        "easycore-config": ("0.5.0", ["easycore.common.config"]),
        "easycore-path": ("0.5.0", ["easycore.common.network", "easycore.common.path"]),
        "easycore-registry": ("0.5.0", ["easycore.common.registry"]),
        "easycore-torch": ("0.5.0", ["easycore.torch"]),  # .parallel is inside it
    }


def test_a_distribution_uninstalled_on_purpose_is_not_damage(site):
    # `pip uninstall easycore-config` removes the folder too: nothing to warn about.
    for file in FILES["easycore-config"]:
        (site / file).unlink()
    (site / "easycore" / "common" / "config").rmdir()
    assert not check.looks_damaged(site)


def test_the_repair_command_pins_the_installed_versions():
    damaged = {
        "easycore-config": ("0.5.0", ["easycore.common.config"]),
        "easycore-torch": ("0.5.1", ["easycore.torch"]),
    }
    assert check.repair_command(damaged, "/env/bin/python") == (
        "/env/bin/python -m pip install --force-reinstall --no-deps"
        " easycore-config==0.5.0 easycore-torch==0.5.1"
    )


def test_the_blocker_stops_only_the_damaged_packages():
    blocker = check.DamagedImportBlocker(["easycore.common.config"], "repair me")
    for name in ("easycore.common.config", "easycore.common.config.node"):
        with pytest.raises(ImportError, match="repair me"):
            blocker.find_spec(name)
    for name in ("easycore.common.configs", "easycore.common.registry", "easycore", "yaml"):
        assert blocker.find_spec(name) is None


# Runs check(site) in a fresh interpreter, then tries the import named in argv[2].
CHECK_AND_IMPORT = """
import importlib, sys
sys.path[:0] = [sys.argv[3], sys.argv[1]]  # the check's folder, and the made-up site-packages
import _easycore_install_check as check
print("sound" if check.check(sys.argv[1]) else "damaged")
print("again:", check.check(sys.argv[1]))  # site.py may run the .pth twice: warn once
try:
    importlib.import_module(sys.argv[2])
except ImportError as exc:
    print("ImportError:", exc)
"""


def run_check(site: Path, module: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-I", "-c", CHECK_AND_IMPORT, str(site), module]
    return subprocess.run(
        [*command, str(SOURCE.parent)], capture_output=True, text=True, timeout=60
    )


def test_damage_is_reported_once_on_stderr_and_on_import(site):
    remove_what_0_4_2_owned(site)
    done = run_check(site, "easycore.common.config")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == ["damaged", "again: False"]
    assert done.stderr.count("is damaged") == 1
    command = (
        f"{sys.executable} -m pip install --force-reinstall --no-deps easycore-config==0.5.0"
        " easycore-path==0.5.0 easycore-registry==0.5.0 easycore-torch==0.5.0"
    )
    assert command in done.stderr
    assert "ImportError: easycore: the installation" in done.stdout
    assert command in done.stdout


def test_a_sound_install_says_nothing(site):
    done = run_check(site, "json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["sound", "again: True"]
    assert done.stderr == ""


def test_unreadable_metadata_is_not_reported_as_damage(tmp_path):
    site = tmp_path / "site-packages"
    (site / "easycore" / "common" / "config").mkdir(parents=True)  # no __init__.py
    info = site / "easycore_config-0.5.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_bytes(b"\xff\xfe not metadata")
    (info / "RECORD").mkdir()  # a folder where the file list should be
    done = run_check(site, "json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "sound"
    assert done.stderr == ""


def test_the_check_never_stops_python_from_starting(site):
    remove_what_0_4_2_owned(site)
    code = (
        "import sys; sys.path.insert(0, sys.argv[2]); import _easycore_install_check as c\n"
        "def fail(site): raise RuntimeError('a bug in the check')\n"
        "c.damaged_distributions = fail\n"
        "print(c.check(sys.argv[1]))"
    )
    command = [sys.executable, "-I", "-c", code, str(site), str(SOURCE.parent)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "True\n", "")


def test_the_installation_guide_shows_the_message_and_has_the_linked_section():
    guide = (ROOT / "docs" / "installation.md").read_text(encoding="utf-8")
    damaged = {
        name: ("0.5.0", [])
        for name in ["easycore-config", "easycore-parallel", "easycore-path", "easycore-registry"]
    }
    shown = check.message(
        damaged, "/home/me/env/lib/python3.11/site-packages", "/home/me/env/bin/python"
    )
    # The guide shows the message wrapped to the page's width: compare the words.
    def words(text: str) -> str:
        return " ".join(text.replace("\\\n", " ").split())

    for part in shown.split("\n\n"):
        part = "\n".join(ln for ln in part.splitlines() if not ln.startswith("(see "))
        assert words(part) in words(guide), f"docs/installation.md does not show: {part}"
    # The message sends readers to this section of the published guide.
    pyproject = (ROOT / "packages" / "easycore" / "pyproject.toml").read_text(encoding="utf-8")
    docs = re.search(r'^Documentation = "([^"]+)"$', pyproject, re.MULTILINE).group(1)
    assert f"{docs}installation/#upgrading-from-easycore-042" == check.GUIDE
    assert "\n## Upgrading from easycore 0.4.2\n" in guide


def uninstall_after_python_dash_o(site: Path, name: str) -> None:
    """`python -O` compiled the package, then `pip uninstall` removed what its RECORD lists.

    pip also removes each source's default `.pyc`, but not the `.opt-1.pyc` and
    `.opt-2.pyc` files, so the folder stays (issue 22, item 32).
    """
    tag = sys.implementation.cache_tag
    for file in FILES[name]:
        source = site / file
        cache = source.parent / "__pycache__"
        cache.mkdir(exist_ok=True)
        (cache / f"{source.stem}.{tag}.opt-1.pyc").write_bytes(b"compiled")
        source.unlink()
    info = next(site.glob(f"{name.replace('-', '_')}-*.dist-info"))
    for file in info.iterdir():
        file.unlink()
    info.rmdir()


def test_only_compiled_files_left_by_an_uninstall_are_found(site):
    uninstall_after_python_dash_o(site, "easycore-config")
    assert check.looks_damaged(site)
    assert check.damaged_distributions(site) == {}
    assert check.leftover_folders(site) == ["easycore.common.config"]


def test_leftover_compiled_files_are_reported_on_stderr_and_on_import(site):
    uninstall_after_python_dash_o(site, "easycore-config")
    done = run_check(site, "easycore.common.config")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == ["damaged", "again: False"]
    assert done.stderr.count("is damaged") == 1
    folder = site / "easycore" / "common" / "config"
    assert f"rm -r {folder}" in done.stderr and "pip install --force-reinstall" in done.stderr
    assert "ImportError: easycore: the installation" in done.stdout


def test_a_sound_install_with_compiled_files_has_no_leftovers(site):
    tag = sys.implementation.cache_tag
    for name in FILES:
        for file in FILES[name]:
            cache = (site / file).parent / "__pycache__"
            cache.mkdir(exist_ok=True)
            (cache / f"{Path(file).stem}.{tag}.opt-1.pyc").write_bytes(b"compiled")
    assert not check.looks_damaged(site)
    assert check.leftover_folders(site) == []


# ------------------------------------------------------------ issue 34, item 26
@pytest.mark.parametrize(
    "name, packages",
    [
        ("easycore-registry", ["easycore.common.registry"]),
        ("easycore-path", ["easycore.common.network", "easycore.common.path"]),
        ("easycore-torch", ["easycore.torch"]),
    ],
)
def test_compiled_leftovers_of_any_micro_package_are_found(site, name, packages):
    uninstall_after_python_dash_o(site, name)
    assert check.looks_damaged(site)
    assert check.damaged_distributions(site) == {}
    assert sorted(check.leftover_folders(site)) == packages


@pytest.mark.parametrize(
    "name, module",
    [
        ("easycore-registry", "easycore.common.registry"),
        ("easycore-path", "easycore.common.network"),
        ("easycore-torch", "easycore.torch.parallel"),
    ],
)
def test_compiled_leftovers_of_any_micro_package_give_the_clear_message(site, name, module):
    uninstall_after_python_dash_o(site, name)
    done = run_check(site, module)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == ["damaged", "again: False"]
    assert done.stderr.count("is damaged") == 1
    assert "unknown location" not in done.stdout
    assert "ImportError: easycore: the installation" in done.stdout
    assert "rm -r" in done.stdout and "pip install --force-reinstall" in done.stdout


def test_an_empty_folder_where_a_package_would_be_is_not_damage(tmp_path):
    site = tmp_path / "site-packages"
    install(site, "easycore-config")
    (site / "easycore" / "torch").mkdir()  # no __init__.py, but no compiled files either
    assert check.damaged_distributions(site) == {} and check.leftover_folders(site) == []
    done = run_check(site, "json")
    assert done.stdout.splitlines()[0] == "sound" and done.stderr == ""


def test_the_real_uninstall_after_python_dash_o_gives_the_clear_message(artifacts, make_venv):
    """End to end: the built wheels, `python -O`, `pip uninstall`, then the import."""
    env = make_venv("dash-o")
    light = ["easycore", "easycore-config", "easycore-registry", "easycore-path"]
    light.append("easycore-parallel")
    env.install(*(str(artifacts.wheels[name]) for name in light))
    env.run("import easycore.common.registry, easycore.common.path, easycore.common.network")
    # A program run under -O (or -OO) writes its compiled files, as Python does by default.
    writes = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for flag, module in [("-O", "easycore.common.registry"), ("-OO", "easycore.common.path")]:
        command = [str(env.python), flag, "-c", f"import {module}"]
        subprocess.run(command, check=True, timeout=60, env=writes, cwd=env.home)
    for name, module in [
        ("easycore-registry", "from easycore.common.registry import Registry"),
        ("easycore-path", "from easycore.common.path import PathManager"),
    ]:
        env.pip("uninstall", "--yes", name)
        broken = env.attempt(module)
        assert broken.returncode != 0
        assert "unknown location" not in broken.stderr
        assert "ImportError: easycore: the installation in" in broken.stderr, broken.stderr
        assert "pip install --force-reinstall easycore" in broken.stderr
        assert env.attempt("pass").stderr.count("easycore: the installation in") == 1
