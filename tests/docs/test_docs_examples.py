"""Every code example in the documentation runs (see ``docblocks.py`` for the convention)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from docblocks import ROOT, Script, all_scripts, foreign_hosts, pages, parse_blocks
from processes import ray_free_environment

#: Seconds one page's script may run (override with EASYCORE_DOCS_TIMEOUT).
TIMEOUT = float(os.environ.get("EASYCORE_DOCS_TIMEOUT", "120"))
#: Seconds the processes an example started may take to go away after it ends.
GRACE = 15.0

SCRIPTS = all_scripts()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a recycled group id
        return True
    return True


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _tail(text: str, limit: int = 6000) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]


def run_script(script: Script, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    for block in script.files:
        target = (work / block.title).resolve()
        if work.resolve() not in target.parents:
            pytest.fail(f"{block.where}: file title {block.title!r} leaves the example directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(block.lines) + "\n", encoding="utf-8")
    # The script lives beside, not inside, the working directory so that
    # examples listing their directory see only what they made themselves.
    script_dir = tmp_path / "script"
    script_dir.mkdir()
    script_file = script_dir / (script.page.replace("/", "--") + ".py")
    script_file.write_text(script.source(), encoding="utf-8")

    env = ray_free_environment()  # no Ray session of an earlier test's
    env["HOME"] = str(tmp_path / "home")  # nothing lands in the real ~/.easycore
    env["EASYCORE_CACHE"] = str(tmp_path / "cache")
    env["EASYCORE_SERVICES_DIR"] = str(tmp_path / "services")  # named services stay private
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(work), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env["MPLBACKEND"] = "Agg"
    no_proxy = ",".join(filter(None, [env.get("NO_PROXY"), "127.0.0.1,localhost"]))
    env["NO_PROXY"] = env["no_proxy"] = no_proxy
    (tmp_path / "home").mkdir()

    proc = subprocess.Popen(
        [sys.executable, str(script_file)],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: nothing outlives the test
    )
    try:
        output, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        output, _ = proc.communicate()
        pytest.fail(
            f"{script.id}: examples did not finish within {TIMEOUT:.0f}s "
            f"(line numbers are those of {script.page}):\n{_tail(output)}"
        )
    deadline = time.monotonic() + GRACE
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    leaked = _group_alive(proc.pid)
    _kill_group(proc.pid)
    if proc.returncode != 0:
        pytest.fail(
            f"{script.id}: examples failed with exit status {proc.returncode} "
            f"(line numbers are those of {script.page}):\n{_tail(output)}"
        )
    if leaked:
        pytest.fail(
            f"{script.id}: examples finished but left processes running {GRACE:.0f}s later "
            f"(a runner that was not closed?):\n{_tail(output)}"
        )


@pytest.mark.timeout(TIMEOUT + GRACE + 60)
@pytest.mark.parametrize("script", SCRIPTS, ids=[s.id for s in SCRIPTS])
def test_example_runs(script: Script, tmp_path: Path) -> None:
    missing = script.missing()
    if missing:
        pytest.skip("; ".join(missing))
    bad = foreign_hosts(script)
    assert not bad, "executed examples may only use loopback URLs:\n" + "\n".join(bad)
    run_script(script, tmp_path)


def test_examples_are_found() -> None:
    """The collector sees the pages and their examples (guards against a silent no-op)."""
    found = {p.relative_to(ROOT).as_posix() for p in pages()}
    assert "docs/index.md" in found
    assert "docs/tutorials/config.md" in found
    assert any(s.page == "docs/tutorials/config.md" and s.blocks for s in SCRIPTS)


def test_fences_parse() -> None:
    """Every page parses: fences close and requirement names are known."""
    for page in pages():
        parse_blocks(page)  # raises with page:line on a problem
