"""Fixtures of the distributed tests: leak checks, and the helpers on the path.

Every test starts real ranks (gloo on 127.0.0.1); nothing is mocked.
``no_leaks`` asserts that a test left no process, thread, file descriptor
or shared-memory segment behind.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Read by Ray at import: Ray's processes then use 127.0.0.1, as in tests/ray.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "examples"
# `_dist_helpers` and the tutorial's `network`; spawned ranks inherit sys.path.
for path in (str(HERE), str(EXAMPLES)):
    if path not in sys.path:
        sys.path.append(path)

from leaks import check_leaks  # noqa: E402


@pytest.fixture(scope="session")
def _process_state():
    """What lives as long as this process, made once, is no leak: torch's pipe for its
    stores' event loop (from the first store on)."""
    from easycore.torch.distributed.rendezvous import open_store

    store, _ = open_store()
    del store


@pytest.fixture
def no_leaks(_process_state):
    """Fail the test if it leaves processes, threads, descriptors or shared memory behind."""
    with check_leaks(fds=True):
        yield
