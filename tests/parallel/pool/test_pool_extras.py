"""What ``Pool`` adds to the stdlib's: ``broadcast``, contexts and ``cfg`` per worker,
devices, and the stdlib's own options (``initializer``, ``maxtasksperchild``) kept."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest
from _pool_funcs import (
    PICKLED,
    CountedFunction,
    add,
    context_info,
    mutate_cfg,
    remember,
    remembered,
    square,
    unpickled_count,
    worker_pid,
)

from easycore.common.config import CfgNode
from easycore.common.parallel import Pool, WorkerContext, WorkerError

pytestmark = pytest.mark.timeout(120)


# --- broadcast ----------------------------------------------------------------
def test_broadcast_runs_once_on_every_worker_in_worker_order(no_leaks):
    with Pool(3) as pool:
        assert pool.broadcast(worker_pid) == pool.worker_pids
        assert pool.broadcast(add, 2, 3) == [5, 5, 5]
        contexts = pool.broadcast(context_info, "x", pass_context=True)
    assert [c["index"] for c in contexts] == [0, 1, 2]
    assert {c["x"] for c in contexts} == {"x"}


def test_broadcast_after_a_map_reaches_each_worker_once(no_leaks):
    with Pool(2) as pool:
        pool.map(square, range(1000))
        pids = pool.broadcast(worker_pid)
        assert sorted(pids) == sorted(pool.worker_pids) and len(set(pids)) == 2


# --- contexts -------------------------------------------------------------------
def test_pass_context_gives_each_worker_its_index_device_cfg_and_context(no_leaks):
    with Pool(2, cfg={"scale": 3}, worker_contexts=["left", "right"]) as pool:
        infos = pool.broadcast(context_info, pass_context=True)
        mapped = pool.map(context_info, range(20), 1, pass_context=True)
        applied = pool.apply(context_info, (7,), pass_context=True)
    assert [(i["index"], i["device"], i["context"], i["scale"]) for i in infos] == [
        (0, "cpu", "left", 3), (1, "cpu", "right", 3),
    ]
    assert [m["x"] for m in mapped] == list(range(20))
    assert all(m["context"] == ("left", "right")[m["index"]] for m in mapped)
    assert applied["x"] == 7 and applied["scale"] == 3


def test_the_context_is_a_workercontext(no_leaks):
    with Pool(1) as pool:
        ctx = pool.apply(_identity_ctx, pass_context=True)
    assert isinstance(ctx, WorkerContext)
    assert (ctx.index, ctx.device, ctx.context) == (0, "cpu", None)


def _identity_ctx(ctx):
    return ctx


def test_each_worker_has_its_own_copy_of_cfg(no_leaks):
    cfg = CfgNode({"seen": "caller"})
    with Pool(2, cfg=cfg) as pool:
        first = pool.broadcast(mutate_cfg, "worker", pass_context=True)
        second = pool.broadcast(mutate_cfg, "again", pass_context=True)
    assert first == ["caller", "caller"]  # each worker its own copy...
    assert second == ["worker", "worker"]  # ...that it keeps between calls
    assert cfg.seen == "caller"  # and the caller's is never touched


_CONFIG_LOADED = """
import json, sys
from easycore.common.parallel import Pool

def loaded(ctx=None):
    return "easycore.common.config" in sys.modules

def seen(ctx):
    ctx.cfg.calls = ctx.cfg.get("calls", 0) + 1
    return type(ctx.cfg).__name__, ctx.index, ctx.cfg.calls

if __name__ == "__main__":
    with Pool(2, start_method=sys.argv[1], backend=sys.argv[2]) as pool:
        report = {"workers_before": pool.broadcast(loaded),
                  "caller_before": loaded(),
                  "first": pool.broadcast(seen, pass_context=True),
                  "second": pool.broadcast(seen, pass_context=True)}
    print(json.dumps(report))
"""


@pytest.mark.parametrize("start_method, backend", [
    ("fork", "process"), ("spawn", "process"), ("forkserver", "process"), ("fork", "thread"),
])
def test_a_pool_without_cfg_gives_each_worker_an_empty_cfgnode_when_asked(
        tmp_path, start_method, backend):
    # Made when a function first asks for its context and kept between calls, as a
    # given cfg's copy is; the caller and the workers that never ask load no
    # easycore-config (a fresh interpreter: the suite itself has it loaded), which
    # saves a short script and each spawned worker ~1 ms.
    script = tmp_path / "no_cfg.py"
    script.write_text(_CONFIG_LOADED, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script), start_method, backend],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    assert sorted(report["first"]) == [["CfgNode", 0, 1], ["CfgNode", 1, 1]]
    assert sorted(report["second"]) == [["CfgNode", 0, 2], ["CfgNode", 1, 2]]
    if backend == "process":
        assert report["caller_before"] is False
    if backend == "process" and start_method != "forkserver":  # (its server preloads it)
        assert report["workers_before"] == [False, False]


def test_worker_contexts_must_have_one_entry_per_worker(no_leaks):
    with pytest.raises(ValueError, match="worker_contexts"):
        Pool(2, worker_contexts=["only one"])


# --- devices ----------------------------------------------------------------------
def test_one_worker_per_device(no_leaks):
    with Pool(devices=["cpu", "cpu:1"]) as pool:
        assert pool.devices == ["cpu", "cpu:1"]
        assert len(pool.worker_pids) == 2
        assert [i["device"] for i in pool.broadcast(context_info, pass_context=True)] == [
            "cpu", "cpu:1",
        ]


@pytest.mark.parametrize("kwargs, match", [
    ({"processes": 3, "devices": ["cpu", "cpu"]}, "devices"),
    ({"devices": ["cpu", ""]}, "device"),
    ({"devices": ["cpu", 3]}, "device"),
    ({"backend": "carrier-pigeon"}, "carrier-pigeon"),
    ({"queue_scale": 0}, "queue_scale"),
])
def test_bad_options_are_valueerrors_naming_what_is_wrong(kwargs, match, no_leaks):
    with pytest.raises(ValueError, match=match):
        Pool(**kwargs)


def test_processes_none_starts_one_worker_per_usable_cpu(no_leaks):
    from easycore.common.parallel._os import threads

    with Pool() as pool:
        assert len(pool.worker_pids) == threads.available_cpus()


# --- the stdlib's options -----------------------------------------------------------
def test_initializer_runs_in_every_worker_with_initargs(no_leaks):
    with Pool(2, initializer=remember, initargs=("hello",)) as pool:
        state = pool.broadcast(remembered)
        assert state == [("hello", pid) for pid in pool.worker_pids]


def test_an_initializer_that_raises_fails_the_pool_start_naming_it(no_leaks):
    with pytest.raises(WorkerError, match="ZeroDivisionError"):
        Pool(1, initializer=divmod, initargs=(1, 0))


@pytest.mark.parametrize("chunksize", [1, None])
def test_maxtasksperchild_replaces_each_worker_after_that_many_tasks(chunksize, no_leaks):
    with Pool(2, maxtasksperchild=3) as pool:
        first = set(pool.worker_pids)
        pids = pool.map(worker_pid, range(24), chunksize)
        counts = Counter(pids)
        assert max(counts.values()) <= 3  # no worker ran more than its share
        assert len(counts) >= 8
        assert not first <= set(pool.worker_pids)
        assert pool.map(square, range(10)) == [x * x for x in range(10)]


def test_maxtasksperchild_replacements_run_the_initializer(no_leaks):
    with Pool(1, maxtasksperchild=1, initializer=remember, initargs=("i",)) as pool:
        state = pool.map(remembered, range(4), 1)
    assert [s[0] for s in state] == ["i"] * 4
    assert len({s[1] for s in state}) == 4


# --- code travels once per job --------------------------------------------------------
def test_the_function_is_pickled_once_per_job_and_unpickled_once_per_worker(no_leaks):
    with Pool(2) as pool:
        PICKLED[0] = 0
        assert pool.map(CountedFunction(10), range(500), 1) == list(range(10, 510))
        assert PICKLED[0] == 1
        # A worker that started late may have had no item at all (0): never more than once.
        counts = pool.broadcast(unpickled_count)
        assert sorted(counts) in ([0, 1], [1, 1]), counts
