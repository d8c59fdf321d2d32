"""easycore's worker modules in the forkserver's preload list (issue 32, item 1).

Under ``forkserver`` (Python 3.14's default on Linux) every worker is forked
from one server: easycore adds its worker modules to the server's preload
list before the server starts, so that workers start with them imported.
The user's own list is kept, a server already running is left alone, and
``EASYCORE_FORKSERVER_PRELOAD=0`` turns it off. Each case runs in a fresh
interpreter (one forkserver per process, started once).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import textwrap

import pytest

from easycore.common.parallel._os.startup import PRELOAD

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(),
                       reason="no forkserver on this platform"),
]

SCRIPT = """
import json, multiprocessing, sys
from multiprocessing import forkserver
from easycore.common.parallel import Pool


def modules(_):
    return sorted(m for m in sys.modules if m == "colorsys")


if __name__ == "__main__":
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["colorsys"])  # the user's own choice
    if sys.argv[1] == "running":  # the user's forkserver runs before easycore's pool
        with ctx.Pool(1) as pool:
            pool.map(abs, [1])
    with Pool(2, start_method="forkserver") as pool:
        seen = pool.map(modules, [0])[0]
    print(json.dumps({"preload": forkserver._forkserver._preload_modules, "worker": seen}))
"""


def run(case: str, script: str = SCRIPT, **env: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script), case],
                          capture_output=True, text=True, timeout=150,
                          env=dict(os.environ, **env))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_workers_modules_are_added_to_the_users_list():
    report = run("fresh")
    assert report["preload"] == ["colorsys", *PRELOAD]
    # The server preloaded the user's module: the worker has it without importing it.
    assert "colorsys" in report["worker"]


def test_a_running_server_is_left_alone():
    report = run("running")
    assert report["preload"] == ["colorsys"]


def test_it_can_be_turned_off():
    report = run("fresh", EASYCORE_FORKSERVER_PRELOAD="0")
    assert report["preload"] == ["colorsys"]


def test_every_preloaded_module_exists():
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)


# When the client's own modules were imported: whether the forkserver had been
# started, and how many workers ran. The server, and the workers under spawn and
# forkserver, boot while the client sets up, not after.
EARLY_SCRIPT = """
import importlib.abc, json, multiprocessing, sys
from multiprocessing import forkserver

WATCHED = {"easycore.common.parallel.pool.results": "Pool",
           "easycore.common.parallel.engine.core": "runner"}
seen = {}


class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name in WATCHED:
            seen[WATCHED[name]] = {"server": forkserver._forkserver._forkserver_pid is not None,
                                   "workers": len(multiprocessing.active_children())}
        return None


if __name__ == "__main__":
    client, method = sys.argv[1], sys.argv[2]
    sys.meta_path.insert(0, Watch())
    from easycore.common.parallel import Pool, UnorderedRunner
    if client == "Pool":
        with Pool(2, start_method=method) as pool:
            assert pool.map(abs, [-1]) == [1]
    else:
        with UnorderedRunner(2, start_method=method) as runner:
            runner([1])
    print(json.dumps(seen[client]))
"""


def early(client: str, method: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(EARLY_SCRIPT), client, method],
                          capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("client", ["Pool", "runner"])
def test_the_server_starts_before_the_client_imports_its_own_parts(client):
    assert early(client, "forkserver")["server"] is True


@pytest.mark.parametrize("method", [m for m in ("spawn", "forkserver")
                                    if m in multiprocessing.get_all_start_methods()])
@pytest.mark.parametrize("client", ["Pool", "runner"])
def test_the_workers_start_before_the_client_imports_its_engine(client, method):
    assert early(client, method)["workers"] == 2


def test_the_servers_exit_freezes_its_objects():
    # A handler registered before the module (as multiprocessing's own are in the
    # server) runs after its freeze: the objects are frozen by the shutdown's end.
    code = ("import atexit, gc, os\n"
            "atexit.register(lambda: os.write(1, str(gc.get_freeze_count()).encode()))\n"
            "import easycore.common.parallel._os.server_exit\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) > 0
