"""Suite-wide: this folder is on sys.path, so every test folder can import
the helpers beside this file (e.g. :mod:`processes`, :mod:`leaks`); the
``slow`` marker is applied here (see :mod:`markers`); and
``EASYCORE_TEST_START_METHOD`` makes another start method the platform's default
before any test runs (see :mod:`default_start_method`); on CPython 3.12+ a test
whose code forked a process with threads fails (see :mod:`fork_warnings`)."""

import importlib.util
import os
import signal
import sys
from pathlib import Path

import default_start_method
from markers import mark_slow

# On 3.12+, a fork from a process with threads fails its test (see fork_warnings).
pytest_plugins = ["fork_warnings"]

HERE = Path(__file__).resolve().parent
# At import, before the other folders' conftests and any test module: the first of
# them may already use multiprocessing.
START_METHOD = default_start_method.apply_from_environment()


def _hide_folders_named_like(*libraries: str) -> None:
    """tests/torch and tests/ray are folders on sys.path, so where the library of that
    name is not installed (``scripts/test-dist parallel``), ``import torch`` would find
    the folder as a namespace package and ``pytest.importorskip("torch")`` would not
    skip. Mark such a library as missing instead, so its tests skip cleanly."""
    for name in libraries:
        spec = importlib.util.find_spec(name) if name not in sys.modules else None
        if spec is not None and spec.origin is None and all(
            Path(p).resolve().parent == HERE for p in spec.submodule_search_locations or ()
        ):
            sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError


_hide_folders_named_like("torch", "ray")

# A suite started in the background by a shell without job control (`scripts/test &`,
# `nohup`) inherits SIGINT ignored, and so does every process it starts: the Ctrl-C
# tests would wait for an interrupt that never comes. Give it the handler Python
# installs under a terminal (the scripts it runs, exec'd, start with the default
# disposition and install theirs).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# A Ray head waits 30 s for its GCS to come up; on a loaded 2-core CI box that has
# run out (a docs example's cluster failed to start). Every Ray the suite starts,
# in this process or in an example script, inherits the longer wait.
os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "120")


def pytest_addoption(parser):
    parser.addoption(
        "--default-start-method-only", action="store_true",
        help="deselect the tests that choose their own start method (the default does not "
             "reach them): what a run under another default needs to run again",
    )


def pytest_report_header(config):
    if START_METHOD:
        return f"default start method: {START_METHOD} (${default_start_method.ENV})"
    return None


def pytest_collection_modifyitems(config, items):
    mark_slow(items)
    if config.getoption("--default-start-method-only"):
        chosen = [item for item in items if default_start_method.chooses_its_own(item)]
        if chosen:
            config.hook.pytest_deselected(items=chosen)
            items[:] = [item for item in items if not default_start_method.chooses_its_own(item)]
