"""The distributions as users get them: installed from the built wheels into fresh
virtual environments, and installed editable (hatch dev mode) in the running one.

(a) all six wheels together: every documented import path works from site-packages;
(b) the running development environment: the same imports resolve to packages/*/src;
(c) easycore-config alone: usable, and nothing heavy comes with it;
(d) from a clone, as README.md and docs/installation.md say to until 0.5.0 is on PyPI:
    each `$ pip install ./packages/...` command they show, run by the new environment's
    own pip, installs what it names, at this tree's version, and it imports.
"""

from __future__ import annotations

import json
import re
import shlex
from importlib.metadata import distribution, version
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]

# Every import path the manual documents, with the distribution that owns the module.
RUNNERS = ["BaseRunner", "UnorderedRunner", "OrderedRunner"]
PATH_API = ["PathManager", "PathHandler", "NativePathHandler", "HTTPURLHandler"]
DOCUMENTED = {
    "easycore.common.config": ("easycore-config", ["CfgNode", "HierarchicalCfgNode"]),
    "easycore.common.registry": ("easycore-registry", ["Registry"]),
    "easycore.common.path": ("easycore-path", [*PATH_API, "RedirectPathHandler"]),
    "easycore.common.network": ("easycore-path", ["download_file"]),
    "easycore.common.parallel": ("easycore-parallel", RUNNERS),
    "easycore.torch": ("easycore-torch", []),
    "easycore.torch.parallel": ("easycore-torch", RUNNERS),
}
# Each leaf distribution's top package, whose __version__ (from the _version.py that
# [tool.hatch.version] reads) docs/installation.md shows.
VERSIONED = {
    "easycore-config": "easycore.common.config",
    "easycore-registry": "easycore.common.registry",
    "easycore-path": "easycore.common.path",
    "easycore-parallel": "easycore.common.parallel",
    "easycore-torch": "easycore.torch",
}
SIX = sorted({dist for dist, _ in DOCUMENTED.values()} | {"easycore"})
HEAVY = ["requests", "tqdm", "torch", "numpy"]

# Imports `module`, takes each documented name from it, and reports where it came from
# and what `easycore` / `easycore.common` are. Prints JSON on its last line.
PROBE = """
import importlib, json, sys
module_name, names = sys.argv[1], json.loads(sys.argv[2])
try:
    module = importlib.import_module(module_name)
except ImportError as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
    raise SystemExit
import easycore, easycore.common
print(json.dumps({
    "error": None,
    "file": module.__file__,
    "missing": [n for n in names if not hasattr(module, n)],
    "namespaces": [getattr(easycore, "__file__", None), getattr(easycore.common, "__file__", None)],
    "easycore_common_path": list(easycore.common.__path__),
}))
"""


def probe(env, module: str) -> dict:
    return env.run_json(PROBE, module, json.dumps(DOCUMENTED[module][1]))


# --------------------------------------------------------------------------- (a) wheels


@pytest.fixture(scope="module")
def all_wheels_venv(artifacts, make_venv):
    """All six wheels and their dependencies in one fresh environment.

    torch is pinned to the exact build the running environment has (the CPU wheel in
    /opt/wheels here), so pip neither downloads another torch nor picks a CUDA one; the
    install unpacks it (about 30 s) rather than sharing the running environment's copy,
    so this environment sees nothing it did not install itself.
    """
    env = make_venv("all-wheels")
    env.install(*map(str, artifacts.wheels.values()), f"torch=={version('torch')}")
    return env


def test_all_wheels_install_consistently(all_wheels_venv):
    installed = all_wheels_venv.distributions()
    assert set(SIX) <= installed
    all_wheels_venv.pip("check")  # every Requires-Dist of everything installed is met


@pytest.mark.parametrize("module", sorted(DOCUMENTED))
def test_documented_import_paths_from_wheels(all_wheels_venv, module):
    found = probe(all_wheels_venv, module)
    assert found["error"] is None, found["error"]
    assert found["missing"] == [], f"{module} lacks documented names {found['missing']}"
    assert Path(found["file"]).is_relative_to(all_wheels_venv.home), found["file"]
    assert found["namespaces"] == [None, None], "easycore or easycore.common is not a namespace"


def test_versions_match_metadata_from_wheels(all_wheels_venv):
    code = (
        "import importlib, importlib.metadata as m, json\n"
        f"mods = {VERSIONED!r}\n"
        "print(json.dumps({d: [m.version(d), importlib.import_module(v).__version__]"
        " for d, v in mods.items()}))"
    )
    versions = all_wheels_venv.run_json(code)
    assert all(meta == source for meta, source in versions.values()), versions
    assert len({meta for meta, _ in versions.values()}) == 1, versions


def test_config_stays_light_where_heavy_packages_are_installed(all_wheels_venv):
    # requests, tqdm and torch are installed here, so this proves config does not pull
    # them in (numpy is not a dependency of anything here, so it is only listed).
    code = (
        "import json, sys\n"
        "from easycore.common.config import CfgNode\n"
        "cfg = CfgNode({'MODEL': {'DEPTH': 50}}); assert cfg.MODEL.DEPTH == 50\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    )
    assert all_wheels_venv.run_json(code) == []


def test_meta_package_start_up_check_runs_and_is_silent(all_wheels_venv):
    # The .pth ran the upgrade check (see test_packaging_upgrade.py) and found nothing.
    done = all_wheels_venv.attempt("import sys; print('_easycore_install_check' in sys.modules)")
    assert (done.returncode, done.stdout, done.stderr) == (0, "True\n", "")


# -------------------------------------------------------------------------- (b) editable

# The running environment is the development one (scripts/_env.sh's .venv, or hatch's
# default environment): all six distributions installed editable from packages/.


@pytest.mark.parametrize("name", SIX)
def test_running_env_has_the_distribution_editable(name):
    direct_url = distribution(name).read_text("direct_url.json")
    assert direct_url, f"{name} is not installed from a local folder"
    info = json.loads(direct_url)
    assert info.get("dir_info", {}).get("editable"), f"{name} is not editable: {info}"
    assert info["url"] == (ROOT / "packages" / name).as_uri()


@pytest.mark.parametrize("module", sorted(DOCUMENTED))
def test_documented_import_paths_editable(running_env, module):
    distribution = DOCUMENTED[module][0]
    found = probe(running_env, module)
    assert found["error"] is None, found["error"]
    assert found["missing"] == [], f"{module} lacks documented names {found['missing']}"
    assert Path(found["file"]).is_relative_to(ROOT / "packages" / distribution / "src")
    assert found["namespaces"] == [None, None], "easycore or easycore.common is not a namespace"
    # easycore.common spans the four light distributions' source trees.
    for light in ("easycore-config", "easycore-registry", "easycore-path", "easycore-parallel"):
        portion = ROOT / "packages" / light / "src" / "easycore" / "common"
        assert str(portion) in found["easycore_common_path"]


# ------------------------------------------------------------------------ (c) config only


@pytest.fixture(scope="module")
def config_only_venv(artifacts, make_venv):
    env = make_venv("config-only")
    env.install(str(artifacts.wheels["easycore-config"]))
    return env


def test_config_alone_installs_only_pyyaml(config_only_venv):
    assert config_only_venv.distributions() == {"easycore-config", "pyyaml"}


def test_config_alone_is_usable_and_light(config_only_venv):
    code = (
        "import json, sys\n"
        "from easycore.common.config import CfgNode\n"
        "cfg = CfgNode({'MODEL': {'NUM_CLASSES': 100}})\n"
        "cfg.SOLVER = CfgNode(); cfg.SOLVER.LR = 0.1\n"
        "assert cfg.MODEL.NUM_CLASSES == 100 and cfg.SOLVER.LR == 0.1\n"
        "loaded = CfgNode.load('NAME: easycore\\nSIZE: [224, 224]\\n')\n"
        "assert loaded.NAME == 'easycore' and list(loaded.SIZE) == [224, 224]\n"
        f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "try:\n"
        "    import easycore.common.parallel\n"
        "    missing = None\n"
        "except ModuleNotFoundError as exc:\n"
        "    missing = exc.name\n"
        "print(json.dumps({'heavy': heavy, 'missing': missing}))"
    )
    found = config_only_venv.run_json(code)
    # None of the heavy packages is installed here, so an import of one would have
    # failed above; this mainly guards against the config swallowing such an error.
    assert found["heavy"] == []
    assert found["missing"] == "easycore.common.parallel"


# ------------------------------------------------------------- (d) from a clone, as documented

CLONE_PAGES = ["README.md", "docs/installation.md"]
# A console line `$ pip install ...` with its continuation lines (ending in a backslash).
_CLONE_COMMAND = re.compile(r"^\$ pip install (?P<args>(?:.*\\\n)*.*)$", re.M)


def clone_install_commands() -> list[tuple[str, ...]]:
    """The arguments of each `$ pip install ./packages/...` the pages show, once each."""
    found: dict[tuple[str, ...], None] = {}
    for page in CLONE_PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        for match in _CLONE_COMMAND.finditer(text):
            args = tuple(shlex.split(match["args"].replace("\\\n", " "), comments=True))
            if args and all(arg.startswith("./packages/") for arg in args):
                found[args] = None
    return list(found)


def test_the_pages_show_commands_for_a_clone():
    commands = clone_install_commands()
    named = {arg for args in commands for arg in args}
    assert {f"./packages/{name}" for name in SIX} <= named, commands
    assert ("./packages/easycore-config",) in commands


def local_store_options(running_env) -> list[str]:
    """pip options that take packages from this machine's local store only: the
    ``file:`` indexes and the find-links of pip's configuration, instead of PyPI.
    Empty where pip's configuration names no local index (pip's own indexes then)."""
    listing = running_env.pip("config", "list")
    indexes, links = [], []
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        values = value.strip().strip("'\"").split()
        if key.endswith("index-url"):
            indexes += [v for v in values if v.startswith("file:")]
        elif key.endswith("find-links"):
            links += values
    if not indexes:
        return []
    options = ["--index-url", indexes[0]]
    for url in indexes[1:]:
        options += ["--extra-index-url", url]
    for link in dict.fromkeys(links):
        options += ["--find-links", link]
    return options


@pytest.mark.parametrize(
    "args", clone_install_commands(), ids=lambda args: "+".join(a.rsplit("/", 1)[1] for a in args)
)
def test_a_documented_install_from_the_clone_works(make_venv, running_env, tmp_path, args):
    names = {arg.rsplit("/", 1)[1].split("[", 1)[0] for arg in args}
    env = make_venv("from-clone", with_pip=True)
    extra = local_store_options(running_env)
    paths = [str(ROOT / arg) for arg in args]  # ./packages/... from the clone's root
    if "easycore-torch" in names:
        # Resolved and built, not unpacked: torch is 750 MB in an environment, and the
        # wheels of (a) show easycore-torch importing. The build the running environment
        # has (the CPU wheel here), not a CUDA one.
        torch = pytest.importorskip("torch")
        pin = tmp_path / "torch.txt"
        pin.write_text(f"torch=={torch.__version__}\n", encoding="utf-8")
        report = tmp_path / "report.json"
        env.own_pip("install", "--quiet", "--dry-run", "--report", str(report),
                    "--constraint", str(pin), *extra, *paths)
        planned = {item["metadata"]["name"]: item["metadata"]["version"]
                   for item in json.loads(report.read_text(encoding="utf-8"))["install"]}
        assert {d for d in planned if d.startswith("easycore")} == names
        assert planned["torch"] == torch.__version__
        assert all(planned[d] == version(d) for d in names)
        return
    env.own_pip("install", "--quiet", *extra, *paths)
    installed = {d for d in env.distributions() if d.startswith("easycore")}
    assert installed == names  # nothing named easycore came from the index (0.4.2)
    env.own_pip("check")
    code = (
        "import importlib, importlib.metadata as m, json, sys\n"
        "print(json.dumps({d: [m.version(d), importlib.import_module(mod).__version__]"
        " for d, mod in json.loads(sys.argv[1]).items()}))"
    )
    versions = env.run_json(code, json.dumps({d: VERSIONED[d] for d in names if d in VERSIONED}))
    assert versions == {d: [version(d), version(d)] for d in versions}
    for module, (owner, _) in DOCUMENTED.items():
        if owner in names:
            found = probe(env, module)
            assert found["error"] is None, found["error"]
            assert found["missing"] == [], f"{module} lacks documented names {found['missing']}"
