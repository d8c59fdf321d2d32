"""easycore-parallel's own classes move tensors through shared memory once torch
is imported (issue 24, item 2): ``Pool``, the runners, ``BackgroundTask`` and
``JobQueue`` of ``easycore.common.parallel``, not only easycore-torch's.

Where a tensor lives says how it travelled: one rebuilt from a segment views a
``/dev/shm`` mapping named with the transport's prefix (``/proc/self/maps``);
one pickled in-band lives in anonymous heap memory. A transport the user chose
is kept, and a process that never imported torch does not import it.

Workers run torch on one thread (``cpu_threads=1``): a forked child whose
parent already ran OpenMP must not start OpenMP threads of its own (the
torch classes pick ``spawn`` for that; the generic ones leave it to the user).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from processes import mapping_of

from easycore.common.parallel import (
    BackgroundTask,
    DevicePolicy,
    JobQueue,
    OrderedRunner,
    Pool,
    SharedMemoryTransport,
)
from easycore.torch.parallel import TensorTransport

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps"),
]

N = 1 << 20  # float32: 4 MiB, far above the in-band threshold


def where_is(t):
    """In a worker: the mapping that holds the input tensor."""
    return mapping_of(t.data_ptr())


def make(x):
    return torch.full((N,), float(x))


def _transport(engine_owner):
    return engine_owner._engine.backend.transport


class Echo(OrderedRunner):
    """Item (i, tensor): returns where the tensor arrived, and a fresh tensor."""

    @staticmethod
    def producer_work(device, cfg, data):
        i, t = data
        return i, mapping_of(t.data_ptr()), torch.full((N,), float(i))

    @staticmethod
    def consumer_init(cfg):
        cfg.out = []

    @staticmethod
    def consumer_work(cfg, data):
        i, where, t = data
        cfg.out.append((i, where, mapping_of(t.data_ptr()), bool((t == i).all())))

    @staticmethod
    def consumer_end(cfg):
        return cfg.out


class PlainEcho(Echo):
    """A runner that names its transport: the user's choice wins."""

    transport_class = SharedMemoryTransport


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_the_generic_pool_moves_tensors_through_shared_memory(no_leaks, method):
    with Pool(1, start_method=method, cpu_threads=1) as pool:
        assert type(_transport(pool)) is TensorTransport
        prefix = "/dev/shm/" + _transport(pool).prefix
        assert pool.apply(where_is, (make(3),)).startswith(prefix)  # input, in the worker
        out = pool.apply(make, (5,))
        assert bool((out == 5).all())
        assert mapping_of(out.data_ptr()).startswith(prefix)  # result, in the caller


def test_the_generic_runner_moves_tensors_through_shared_memory(no_leaks):
    with Echo(1, cpu_threads=1) as runner:
        prefix = "/dev/shm/" + _transport(runner).prefix
        out = runner((i, make(i)) for i in range(3))
        assert type(_transport(runner)) is TensorTransport
    assert [o[0] for o in out] == [0, 1, 2]
    for _, where_in, where_out, intact in out:
        assert intact
        assert where_in.startswith(prefix) and where_out.startswith(prefix), out


def test_background_task_and_job_queue_results_come_through_shared_memory(no_leaks):
    with BackgroundTask(make, (7,), cpu_threads=1) as task:
        prefix = "/dev/shm/" + _transport(task._pool).prefix
        t = task.get(timeout=60)
        assert bool((t == 7).all()) and mapping_of(t.data_ptr()).startswith(prefix)
        del t
    with JobQueue(1, cpu_threads=1) as jobs:
        jobs.put(make, 2)
        t = jobs.get(timeout=60)
        assert type(_transport(jobs._pool)) is TensorTransport
        assert bool((t == 2).all())
        del t


def test_an_explicit_transport_is_kept(no_leaks):
    class Plain(Pool):
        device_policy = DevicePolicy(SharedMemoryTransport)

    with Plain(1, cpu_threads=1) as pool:
        assert type(_transport(pool)) is SharedMemoryTransport
        out = pool.apply(make, (1,))
        assert not mapping_of(out.data_ptr()).startswith("/dev/shm/")  # pickled in-band
    with PlainEcho(1, cpu_threads=1) as runner:
        out = runner([(0, make(0))])
        assert type(_transport(runner)) is SharedMemoryTransport
    assert not out[0][2].startswith("/dev/shm/")


def test_a_process_without_torch_does_not_import_it():
    code = textwrap.dedent("""
        import sys
        from easycore.common.parallel import (
            BackgroundTask, OrderedRunner, Pool, SharedMemoryTransport)

        class Twice(OrderedRunner):
            @staticmethod
            def producer_work(device, cfg, data):
                return 2 * data

            @staticmethod
            def consumer_init(cfg):
                cfg.out = []

            @staticmethod
            def consumer_work(cfg, data):
                cfg.out.append(data)

            @staticmethod
            def consumer_end(cfg):
                return cfg.out

        with Pool(1) as pool:
            assert pool.apply(abs, (-3,)) == 3
            assert type(pool._engine.backend.transport) is SharedMemoryTransport
        with Twice(1) as runner:
            assert list(runner([1, 2])) == [2, 4]
            assert type(runner._engine.backend.transport) is SharedMemoryTransport
        with BackgroundTask(abs, (-1,)) as task:
            assert task.get(timeout=60) == 1
        assert "torch" not in sys.modules, "torch was imported"
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=150, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
