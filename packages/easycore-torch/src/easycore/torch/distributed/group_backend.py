"""A back-end whose workers form one ``torch.distributed`` process group.

`GroupBackend`
wraps one of easycore-parallel's back-ends (local processes, or Ray actors)
whose workers run a `RankProgram` (`rank_worker`); rank ``r`` is worker
``r``, on ``devices[r]``. Only ``start`` differs from the inner back-end's:

1. the inner back-end starts the workers (device set-up only);
2. rank 0 opens the rendezvous store on a free port. Not the caller: a
   store's server threads and sockets in the caller would be inherited, half
   copied, by every process the caller forks while the group lives (another
   group's ranks, a pool's workers), and its ranks could then fail to connect;
3. every rank joins the group, all within ``timeout`` seconds;
4. for a runner, every rank runs ``producer_init`` (without a time limit, as
   in any runner).

Steps 2 to 4 are jobs of an [`Engine`][easycore.common.parallel.engine.core.Engine]
over the inner back-end, one item per rank (`steps`): a rank that raises,
dies or hangs fails the start at once, named by rank, and every rank is
killed. Then ``start`` returns, and the engine of the runner (or of
``spawn``) drives the back-end like any other: ``send``, ``poll``, ``stop``
and ``abort`` are the inner back-end's; ``stop`` runs the end hooks (a
runner's ``producer_end``, then each rank leaves the group). A rank cannot be
replaced (the group would need forming again): ``restart`` refuses.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

from easycore.common.parallel import Backend, ParallelError, WorkerExited
from easycore.common.parallel.extending import Engine, ItemSlot

from .failures import name_rank
from .rank_worker import HostStore, Init, Join
from .rendezvous import LOOPBACK
from .steps import run_steps

__all__ = ["GroupBackend"]


class GroupBackend(Backend):
    """Runs the workers of an inner back-end as the ranks of one process group."""

    def __init__(
        self,
        inner: Backend,
        *,
        backend: str,
        timeout: Optional[float],
        host: Optional[str],
        local_ranks: bool,
        run_init: bool = False,
    ) -> None:
        """
        Args:
            inner (Backend): an unstarted back-end whose workers run a ``RankProgram``.
            backend (str): the ``torch.distributed`` backend, e.g. "gloo".
            timeout (float or None): seconds the start-up (and each collective) may take.
            host (str or None): the address rank 0's store listens on; None:
                ``127.0.0.1`` for local ranks, the node's address for Ray actors.
            local_ranks (bool): whether the ranks are processes of this machine
                (else Ray actors, which may be on other machines).
            run_init (bool): run the runner's ``producer_init`` on every rank
                once the group is formed.
        """
        self.devices = list(inner.devices)
        self.transport = inner.transport
        self.backend = backend
        self.timeout = timeout
        self._inner = inner
        # None for Ray actors: rank 0 asks Ray for its node's address.
        self._host = LOOPBACK if host is None and local_ranks else host
        self._run_init = run_init
        self._closed = False

    @property
    def world_size(self) -> int:
        """int: the number of ranks."""
        return len(self.devices)

    @property
    def inner(self) -> Backend:
        """Backend: the back-end running the ranks."""
        return self._inner

    # ----------------------------------------------------------------- start
    def start(self) -> None:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        n, ranks = self.world_size, list(range(self.world_size))
        try:
            # An engine of its own, done with when start returns; the engine
            # made over this back-end then counts jobs from 0 again. Workers
            # cache job functions by job id, so no job here or there sends a
            # function (None): the program builds the same one for every job,
            # and steps are items like any other.
            engine = Engine(self._inner, credits=1, fail_fast=True)
            engine.start()  # the workers, with their device set up
            host, ports = self._rendezvous(engine, deadline)
            joins = [Join(n, self.backend, host, ports[r], self.timeout) for r in ranks]
            run_steps(engine, joins, ranks, deadline, "joining the process group", self.timeout)
            if self._run_init:
                run_steps(engine, [Init()] * n, ranks, None, "producer_init")
        except ParallelError as err:
            self.abort()
            name_rank(err, n)
            raise
        except BaseException:
            self.abort()
            raise

    def _rendezvous(self, engine: Engine,
                    deadline: Optional[float]) -> Tuple[str, List[Optional[int]]]:
        """Rank 0 opens the store; ``(host, port of each rank)``, None for rank 0."""
        n = self.world_size
        ((host, port),) = run_steps(engine, [HostStore(self._host, self.timeout)], [0],
                                    deadline, "opening the rendezvous store", self.timeout)
        return host, [None] + [port] * (n - 1)

    # ---------------------------------------------------------- the engine's
    def send(self, worker: int, message: Any) -> None:
        self._inner.send(worker, message)

    def poll(self, timeout: Optional[float]) -> List[Tuple[int, Any]]:
        return self._inner.poll(timeout)

    def wakeup(self) -> None:
        self._inner.wakeup()

    def kill(self, worker: int) -> None:
        self._inner.kill(worker)

    def restart(self, worker: int) -> None:
        raise NotImplementedError(
            f"rank {worker} on device {self.devices[worker]!r} cannot be replaced: its "
            "process group would need forming again"
        )

    def death_error(self, worker: int, exited: WorkerExited,
                    items: Optional[List[int]] = None) -> BaseException:
        return self._inner.death_error(worker, exited, items)

    def item_slot(self, worker: int) -> Optional[ItemSlot]:
        return self._inner.item_slot(worker)

    def stacks(self, workers: Optional[Iterable[int]] = None,
               timeout: float = 1.0) -> Dict[int, Any]:
        return self._inner.stacks(workers, timeout)

    @property
    def pids(self) -> List[Optional[int]]:
        return self._inner.pids

    # ------------------------------------------------------------------ end
    def stop(self, timeout: Optional[float] = None) -> None:
        if self._closed:
            return
        try:
            self._inner.stop(timeout)  # producer_end everywhere, then each rank leaves
        except ParallelError as err:
            name_rank(err, self.world_size)
            raise
        finally:
            self._release()

    def abort(self) -> None:
        if self._closed:
            return
        try:
            self._inner.abort()
        finally:
            self._release()

    def _release(self) -> None:
        self._closed = True

    @property
    def closed(self) -> bool:
        """bool: whether the ranks are gone."""
        return self._closed
