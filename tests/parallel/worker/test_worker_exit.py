"""How a worker process ends: a ``spawn`` worker's shutdown runs every ``atexit`` handler
and skips the collector's passes over what it made (``gc.freeze``); the callers' ``close``
and ``terminate`` no longer wait for them."""

from __future__ import annotations

import json
import os

import pytest
from _parallel_helpers import ReportsExit
from _pool_funcs import report_exit_to, square

from easycore.common.parallel import Pool

pytestmark = pytest.mark.timeout(120)


def _reports(directory) -> list:
    return [json.loads((directory / name).read_text()) for name in sorted(os.listdir(directory))]


@pytest.mark.parametrize("how", ["runner close", "pool close", "pool terminate"])
def test_a_spawn_workers_exit_runs_its_atexit_handlers_with_its_objects_frozen(tmp_path, how):
    if how == "runner close":
        with ReportsExit(2, start_method="spawn", cfg={"exit_dir": str(tmp_path)}) as runner:
            assert runner(range(4)) == [0, 1, 2, 3]
    else:
        pool = Pool(2, start_method="spawn", initializer=report_exit_to,
                    initargs=(str(tmp_path),))
        assert pool.map(square, range(4)) == [0, 1, 4, 9]
        if how == "pool close":
            pool.close()
        else:
            pool.terminate()  # SIGTERM: each worker leaves its loop through ``Terminated``
        pool.join()
    reports = _reports(tmp_path)
    # Every worker that started reported (a spawn worker's atexit handlers run); one
    # still starting when ``terminate`` came dies of the SIGTERM before its initializer.
    expected = (1, 2) if how == "pool terminate" else (2,)
    assert len(reports) in expected, reports
    # ... after the objects it made were frozen: the shutdown's collections skip them.
    assert all(r["frozen"] > 0 for r in reports), reports
