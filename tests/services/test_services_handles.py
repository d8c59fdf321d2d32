"""Service.start, ServiceHandle and lookup on the process back-end: calls,
ordering, pickled handles in pools, runners and forked children, names."""

from __future__ import annotations

import copy
import multiprocessing
import os
import pickle
import stat
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from _services_support import Tool, call_in_pool

from easycore.common.parallel import UnorderedRunner
from easycore.common.parallel.services import (
    Service,
    ServiceClosedError,
    ServiceNotFoundError,
    VersionedStore,
    lookup,
)

METHODS = [
    m for m in ("fork", "forkserver", "spawn") if m in multiprocessing.get_all_start_methods()
]


def test_the_documented_example(no_leaks):
    with Service.start(VersionedStore, depth=2) as store:
        assert store.call("push", "w", [1, 2], version=1, prev_version=None)
        assert store.call("pull", "w") == ([1, 2], 1)
        assert store.is_owner and store.backend == "process" and store.device == "cpu"
    assert store.closed


@pytest.mark.parametrize("method", METHODS)
def test_start_methods(no_leaks, method):
    with Service.start(Tool, "t", backend_options={"start_method": method}) as h:
        assert h.call("echo", 1, k=2) == ((1,), {"k": 2})
        assert h.call("pid") == h.pid != os.getpid()


def test_a_lambda_factory_works_under_spawn(no_leaks):
    offset = 10
    with Service.start(lambda: Tool(tag=offset), backend_options={"start_method": "spawn"}) as h:
        assert h.call("record", 1) == 1


def test_calls_from_one_handle_run_in_order(no_leaks):
    with Service.start(Tool) as h:
        futures = [h.call_async("record", i) for i in range(200)]
        assert [f.result(timeout=30) for f in futures] == list(range(1, 201))
        assert h.call("history") == list(range(200))


def test_threads_share_a_handle(no_leaks):
    with Service.start(Tool) as h:
        def work(base):
            for i in range(50):
                h.call("record", base + i)

        threads = [threading.Thread(target=work, args=(1000 * t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        history = h.call("history")
        assert sorted(history) == sorted(1000 * t + i for t in range(4) for i in range(50))
        for t in range(4):  # each thread's calls in its order
            mine = [x for x in history if x // 1000 == t]
            assert mine == sorted(mine)


def test_timeout_leaves_the_handle_usable(no_leaks, tmp_path):
    gate = str(tmp_path / "gate")
    with Service.start(Tool) as h:
        with pytest.raises(TimeoutError, match="wait_for"):
            h.call("wait_for", gate, timeout=0.2)
        future = h.call_async("echo", "after", timeout=0.2)
        with pytest.raises(TimeoutError):
            future.result(timeout=30)  # still queued behind wait_for
        open(gate, "w").close()
        assert h.call("echo", "later") == (("later",), {})  # late replies were dropped


def test_large_arrays_both_ways(no_leaks):
    with Service.start(Tool) as h:
        no_leaks.track(h.pid)
        for _ in range(3):  # segments are recycled, not leaked
            data = np.random.rand(1 << 19)
            (back,), _ = h.call("echo", data)
            assert np.array_equal(back, data)
            del back


def test_pickled_handles_are_clients(no_leaks):
    with Service.start(Tool) as owner:
        clone = pickle.loads(pickle.dumps(owner))
        deep = copy.deepcopy(owner)
        assert not clone.is_owner and not deep.is_owner
        assert clone.call("record", "x") == 1 and deep.call("record", "y") == 2
        clone.close()
        deep.close()
        assert owner.call("history") == ["x", "y"]  # closing a client stops nothing
        with pytest.raises(ServiceClosedError, match="closed"):
            clone.call("history")


@pytest.mark.parametrize("method", METHODS)
def test_handles_in_pool_tasks(no_leaks, method):
    with Service.start(Tool) as h:
        with multiprocessing.get_context(method).Pool(2) as pool:
            out = pool.map(call_in_pool, [(h, i) for i in range(20)])
            no_leaks.track(*(pid for pid, _ in out))
            pool.close()
            pool.join()
        assert sorted(n for _, n in out) == list(range(1, 21))
        assert sorted(h.call("history")) == list(range(20))


@pytest.mark.forks_with_threads  # forks while the handle's reader thread runs
def test_a_global_handle_inherited_by_fork(no_leaks):
    """A forked child opens its own connection; the parent's keeps working."""
    with Service.start(Tool) as h:
        h.call("record", "parent")
        ctx = multiprocessing.get_context("fork")
        child = ctx.Process(target=_record_and_exit, args=(h,))
        global _INHERITED
        _INHERITED = h
        try:
            child.start()
            child.join(60)
        finally:
            _INHERITED = None
        assert child.exitcode == 0
        assert h.call("history") == ["parent", "child"]


_INHERITED = None


def _record_and_exit(_):
    _INHERITED.call("record", "child")  # the fork-inherited object, not a pickled copy


class _UseService(UnorderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return cfg.store.call("push", data, data * 10, 1, None)

    @staticmethod
    def consumer_init(cfg):
        cfg.out = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.out.append(data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.out


def test_a_handle_in_a_runners_cfg(no_leaks):
    with Service.start(VersionedStore) as store:
        with _UseService(devices=2, cfg={"store": store}) as runner:
            assert runner(range(10)) == [True] * 10
        assert sorted(store.call("keys")) == list(range(10))
        assert store.call("pull", 3) == (30, 1)


def test_lookup_by_name(no_leaks):
    with Service.start(Tool, name="tools") as owner:
        assert owner.name == "tools"
        found = lookup("tools")
        assert not found.is_owner and found.pid == owner.pid
        assert found.call("record", 1) == 1
        found.close()
        with pytest.raises(ValueError, match="already running"):
            Service.start(Tool, name="tools")
        with pytest.raises(ServiceNotFoundError, match="'tools'"):
            lookup("tools", namespace="elsewhere", timeout=0)
    with pytest.raises(ServiceNotFoundError):  # gone once closed
        lookup("tools", timeout=0)


def test_namespaces_keep_names_apart(no_leaks):
    with Service.start(Tool, "a", name="x", namespace="one") as a, \
            Service.start(Tool, "b", name="x", namespace="two") as b:
        assert lookup("x", namespace="one").call("pid") == a.pid
        assert lookup("x", namespace="two").call("pid") == b.pid


def test_lookup_from_another_process(no_leaks, services_dir):
    script = textwrap.dedent("""
        from easycore.common.parallel.services import lookup
        with lookup("shared", timeout=30) as h:
            print(h.call("record", "from a stranger"))
    """)
    with Service.start(Tool, name="shared") as h:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "1"
        assert h.call("history") == ["from a stranger"]


def test_the_socket_is_private(no_leaks, services_dir):
    with Service.start(Tool) as h:
        st = os.stat(services_dir)
        assert stat.S_IMODE(st.st_mode) == 0o700
        address = h._state.target.address
        assert os.path.dirname(address) == services_dir
        assert stat.S_IMODE(os.stat(address).st_mode) & 0o077 == 0


def test_a_wrong_key_is_refused(no_leaks):
    from dataclasses import replace

    from easycore.common.parallel import ParallelError
    from easycore.common.parallel.services.handle import ServiceHandle

    with Service.start(Tool) as h:
        target = replace(h._state.target, authkey=os.urandom(32))
        with ServiceHandle("process", target, h._state.transport_class) as forged, \
                pytest.raises(ParallelError, match="wrong auth key"):
            forged.call("pid")
        assert h.call("echo", 1) == ((1,), {})


def test_an_open_services_dir_is_refused(services_dir):
    os.chmod(services_dir, 0o755)
    with pytest.raises(PermissionError, match="open to other users"):
        Service.start(Tool)


def test_close_calls_the_objects_close(no_leaks, tmp_path):
    marker = tmp_path / "closed"
    h = Service.start(Tool, "bye", str(marker))
    h.close()
    h.close()  # idempotent
    assert marker.read_text() == "bye"
