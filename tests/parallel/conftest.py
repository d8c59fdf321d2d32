"""Fixtures for the parallel runner tests.

Runners start real worker processes; nothing is mocked. ``no_leaks`` asserts
that a test left no worker process, no thread and no shared-memory segment
behind (multiprocessing's own long-lived helpers, the resource tracker and
the forkserver, and easycore's launcher thread, are allowed: they are started
once per interpreter).
"""

from __future__ import annotations

import pytest
from leaks import check_leaks


@pytest.fixture
def no_leaks():
    """Fail the test if it leaves processes, threads or /dev/shm segments behind."""
    with check_leaks(shm=("ecp-{pid:x}-",)):
        yield
