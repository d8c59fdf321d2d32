"""Process groups on ``torch.distributed``, started on easycore's workers.

* [`spawn`][easycore.torch.distributed.spawn]`(fn, world_size, *args)` runs
  ``fn(ctx, *args)`` on every rank of a fresh process group (gloo on CPUs,
  NCCL on GPUs) and returns the results in rank order; ranks are local
  processes or Ray actors;
* [`DistributedRunner`][easycore.torch.distributed.DistributedRunner] is an
  ordered runner whose producers form one group (``cfg.dist`` in the hooks);
* [`recv_any`][easycore.torch.distributed.recv_any] /
  [`irecv_any`][easycore.torch.distributed.irecv_any] receive from whichever
  rank sends first and say who it was.

The collectives are ``torch.distributed``'s own, used with ``ctx.group``.
Start-up never binds a fixed port (a store on port 0 of ``127.0.0.1``) and
never hangs: a rank that raises, dies or gets stuck ends the call at once,
naming the rank, and no process outlives it.

Modules, one job each:

* `launch`: ``spawn``; `runner`: the runner;
* `group_backend`: a back-end whose workers form the group, wrapping
  easycore-parallel's process or Ray back-end;
* `steps`: one step on each rank through the engine (fail fast, root
  cause, timeouts); `rank_worker`: what a rank does (join, run, leave);
* `rendezvous`: the store on a free port, loopback by default;
* `failures`: which rank's error to report;
* `p2p`: any-source receives; `context`: ``DistContext``.
"""

from easycore.common.parallel import WorkerDiedError, WorkerError

from .context import DistContext
from .launch import spawn
from .p2p import AnySourceRequest, irecv_any, recv_any
from .runner import DistributedRunner

__all__ = [
    "AnySourceRequest",
    "DistContext",
    "DistributedRunner",
    "WorkerDiedError",
    "WorkerError",
    "irecv_any",
    "recv_any",
    "spawn",
]
