"""machin's pool tests, mapped to easycore through ``docs/coming-from.md``.

The cases (names, inputs and expected results) are those of machin's
``test/parallel/test_pool.py`` (https://github.com/iffiX/machin), which is under
the MIT License:

    MIT License

    Copyright (c) 2020 Iffi

    Permission is hereby granted, free of charge, to any person obtaining a copy
    of this software and associated documentation files (the "Software"), to deal
    in the Software without restriction, including without limitation the rights
    to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
    copies of the Software, and to permit persons to whom the Software is
    furnished to do so, subject to the following conditions:

    The above copyright notice and this permission notice shall be included in all
    copies or substantial portions of the Software.

    THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND,
    EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF
    MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT.
    IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
    DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR
    OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE
    OR OTHER DEALINGS IN THE SOFTWARE.

The mapping (the "Coming from machin.parallel" table): ``Pool`` and ``P2PPool``
-> ``easycore.torch.parallel.Pool``; ``is_recursive=True`` -> nothing (lambdas
and local functions always work); ``is_copy_tensor=False, share_method="cpu"``
-> ``tensor_sharing="segments"``; ``CtxPool(worker_contexts=...)`` -> ``Pool(
worker_contexts=...)`` with ``pass_context=True`` on each call, the context
being ``ctx.context``; ``ThreadPool`` / ``CtxThreadPool`` -> ``backend="thread"``.
Two things the table does not list: ``pool.size()`` -> ``len(pool.devices)``,
and ``dill.dumps(pool)`` -> ``pickle.dumps(pool)`` (dill is not a dependency;
both reach ``Pool.__reduce__``). Process pools get ``cpu_threads=1``: one torch
thread a worker keeps them on the platform's fast default start method on
machines with many cores (plumbing: machin's pools run one thread too).
"""

from __future__ import annotations

import pickle

import pytest
import torch as t

from easycore.torch.parallel import Pool

pytestmark = pytest.mark.timeout(180)

WAIT = 60


def init_func(*_):
    print("Hello")


def func(x):
    return t.sum(x * 2)


def func2(x, y):
    return t.sum(x + y)


def ctx_func(ctx, x):
    # machin: ``return ctx, x`` with ctx the context itself
    return ctx.context, x


def ctx_func2(ctx, x, y):
    return ctx.context, x + y


def _machin_pool(**kwargs):
    """machin's ``Pool(...)`` / ``P2PPool(...)`` keyword arguments, mapped."""
    kwargs.pop("is_recursive", None)
    copy = kwargs.pop("is_copy_tensor", True)
    share = kwargs.pop("share_method", None)
    if not copy:
        kwargs["tensor_sharing"] = "torch" if share == "cuda" else "segments"
    elif "is_copy_tensor" in kwargs:
        kwargs["tensor_sharing"] = "copy"
    return Pool(cpu_threads=1, **kwargs)


def _ctx_pool(**kwargs):
    return Pool(cpu_threads=1, **kwargs)


def _thread_pool(**kwargs):
    return Pool(backend="thread", **kwargs)


@pytest.fixture(params=["Pool", "P2PPool"])
def make(request, no_leaks):
    return _machin_pool


def _close(pool):
    pool.close()
    pool.join()


# --- machin TestPool / TestP2PPool ---------------------------------------------
def test_apply(make):
    pool = make(processes=2)
    x = t.ones([10])
    assert pool.apply(func, (x,)) == 20
    _close(pool)


def test_apply_async(make):
    pool = make(processes=2)
    x = t.ones([10])
    assert pool.apply_async(func, (x,)).get(WAIT) == 20
    _close(pool)


def test_map(make):
    pool = make(processes=2)
    x = [t.ones([10]) * i for i in range(5)]
    assert [int(o) for o in pool.map(func, x)] == [0, 20, 40, 60, 80]
    _close(pool)


def test_map_async(make):
    pool = make(processes=2)
    x = [t.ones([10]) * i for i in range(5)]
    assert [int(o) for o in pool.map_async(func, x).get(WAIT)] == [0, 20, 40, 60, 80]
    _close(pool)


def test_imap(make):
    pool = make(processes=2)
    x = [t.ones([10]) * i for i in range(5)]
    assert [int(o) for o in pool.imap(func, x)] == [0, 20, 40, 60, 80]
    _close(pool)


def test_imap_unordered(make):
    pool = make(processes=2)
    x = [t.ones([10]) * i for i in range(5)]
    assert sorted(int(o) for o in pool.imap_unordered(func, x)) == [0, 20, 40, 60, 80]
    _close(pool)


def test_starmap(make):
    pool = make(processes=2)
    x = [(t.ones([10]) * i, t.ones([10]) * i) for i in range(5)]
    assert [int(o) for o in pool.starmap(func2, x)] == [0, 20, 40, 60, 80]
    _close(pool)


def test_starmap_async(make):
    pool = make(processes=2)
    x = [(t.ones([10]) * i, t.ones([10]) * i) for i in range(5)]
    assert [int(o) for o in pool.starmap_async(func2, x).get(WAIT)] == [0, 20, 40, 60, 80]
    _close(pool)


def test_cpu_shared_tensor(make):
    x = [t.ones([10]) * i for i in range(5)]
    for xx in x:
        xx.share_memory_()
    pool = make(processes=2, is_copy_tensor=False, share_method="cpu")
    assert [int(o) for o in pool.map(func, x)] == [0, 20, 40, 60, 80]
    _close(pool)


def test_lambda_and_local(make):
    x = [t.ones([10]) * i for i in range(5)]
    y = t.ones([10])
    x2 = [(t.ones([10]) * i, t.ones([10]) * i) for i in range(5)]

    def local_func(xx):
        return t.sum(xx + y)

    pool = make(processes=2, is_recursive=True)
    assert [int(o) for o in pool.map(local_func, x)] == [10, 20, 30, 40, 50]
    assert [int(o) for o in pool.map(lambda xx: t.sum(xx[0] + xx[1]), x2)] == [0, 20, 40, 60, 80]
    _close(pool)
    pool = make(processes=2)
    assert [int(o) for o in pool.map(func, x)] == [0, 20, 40, 60, 80]
    _close(pool)


def test_size(make):
    pool = make(processes=2)
    assert len(pool.devices) == 2
    _close(pool)


def test_reduce(make):
    pool = make(processes=2)
    try:
        with pytest.raises(NotImplementedError, match="cannot be passed"):
            pickle.dumps(pool)
    finally:
        _close(pool)


# --- machin TestCtxPool ------------------------------------------------------------
def test_ctx_init(no_leaks):
    with pytest.raises(ValueError, match="not equal to the number"):
        _ctx_pool(processes=2, worker_contexts=[0, 1, 2, 3])
    _close(_ctx_pool(processes=2, initializer=init_func, initargs=("some_args",)))
    _close(_ctx_pool(processes=2, worker_contexts=[0, 1]))


def test_ctx_map(no_leaks):
    pool = _ctx_pool(processes=2, worker_contexts=[0, 1])
    x = list(range(10))
    result = pool.map(ctx_func, x, pass_context=True)
    assert sorted(r[1] for r in result) == x
    assert {r[0] for r in result}.issubset({0, 1})
    _close(pool)


def test_ctx_starmap(no_leaks):
    pool = _ctx_pool(processes=2, worker_contexts=[0, 1])
    xy = [(i, i) for i in range(10)]
    result = pool.starmap(ctx_func2, xy, pass_context=True)
    assert sorted(r[1] for r in result) == [i * 2 for i in range(10)]
    assert {r[0] for r in result}.issubset({0, 1})
    _close(pool)


@pytest.mark.forks_with_threads  # the second pool starts while the first one's threads run
def test_multiple_ctx_map(no_leaks):
    pool = _ctx_pool(processes=2, worker_contexts=[0, 1])
    pool2 = _ctx_pool(processes=2, worker_contexts=[2, 3])
    x = list(range(50000))
    result = pool.map(ctx_func, x, pass_context=True)
    result2 = pool2.map(ctx_func, x, pass_context=True)
    assert sorted(r[1] for r in result) == x
    assert {r[0] for r in result}.issubset({0, 1})
    assert sorted(r[1] for r in result2) == x
    assert {r[0] for r in result2}.issubset({2, 3})
    _close(pool)
    _close(pool2)


# --- machin TestThreadPool / TestCtxThreadPool ---------------------------------------
def test_thread_size(no_leaks):
    pool = _thread_pool(processes=2)
    assert len(pool.devices) == 2
    _close(pool)


def test_thread_reduce(no_leaks):
    pool = _thread_pool(processes=2)
    try:
        with pytest.raises(NotImplementedError, match="cannot be passed"):
            pickle.dumps(pool)
    finally:
        _close(pool)


def test_ctx_thread_init(no_leaks):
    with pytest.raises(ValueError, match="not equal to the number"):
        _thread_pool(processes=2, worker_contexts=[0, 1, 2, 3])
    _close(_thread_pool(processes=2, initializer=init_func, initargs=("some_args",)))
    _close(_thread_pool(processes=2, worker_contexts=[0, 1]))


def test_ctx_thread_apply(no_leaks):
    pool = _thread_pool(processes=2)
    assert pool.apply(ctx_func, (1,), pass_context=True)[1] == 1
    assert pool.apply_async(ctx_func, (1,), pass_context=True).get(WAIT)[1] == 1
    _close(pool)


@pytest.mark.parametrize("call", ["map", "map_async", "imap", "imap_unordered"])
def test_ctx_thread_maps(no_leaks, call):
    pool = _thread_pool(processes=2, worker_contexts=[0, 1])
    x = list(range(10))
    result = getattr(pool, call)(ctx_func, x, pass_context=True)
    result = result.get(WAIT) if call == "map_async" else list(result)
    assert sorted(r[1] for r in result) == x
    assert {r[0] for r in result}.issubset({0, 1})
    _close(pool)


@pytest.mark.parametrize("call", ["starmap", "starmap_async"])
def test_ctx_thread_starmaps(no_leaks, call):
    pool = _thread_pool(processes=2, worker_contexts=[0, 1])
    xy = [(i, i) for i in range(10)]
    result = getattr(pool, call)(ctx_func2, xy, pass_context=True)
    result = result.get(WAIT) if call == "starmap_async" else result
    assert sorted(r[1] for r in result) == [i * 2 for i in range(10)]
    assert {r[0] for r in result}.issubset({0, 1})
    _close(pool)


def test_ctx_thread_multiple_map(no_leaks):
    pool = _thread_pool(processes=2, worker_contexts=[0, 1])
    pool2 = _thread_pool(processes=2, worker_contexts=[2, 3])
    x = list(range(50000))
    result = pool.map(ctx_func, x, pass_context=True)
    result2 = pool2.map(ctx_func, x, pass_context=True)
    assert sorted(r[1] for r in result) == x
    assert {r[0] for r in result}.issubset({0, 1})
    assert sorted(r[1] for r in result2) == x
    assert {r[0] for r in result2}.issubset({2, 3})
    _close(pool)
    _close(pool2)
