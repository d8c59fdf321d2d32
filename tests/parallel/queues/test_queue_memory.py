"""The Queue's shared memory (issue 34 items 3 and 4).

``maxsize`` bounds memory, not a counter: a producer in another process that
waits for room holds no segment. And the queue pickles into any process of
this user, also an unrelated ``python`` that loads it from a file: every
segment's name is the owner's (its resource tracker's) from before the
segment exists, so no other process's tracker deletes an item the owner
still holds, and the owner's exit reports nothing leaked.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import queue
import subprocess
import sys

import numpy as np
import pytest
from _parallel_support import METHODS, SCRIPTS, run_script, shm_named
from _queue_funcs import produce_and_report
from queue_support import check_room_before_memory

from easycore.common.parallel import Queue

pytestmark = pytest.mark.timeout(240)


# ------------------------------------------------------------------ item 3
@pytest.mark.forks_with_threads  # the queue's server threads run while fork workers start
@pytest.mark.parametrize("method", METHODS)
def test_maxsize_bounds_a_producers_shared_memory(method):
    """maxsize=2 and nobody taking: the producer had 171 x 1 MiB in /dev/shm."""
    with Queue(maxsize=2) as q:
        check_room_before_memory(multiprocessing.get_context(method), q, produce_and_report, 8,
                                 lambda: shm_named(q._prefix), lambda item: int(item[0]))
    assert shm_named(q._prefix) == []


def test_a_put_that_gives_up_on_a_full_queue_made_no_memory():
    ctx = multiprocessing.get_context("spawn")
    with Queue(maxsize=1) as q:
        q.put(np.zeros(1 << 17))
        before = shm_named(q._prefix)
        with ctx.Pool(1) as pool:
            assert pool.apply(_put_with_timeout, (q,)) == "Full"
        assert shm_named(q._prefix) == before
        assert q.qsize() == 1


def _put_with_timeout(q):
    try:
        q.put(np.ones(1 << 17), timeout=0.3)
        return "put"
    except queue.Full:
        return "Full"
    finally:
        q.close()


# ------------------------------------------------------------------ item 4
def test_an_unrelated_process_puts_through_a_pickle_file(tmp_path):
    """Its resource tracker deleted its three puts at its exit ("3 leaked
    shared_memory objects"); the owner's get then blamed the living owner."""
    path = tmp_path / "queue.pkl"
    with Queue() as q:
        path.write_bytes(pickle.dumps(q))
        proc = run_script("queue_from_file.py", str(path), "put", "3", timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "leaked" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        got = [q.get(timeout=30) for _ in range(3)]
        assert [int(a[0]) for a in got] == [0, 1, 2]
        assert all(a.nbytes == 2 << 20 and (a == a[0]).all() for a in got)
        del got
    assert shm_named(q._prefix) == []


@pytest.mark.parametrize("variant", ["numpy", "torch"])
def test_an_unrelated_process_gets_what_an_owner_put(tmp_path, variant):
    """The reverse: the owner's normal exit printed "leaked shared_memory" and
    "No such file or directory" for the items another family took."""
    if variant == "torch":
        pytest.importorskip("torch")
    path = tmp_path / "queue.pkl"
    owner = subprocess.Popen([sys.executable, str(SCRIPTS / "queue_owner.py"), str(path), "3",
                              *(["torch"] if variant == "torch" else [])],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=str(SCRIPTS))
    try:
        assert owner.stdout.readline().strip() == "ready"
        proc = run_script("queue_from_file.py", str(path), "get", "3", timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.strip().splitlines()[-1]) == [0, 1, 2]
        assert "leaked" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        out, err = owner.communicate("\n", timeout=120)
    finally:
        owner.kill()
        owner.wait(30)
    assert owner.returncode == 0, err
    assert out.split()[-1] == "0"  # it had nothing left
    for noise in ("leaked", "No such file", "Traceback"):
        assert noise not in err, err
    assert [f for f in os.listdir("/dev/shm") if f.startswith(f"ecq-{owner.pid:x}-")] == []
