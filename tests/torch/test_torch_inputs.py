"""CPU tensors in inputs and ``cfg`` reach torch workers through shared memory (issue 10).

A worker looks its tensors up in ``/proc/self/maps``: a large input or
``cfg`` tensor lives inside a mapping of a ``/dev/shm`` segment named with the
runner's transport prefix, so nothing copied it on the way in. Tensors that
cannot be mapped (sparse views, Python attributes) and plain objects still
arrive intact; a ``cfg`` tensor one worker writes is not seen by another.
"""

from __future__ import annotations

import sys

import pytest
import torch
from processes import mapping_of

from easycore.torch.parallel import OrderedRunner, UnorderedRunner

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps"),
]

N = 1 << 21  # float32: 8 MiB


def _prefix(runner) -> str:
    return "/dev/shm/" + runner._engine.backend.transport.prefix


class Locates(OrderedRunner):
    """Item (i, tensor): says where the input and ``cfg.big`` live in the worker."""

    @staticmethod
    def producer_work(device, cfg, data):
        i, t = data
        return {
            "i": i,
            "intact": t.shape == (N,) and bool((t == i).all()),
            "input": mapping_of(t.data_ptr()),
            "cfg": mapping_of(cfg.big.data_ptr()),
            "cfg_intact": bool((cfg.big == 7).all()),
        }

    @staticmethod
    def consumer_init(cfg):
        cfg.out = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.out.append(data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.out


def test_large_input_and_cfg_tensors_are_read_from_shared_memory(no_leaks):
    with Locates(2, cfg={"big": torch.full((N,), 7.0)}) as runner:
        prefix = _prefix(runner)
        seen = set()
        for _ in range(3):
            out = runner((i, torch.full((N,), float(i))) for i in range(10))
            assert [r["i"] for r in out] == list(range(10))
            for r in out:
                assert r["intact"] and r["cfg_intact"]
                assert r["input"].startswith(prefix), r  # no copy in the worker
                assert r["cfg"].startswith(prefix), r
                seen.add(r["input"])
        assert len(seen) <= 2 * 8, sorted(seen)  # recycled segments


class MarksCfg(UnorderedRunner):
    """Each worker writes its pid into every element of ``cfg.big``."""

    @staticmethod
    def producer_init(device, cfg):
        import os

        cfg.big.fill_(os.getpid())

    @staticmethod
    def producer_work(device, cfg, data):
        import os

        return os.getpid(), torch.unique(cfg.big).tolist()

    @staticmethod
    def consumer_init(cfg):
        cfg.seen = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.seen.append(data)

    @staticmethod
    def consumer_end(cfg):
        return dict(cfg.seen)


def test_a_cfg_tensor_written_by_one_worker_is_not_seen_by_another(no_leaks):
    big = torch.zeros(N, dtype=torch.float64)  # float64 holds a pid exactly
    with MarksCfg(2, cfg={"big": big}) as runner:
        seen: dict = {}
        for _ in range(50):  # which worker runs which item is not ours to say
            seen.update(runner(range(8)))
            if len(seen) == 2:
                break
        assert sorted(seen) == sorted(runner.worker_pids)
        for pid, values in seen.items():
            assert values == [float(pid)]
        assert not runner._cfg.big.any()
    assert not big.any()


class Echo(OrderedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        return data, cfg.extra

    @staticmethod
    def consumer_init(cfg):
        cfg.out = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.out.append(data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.out


def _awkward() -> dict:
    base = torch.arange(2 * N, dtype=torch.float32)
    with_attr = torch.ones(N // 4)
    with_attr.note = "kept"  # a Python attribute: torch's own pickling, in-band
    return {
        "transposed": base.view(1024, -1).t(),  # strides kept
        "sparse_view": base[::100],  # compacted on the way
        "bfloat16": torch.ones(N, dtype=torch.bfloat16),
        "bool": torch.ones(N, dtype=torch.bool),
        "grad": torch.ones(N // 2, requires_grad=True),
        "with_attr": with_attr,
        "empty": torch.empty(0, 3),
        "bytes": bytes(range(256)) * (N // 64),
        "plain": {"list": list(range(100)), "text": "x"},
    }


def _assert_same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
            assert torch.equal(got[key].detach(), value.detach()), key
        else:
            assert got[key] == value, key
    assert got["transposed"].stride() == want["transposed"].stride()
    assert got["grad"].requires_grad
    assert got["with_attr"].note == "kept"


def test_tensors_shared_memory_cannot_map_still_travel(no_leaks):
    want = _awkward()
    with Echo(2, cfg={"extra": _awkward()}) as runner:
        out = runner([_awkward() for _ in range(3)])
    assert len(out) == 3
    for got, got_cfg in out:
        _assert_same(got, want)
        _assert_same(got_cfg, want)
