"""Work given to a pool just made, while some of its workers still start: it waits for
them rather than queueing behind the first one ready (``Dispatcher.share_left``)."""

from __future__ import annotations

import pytest
from _parallel_support import METHODS
from _pool_funcs import meet

from easycore.common.parallel import Pool

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("method", METHODS)
def test_two_long_tasks_given_at_once_run_on_two_workers(method, tmp_path, no_leaks):
    # Each task waits until both run: queued behind each other on the first worker
    # ready, they would only meet at the deadline, in one process.
    with Pool(2, start_method=method) as pool:
        got = pool.map(meet, [str(tmp_path)] * 2, chunksize=1)
    assert [met for _, met in got] == [True, True]
    assert len({pid for pid, _ in got}) == 2
