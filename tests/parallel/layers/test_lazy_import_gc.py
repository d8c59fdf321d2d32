"""The lazy imports run with the garbage collector paused, and leave it as they found it.

Each case runs in a fresh interpreter: the collector's state is process-wide,
and the modules must not be imported yet.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(120)


def run_fresh(code: str) -> str:
    """What ``code`` prints in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_no_collection_runs_while_a_lazy_name_is_imported():
    # A threshold of 1 collects at nearly every allocation: an import of the
    # pool's ~50 modules ran ~6,000 collections without the pause. (The
    # package itself, a few small modules, is imported as any other.)
    out = run_fresh("""
        import gc, multiprocessing
        import easycore.common.parallel
        multiprocessing.set_start_method("fork")
        collections = []
        gc.callbacks.append(lambda phase, info: phase == "start" and collections.append(1))
        gc.set_threshold(1)
        from easycore.common.parallel import Pool
        after_import = len(collections)
        with Pool(1) as pool:  # its constructor imports the caller's parts through the same pause
            pool.apply(abs, (-1,))
        gc.set_threshold(700)
        print(after_import, gc.isenabled())
    """)
    during, enabled = out.split()
    assert int(during) < 5, f"{during} collections ran during the import"
    assert enabled == "True"


def test_a_collector_you_disabled_stays_disabled():
    out = run_fresh("""
        import gc
        gc.disable()
        from easycore.common.parallel import Pool, UnorderedRunner
        print(gc.isenabled())
    """)
    assert out == "False"


def test_the_collector_runs_again_after_an_import_that_failed():
    out = run_fresh("""
        import gc
        from easycore.common.parallel import _lazy
        try:
            _lazy.load(".no_such_module", "easycore.common.parallel")
        except ImportError as exc:
            print(type(exc).__name__, gc.isenabled())
    """)
    assert out == "ModuleNotFoundError True"
