#!/usr/bin/env python3
"""Run yacs's, fvcore's and iopath's own test suites against easycore, and count.

The peers' suites are not part of this repository (their licences, and this project's
policy): point the script at checkouts you have (a clone, or a bare mirror), and it
reads the test files from them with `git show`. Nothing is fetched from the network.

    python scripts/peer_suites.py \\
        --checkout yacs=~/src/yacs@v0.1.8 \\
        --checkout fvcore=~/src/fvcore@HEAD \\
        --checkout iopath=~/src/iopath@v0.1.10

Each suite runs twice, in the same Python:

- against the peer itself (`--peers-python`, an environment with yacs, fvcore and
  iopath installed), to know which tests pass there at all (here: no internet);
- against easycore, through shim packages named `yacs`, `fvcore` and `iopath` that
  only rename imports: each name is easycore's name for the same thing
  (`iopath.common.download.download` is `easycore.common.network.download_file`, ...).
  A name easycore has no counterpart for (iopath's `OneDrivePathHandler`; fvcore's
  `HistoryBuffer`, `Timer`) is a placeholder that fails when used, as is a name an
  older easycore lacks (so that the script measures any version); iopath's telemetry
  module (`event_logger`, which its tests patch) is a stub that logs nothing.

A test counts if it passes against the peer here and is neither

- one easycore differs on by design (`BY_DESIGN` below: it never runs code from a
  config, keeps a frozen config frozen, refuses a duplicate registry name, keeps URLs
  read-only, prints a config as the manual shows, holds any object in a config), nor
- not applicable (`NOT_APPLICABLE`: it patches the peer's private functions, so that
  what it checks is the peer's inside, or tests a handler for a proprietary service).

Neither kind counts as a pass or a failure. The script prints, per suite, how many of
the counted tests pass against easycore, why the others fail, and the tests left out.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Suite:
    """One peer's tests: files to copy (repository path -> path in the run folder)."""

    name: str
    files: dict[str, str]
    tests: list[str]  # pytest node ids (relative to the run folder) to run
    select: str = ""  # pytest -k expression
    data: dict[str, str] = field(default_factory=dict)  # more files the tests read


SUITES = {
    "yacs": Suite(
        "yacs",
        files={"yacs/tests.py": "test_yacs.py"},
        tests=["test_yacs.py"],
        data={
            "example/config_new_allowed.yaml": "example/config_new_allowed.yaml",
            "example/config_new_allowed_bad.yaml": "example/config_new_allowed_bad.yaml",
            "example/config_override.py": "example/config_override.py",
            "example/config_override_from_dict.py": "example/config_override_from_dict.py",
        },
    ),
    "fvcore": Suite(
        "fvcore",
        files={"tests/test_common.py": "test_fvcore_common.py"},
        tests=["test_fvcore_common.py"],
        select="TestCfgNode or TestRegistry",  # the config and registry tests
        data={f"tests/configs/{n}.yaml": f"configs/{n}.yaml"
              for n in ("base", "base2", "config", "config_multi_base")},
    ),
    "iopath": Suite(
        "iopath",
        files={"tests/test_file_io.py": "test_iopath_file_io.py",
               "tests/test_download.py": "test_iopath_download.py"},
        tests=["test_iopath_file_io.py", "test_iopath_download.py"],
    ),
}

#: Tests of what easycore does differently by design, and what it is.
BY_DESIGN = {
    "test_yacs.TestCfg.test_load_cfg_invalid_type":
        "a YAML tag that constructs an object (easycore never constructs one)",
    "test_yacs.TestCfg.test_load_from_python_file":
        "a config that is a Python file, run to read it (configs never run code)",
    "test_yacs.TestCfg.test__str__":
        "str(cfg) is YAML in yacs; easycore's manual documents the dict's text "
        "(CfgNode.__str__, 'a str of dict format'); cfg.dump() is the YAML",
    "test_yacs.TestCfg.test_invalid_type":
        "yacs refuses object() as a value when set; easycore's manual has a runner's "
        "cfg carry data between its functions, so any object is kept in memory and "
        "refused only when saved",
    "test_fvcore_common.TestCfgNode.test_merge_from_file":
        "!!python/object/apply:eval with allow_unsafe=True (configs never run code)",
    "test_fvcore_common.TestCfgNode.test_setattr":
        "COMPUTED_ keys written into a frozen config (a frozen config stays frozen)",
    "test_fvcore_common.TestRegistry.test_registry":
        "a duplicate name, refused as an AssertionError (easycore: KeyError); it also "
        "iterates (name, object) pairs, where easycore iterates names",
    "test_iopath_file_io.TestHTTPIO.test_open_writes":
        "an HTTP URL opened for writing, refused as an AssertionError (easycore: "
        "PermissionError)",
}

_PATCHES_DOWNLOAD = (
    "patches iopath's private download function (file_io.download) and cache folder, "
    "so that what it checks is iopath's inside; easycore's own tests download from a "
    "loopback server instead"
)

#: Tests that do not apply to another library, and why.
NOT_APPLICABLE = {
    "test_iopath_file_io.TestHTTPIO.test_get_local_path": _PATCHES_DOWNLOAD,
    "test_iopath_file_io.TestHTTPIO.test_open": _PATCHES_DOWNLOAD,
    "test_iopath_file_io.TestHTTPIO.test_copy_across_handlers": _PATCHES_DOWNLOAD,
    "test_iopath_file_io.TestHTTPIO.test_open_new_path_manager":
        _PATCHES_DOWNLOAD + "; it also expects PathManager() to start with no handlers "
        "(easycore has one registry per process)",
    "test_iopath_file_io.TestOneDrive.test_one_drive_download":
        "OneDrivePathHandler, a handler for Microsoft's file-sharing links (a proprietary "
        "service; easycore has no handler of a vendor's service)",
}

#: Why a test that counts fails against easycore, where it is known (else the error).
KNOWN: dict = {}

SHIMS = {
    "yacs/__init__.py": "",
    "yacs/config.py": """
        from _absent import absent
        from easycore.common.config import *  # noqa: F403
        from easycore.common.config import CfgNode

        # yacs's module-level name for the same method (absent from older easycore)
        load_cfg = getattr(CfgNode, "load_cfg", absent("load_cfg"))
    """,
    "fvcore/__init__.py": "",
    "fvcore/common/__init__.py": "",
    "fvcore/common/config.py": "from easycore.common.config import CfgNode  # noqa: F401\n",
    "fvcore/common/registry.py": "from easycore.common.registry import Registry  # noqa: F401\n",
    "fvcore/common/history_buffer.py": (
        "from _absent import absent\nHistoryBuffer = absent('HistoryBuffer')\n"
    ),
    "fvcore/common/timer.py": "from _absent import absent\nTimer = absent('Timer')\n",
    "iopath/__init__.py": "",
    "iopath/common/__init__.py": "",
    "iopath/common/file_io.py": """
        import easycore.common.path as _path
        from _absent import absent
        from easycore.common.path import HTTPURLHandler, PathHandler, PathManager  # noqa: F401

        # (absent from easycore before 0.5.0)
        LazyPath = getattr(_path, "LazyPath", absent("LazyPath"))
        PathManagerFactory = getattr(_path, "PathManagerFactory", absent("PathManagerFactory"))
        g_pathmgr = PathManager()
        get_cache_dir = PathHandler().get_cache_dir
        OneDrivePathHandler = absent("OneDrivePathHandler")
    """,
    "iopath/common/download.py": (
        "from easycore.common.network import download_file as download  # noqa: F401\n"
    ),
    "iopath/common/event_logger.py": """
        class EventLogger:
            '''iopath's telemetry, which its tests patch: nothing to log here.'''

            def log_event(self, *args, **kwargs):
                pass
    """,
    "_absent.py": """
        def absent(name):
            class Absent:
                def __init__(self, *args, **kwargs):
                    raise NotImplementedError(f"easycore has no counterpart of {name}")

                def __getattr__(self, attr):
                    raise NotImplementedError(f"easycore has no counterpart of {name}")

            Absent.__name__ = name
            for method in ("get", "remove"):
                setattr(Absent, method, staticmethod(lambda *a, **k: Absent()))
            return Absent
    """,
}


def read(checkout: str, ref: str, path: str) -> bytes:
    return subprocess.run(
        ["git", "-C", checkout, "show", f"{ref}:{path}"], check=True, capture_output=True
    ).stdout


def outcomes(python: str, folder: Path, suite: Suite, pythonpath: list[str]) -> dict[str, str]:
    """Run the suite's tests in `folder`; {test id: "passed" or the error's first line}."""
    report = folder / f"{suite.name}.xml"
    command = [python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-o", "addopts=",
               f"--junitxml={report}", *suite.tests]
    if suite.select:
        command += ["-k", suite.select]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*pythonpath, env.get("PYTHONPATH", "")]).strip(os.pathsep)
    env["EASYCORE_CACHE"] = str(folder / "cache")
    subprocess.run(command, cwd=folder, env=env, capture_output=True, timeout=900)
    results = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        test = f"{case.get('classname')}.{case.get('name')}"
        problem = next((child for child in case if child.tag in ("failure", "error")), None)
        skipped = next((child for child in case if child.tag == "skipped"), None)
        if problem is not None:
            message = (problem.get("message") or problem.text or "").strip().splitlines()
            results[test] = message[0][:160] if message else problem.tag
        elif skipped is not None:
            results[test] = "skipped"
        else:
            results[test] = "passed"
    return results


def prepare(suite: Suite, checkout: str, ref: str, root: Path, shims: bool) -> Path:
    folder = root / ("easycore" if shims else "peer") / suite.name
    for source, target in {**suite.files, **suite.data}.items():
        (folder / target).parent.mkdir(parents=True, exist_ok=True)
        (folder / target).write_bytes(read(checkout, ref, source))
    if shims:
        for name, text in SHIMS.items():
            path = root / "shims" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", action="append", default=[], metavar="NAME=PATH[@REF]",
                        help="a git checkout (or bare mirror) of yacs, fvcore or iopath")
    parser.add_argument("--python", default=sys.executable,
                        help="the Python with easycore installed (default: this one)")
    parser.add_argument("--peers-python", default=None,
                        help="a Python with yacs, fvcore and iopath installed, for the "
                        "baseline (default: count every test as passing there)")
    args = parser.parse_args(argv)
    checkouts = {}
    for item in args.checkout:
        name, _, where = item.partition("=")
        path, _, ref = where.partition("@")
        checkouts[name] = (os.path.expanduser(path), ref or "HEAD")
    unknown = set(checkouts) - set(SUITES)
    if unknown or not checkouts:
        parser.error(f"give --checkout for some of {sorted(SUITES)}")
    total = {"counted": 0, "passed": 0}
    with tempfile.TemporaryDirectory(prefix="easycore-peers-") as tmp:
        root = Path(tmp)
        for name, (path, ref) in checkouts.items():
            suite = SUITES[name]
            ours = outcomes(args.python, prepare(suite, path, ref, root, True), suite,
                            [str(root / "shims")])
            if args.peers_python:
                theirs = outcomes(args.peers_python, prepare(suite, path, ref, root, False),
                                  suite, [])
            else:
                theirs = dict.fromkeys(ours, "passed")
            report(name, ref, ours, theirs, total)
    rate = 100 * total["passed"] / max(total["counted"], 1)
    print(f"\nall: {total['passed']} of {total['counted']} counted tests pass ({rate:.0f}%)")
    return 0


def report(name: str, ref: str, ours: dict, theirs: dict, total: dict) -> None:
    tests = sorted(set(ours) | set(theirs))
    not_here = [t for t in tests if theirs.get(t) != "passed"]
    by_design = [t for t in tests if t in BY_DESIGN and t not in not_here]
    not_applicable = [t for t in tests if t in NOT_APPLICABLE and t not in not_here]
    left_out = set(not_here) | set(by_design) | set(not_applicable)
    counted = [t for t in tests if t not in left_out]
    passed = [t for t in counted if ours.get(t) == "passed"]
    rate = 100 * len(passed) / max(len(counted), 1)
    print(f"\n== {name} ({ref}): {len(tests)} tests; {len(not_here)} fail against {name} "
          f"itself here; {len(by_design)} differ by design; {len(not_applicable)} not "
          "applicable")
    print(f"   counted: {len(counted)}, pass against easycore: {len(passed)} ({rate:.0f}%)")
    if not_applicable:
        everything = len(counted) + len(not_applicable)
        print(f"   (counting the {len(not_applicable)} not applicable as failures: "
              f"{len(passed)} of {everything}, {100 * len(passed) / everything:.0f}%)")
    for test in by_design:
        print(f"   by design: {test.split('.', 1)[1]}: {BY_DESIGN[test]}")
    for test in not_applicable:
        print(f"   not applicable: {test.split('.', 1)[1]}: {NOT_APPLICABLE[test]}")
    for test in not_here:
        print(f"   fails against {name} here: {test.split('.', 1)[1]}: {theirs.get(test)}")
    for test in counted:
        if ours.get(test) != "passed":
            why = KNOWN.get(test, ours.get(test, "not run"))
            print(f"   FAILS: {test.split('.', 1)[1]}: {why}")
    total["counted"] += len(counted)
    total["passed"] += len(passed)


if __name__ == "__main__":
    sys.exit(main())
