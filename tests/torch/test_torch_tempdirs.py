"""``tensor_sharing="torch"``: a worker killed (a task timeout, a death) leaves
no ``pymp-*/listener-*`` directory in TMPDIR (issue 20 item 23).

Torch's CPU tensor sharing serves file descriptors from a listener socket in
multiprocessing's temporary directory; only a clean exit removes it.
"""

from __future__ import annotations

import multiprocessing.process
import os
import tempfile

import pytest
from _torch_pool_funcs import block, die_on, sleepy_block

from easycore.common.parallel import WorkerDiedError
from easycore.torch.parallel import Pool, TaskTimeoutError

pytestmark = pytest.mark.timeout(120)

WAIT = 60


@pytest.fixture
def private_tmpdir(tmp_path, monkeypatch):
    """TMPDIR for this test only, and no temporary directory made yet by this process."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # for spawned workers
    config = multiprocessing.process.current_process()._config
    monkeypatch.delitem(config, "tempdir", raising=False)

    def left():
        own = config.get("tempdir")  # this process's own, removed at its exit
        return sorted(e for e in os.listdir(tmp_path)
                      if own is None or os.path.join(str(tmp_path), e) != own)

    return left


# Not fork: late in a session that has run torch on several threads, a forked
# torch worker may abort in native code (torch's own advice is spawn); a death
# under fork is the next test.
@pytest.mark.parametrize("method", ["spawn"])
def test_a_worker_killed_by_a_timeout_leaves_no_temp_dir(method, private_tmpdir, no_leaks):
    with Pool(1, tensor_sharing="torch", start_method=method, cpu_threads=1) as pool:
        it = pool.imap(sleepy_block, [0, 1, 2], 1, task_timeout=2)
        assert int(it.next(timeout=WAIT).sum()) == 0  # a tensor shared: a listener made
        with pytest.raises(TaskTimeoutError):
            it.next(timeout=WAIT)
        assert int(it.next(timeout=WAIT).sum()) == 2 * 512 * 512
    assert private_tmpdir() == []


def test_a_worker_that_died_leaves_no_temp_dir(private_tmpdir, no_leaks):
    with Pool(1, tensor_sharing="torch", start_method="fork", cpu_threads=1) as pool:
        # One at a time: a result's descriptors are served by its worker, which
        # must still live when the caller takes them.
        assert float(pool.apply(die_on, (0,)).sum()) == 0
        with pytest.raises(WorkerDiedError):
            pool.apply(die_on, (3,))
        assert float(pool.apply(die_on, (1,))[0, 0]) == 1
        assert private_tmpdir() == [] or all(
            e.startswith("ecpt-") for e in private_tmpdir())  # the live worker's own
    assert private_tmpdir() == []


def test_blocks_travel_as_before(private_tmpdir, no_leaks):
    with Pool(2, tensor_sharing="torch") as pool:
        assert [int(t[0, 0]) for t in pool.map(block, range(4), 1)] == [0, 1, 2, 3]
    assert private_tmpdir() == []
