"""Functions the ranks run: importable by spawned processes and Ray actors too."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import torch
import torch.distributed as dist
from network import Net  # examples/network.py, the tutorial's model

from easycore.torch.distributed import DistributedRunner, irecv_any, recv_any


def listening_addresses(pid: int) -> list:
    """Addresses the process ``pid`` listens on (TCP)."""
    return sorted(
        c.laddr.ip for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    )


def collectives(ctx, scale):
    """all_reduce, broadcast, all_gather, and who listens where, on every rank."""
    total = torch.tensor([float(ctx.rank + 1)])
    dist.all_reduce(total, group=ctx.group)
    shared = torch.tensor([scale if ctx.rank == 0 else -1.0])
    dist.broadcast(shared, src=0, group=ctx.group)
    gathered = [torch.zeros(2) for _ in range(ctx.world_size)]
    dist.all_gather(gathered, torch.tensor([ctx.rank, ctx.rank * scale]), group=ctx.group)
    dist.barrier(group=ctx.group)  # every rank listens before anyone looks
    listening = listening_addresses(os.getpid())  # rank 0's include the store's
    dist.barrier(group=ctx.group)
    received = any_source(ctx)
    return {
        "rank": ctx.rank, "world_size": ctx.world_size, "device": ctx.device,
        "backend": ctx.backend, "pid": os.getpid(), "total": total.item(),
        "shared": shared.item(), "gathered": torch.stack(gathered), "listening": listening,
        "received": received,
    }


def any_source(ctx):
    """Rank 0 receives from every other rank in whatever order they send, then
    once more, asynchronously, with a tag only the last rank uses."""
    last = ctx.world_size - 1
    if ctx.rank == 0:
        got = []
        for _ in range(last):
            buf = torch.zeros(1)
            got.append((recv_any(buf, group=ctx.group), buf.item()))
        buf = torch.zeros(1)
        request = irecv_any(buf, group=ctx.group, tag=7)
        return sorted(got), (request.wait(), buf.item())
    dist.send(torch.tensor([10.0 * ctx.rank]), dst=0, group=ctx.group)
    if ctx.rank == last:
        dist.send(torch.tensor([-1.0]), dst=0, group=ctx.group, tag=7)
    return None


def note_pid(folder) -> None:
    Path(folder, f"rank-{os.getpid()}.pid").write_text(str(os.getpid()))


def raise_on_rank_1(ctx, folder):
    note_pid(folder)
    dist.barrier(group=ctx.group)
    if ctx.rank == 1:
        raise ValueError("rank 1 gives up")
    dist.all_reduce(torch.ones(1), group=ctx.group)  # the others wait here for rank 1
    return ctx.rank


def exit_on_rank_2(ctx, folder):
    note_pid(folder)
    dist.barrier(group=ctx.group)
    if ctx.rank == 2:
        os._exit(7)
    dist.all_reduce(torch.ones(1), group=ctx.group)
    return ctx.rank


def hang_on_rank_1(ctx, folder):
    note_pid(folder)
    dist.barrier(group=ctx.group)
    if ctx.rank == 1:
        time.sleep(3600)  # stuck; the caller's timeout must end it
    dist.all_reduce(torch.ones(1), group=ctx.group)
    return ctx.rank


def rank_and_sum(ctx, value):
    t = torch.tensor([float(value)])
    dist.all_reduce(t, group=ctx.group)
    return ctx.rank, t.item()


# ---------------------------------------------------------------- runners
class TutorialPredictor(DistributedRunner):
    """The tutorial's batch predictor, with rank 0's weights broadcast to every rank
    and the number of batches each rank did summed in producer_end."""

    @staticmethod
    def producer_init(device, cfg):
        torch.manual_seed(cfg.dist.rank)  # different weights on every rank...
        cfg.model = Net().to(device)
        for p in cfg.model.parameters():  # ...until rank 0's reach everyone
            dist.broadcast(p.data, src=0, group=cfg.dist.group)
        cfg.batches = 0

    @staticmethod
    def producer_work(device, cfg, data):
        cfg.batches += 1
        with torch.no_grad():
            data = torch.Tensor(data).view(-1, 1).to(device)
            return cfg.model(data).cpu()

    @staticmethod
    def producer_end(device, cfg):
        done = torch.tensor([cfg.batches])
        dist.all_reduce(done, group=cfg.dist.group)
        Path(cfg.out_dir, f"rank-{cfg.dist.rank}.txt").write_text(
            f"{cfg.dist.rank} {cfg.dist.world_size} {cfg.dist.device} {done.item()}"
        )
        del cfg.model

    @staticmethod
    def consumer_init(cfg):
        cfg.data_list = []

    @staticmethod
    def consumer_work(cfg, data):
        cfg.data_list.append(data)

    @staticmethod
    def consumer_end(cfg):
        return torch.cat(cfg.data_list, dim=0)


class FailingInit(DistributedRunner):
    @staticmethod
    def producer_init(device, cfg):
        if cfg.dist.rank == 1:
            raise RuntimeError("no model for rank 1")
        dist.barrier(group=cfg.dist.group)  # the others wait for rank 1


class DyingWork(DistributedRunner):
    @staticmethod
    def producer_work(device, cfg, data):
        if data == 3:
            os._exit(5)
        return data


def batch_generator(data_list, batch_size):
    for i in range(0, len(data_list), batch_size):
        yield data_list[i : i + batch_size]


def reference_outputs(inputs: torch.Tensor, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    with torch.no_grad():
        return Net()(inputs)


class DyingInit(DistributedRunner):
    @staticmethod
    def producer_init(device, cfg):
        if cfg.dist.rank == 1:
            os._exit(3)
        dist.barrier(group=cfg.dist.group)  # the others wait for rank 1: its death ends them
