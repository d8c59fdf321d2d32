"""NCCL process groups on the GPUs of this machine (run with ``-m cuda``)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from _dist_support import gpu_count

from easycore.torch.distributed import DistributedRunner, recv_any, spawn

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.timeout(300),
    pytest.mark.skipif(gpu_count() == 0, reason="needs a CUDA GPU"),
]


def nccl_all_reduce(ctx):
    t = torch.full((4,), float(ctx.rank + 1), device="cuda")  # "cuda" is this rank's GPU
    dist.all_reduce(t, group=ctx.group)
    return ctx.device, torch.cuda.current_device(), t.cpu()


def nccl_cannot_receive_any(ctx):
    try:
        recv_any(torch.zeros(1, device=ctx.device), group=ctx.group)
    except ValueError as exc:
        return str(exc)
    return None


def mixed_any_source(ctx):
    """CPU tensors through gloo, CUDA tensors through NCCL, in one group."""
    t = torch.ones(2, device=ctx.device)
    dist.all_reduce(t, group=ctx.group)
    if ctx.rank == 0:
        buf = torch.zeros(1)
        return recv_any(buf, group=ctx.group), buf.item(), t.cpu()
    dist.send(torch.tensor([float(ctx.rank)]), dst=0, group=ctx.group)
    return ctx.rank, None, t.cpu()


def test_nccl_all_reduce_on_every_gpu(no_leaks):
    n = gpu_count()
    results = spawn(nccl_all_reduce, n, backend="nccl")
    expected = torch.full((4,), n * (n + 1) / 2)
    for rank, (device, current, tensor) in enumerate(results):
        assert device == f"cuda:{rank}" and current == rank
        assert torch.equal(tensor, expected)


def test_recv_any_refuses_nccl_with_a_clear_error(no_leaks):
    (message,) = spawn(nccl_cannot_receive_any, 1, backend="nccl")
    assert message is not None and "NCCL cannot receive from any source" in message


@pytest.mark.skipif(gpu_count() < 2, reason="needs two GPUs")
def test_recv_any_on_a_cpu_gloo_cuda_nccl_group(no_leaks):
    results = spawn(mixed_any_source, 2, backend="cpu:gloo,cuda:nccl")
    assert results[0][:2] == (1, 1.0)
    assert torch.equal(results[0][2], torch.full((2,), 2.0))


class GpuRanks(DistributedRunner):
    @staticmethod
    def producer_init(device, cfg):
        t = torch.ones(1, device=device)
        dist.all_reduce(t, group=cfg.dist.group)
        cfg.world = t.item()

    @staticmethod
    def producer_work(device, cfg, data):
        return (cfg.dist.rank, cfg.dist.backend, cfg.world, data)

    @staticmethod
    def consumer_init(cfg):
        cfg.out = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.out.append(data)

    @staticmethod
    def consumer_end(cfg):
        return cfg.out


def test_distributed_runner_on_gpus(no_leaks):
    n = gpu_count()
    with GpuRanks(devices=[f"cuda:{i}" for i in range(n)]) as runner:
        assert runner.dist_backend == "nccl"
        out = runner(range(8))
    assert [d for *_, d in out] == list(range(8))
    assert {(backend, world) for _, backend, world, _ in out} == {("nccl", float(n))}
