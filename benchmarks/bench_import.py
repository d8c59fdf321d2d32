"""Benchmark the import time of easycore.common.config (goal: under 15 ms).

Light means light: an app that builds its config from a dict, or a tool that
imports the package only to type-check, should not pay for YAML it never
reads, so PyYAML is imported when YAML is first read or written. This measures
`import easycore.common.config` with `python -X importtime` in fresh
interpreters, best of N, beside the same measurement of `import yaml` and
`import json` as peers, and `import easycore.common.registry` for information.

Each interpreter runs with a private bytecode cache (`-X pycache_prefix`),
filled by one untimed run first, so that every module is timed as an
installed, compiled package is imported, not while being compiled.

Run: `scripts/bench import` or `python benchmarks/bench_import.py` (~5 s).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile

REPEAT = 15
GOAL_MS = 15.0
MODULES = [
    ("easycore.common.config", "easycore"),
    ("yaml", "peer"),
    ("json", "peer"),
    ("easycore.common.registry", "informative"),
]


def import_us(module: str, pycache: str) -> int:
    """Cumulative microseconds `python -X importtime` reports for importing `module`."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the bytecode cache must be used and filled
    result = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-X",
            f"pycache_prefix={pycache}",
            "-c",
            f"import {module}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    for line in result.stderr.splitlines():
        # "import time: self [us] | cumulative | imported package"; the module
        # itself is the line whose name is not indented.
        parts = line.split("|")
        if len(parts) == 3 and parts[2].rstrip() == f" {module}":
            return int(parts[1])
    raise RuntimeError(f"no importtime line for {module}:\n{result.stderr[-2000:]}")


def main() -> None:
    print(
        f"import-time benchmark: Python {platform.python_version()}, "
        f"{platform.machine()}, python -X importtime, best of {REPEAT} fresh interpreters"
    )
    with tempfile.TemporaryDirectory(prefix="bench-import-") as pycache:
        best: dict[str, float] = {}
        for module, _ in MODULES:
            import_us(module, pycache)  # untimed: compiles into the private cache
            best[module] = min(import_us(module, pycache) for _ in range(REPEAT)) / 1000
    ours = best["easycore.common.config"]
    print()
    print(f"    {'import':<34} {'role':<12} {'ms':>7} {'config vs it':>13}")
    for module, role in MODULES:
        ms = best[module]
        print(f"    {module:<34} {role:<12} {ms:>7.2f} {ours / ms:>12.2f}x")
    verdict = "met" if ours < GOAL_MS else "NOT met"
    print(
        f"    goal: import easycore.common.config < {GOAL_MS:.0f} ms -> {ours:.2f} ms ({verdict})"
    )
    print(f"    it is {best['yaml'] / ours:.1f}x faster than importing PyYAML alone")


if __name__ == "__main__":
    main()
