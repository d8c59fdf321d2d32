"""A back-end whose workers form one ``torch.distributed`` process group.

`GroupBackend` wraps one of easycore-parallel's back-ends (local
processes, or Ray actors) whose workers run
``RankHooks`` (`rank_worker`), and adds
the group around them; rank ``r`` is worker ``r``, on ``devices[r]``:

1. ``start()`` starts the workers (the inner back-end's ``start``), opens the
   rendezvous store (in the caller for processes; in rank 0 for Ray, whose
   ranks may be on other machines) and sends every rank a ``Join``, within the
   timeout; then the user's ``producer_init`` (``Init``, without a time limit,
   as in any runner); it returns once every rank ran it;
2. ``poll`` / ``submit`` / ``stop`` / ``abort`` are the inner back-end's, so a
   [`DistributedRunner`][easycore.torch.distributed.DistributedRunner] is an
   ordinary runner on top; ``stop`` runs ``producer_end`` and leaves the group;
3. ``run_each`` hands one message to chosen ranks and waits for their answers
   (``spawn`` runs its function that way).

Failing fast is the inner back-end's: a hook's error or a worker's death is
raised by ``poll`` the moment it happens. This class adds the rank to the
message, prefers the root cause to its consequences (`failures`), and
turns a deadline into a ``TimeoutError`` naming the ranks that had not
answered. After an error the caller aborts, which kills every rank at once.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Mapping, Optional

from easycore.common.parallel import (
    Backend,
    ParallelError,
    ProcessBackend,
    Result,
    WorkerError,
)

from .failures import CONSEQUENCE, name_rank, severity
from .rank_worker import Failed, HostStore, Init, Join, RankHooks
from .rendezvous import LOOPBACK, open_store

__all__ = ["GroupBackend", "ProcessGroupBackend", "RayGroupBackend"]


def _deadline(timeout: Optional[float]) -> Optional[float]:
    return None if timeout is None else time.monotonic() + timeout


class GroupBackend(Backend):
    """Runs the workers of an inner back-end as the ranks of one process group."""

    #: seconds to wait, after a rank failed only because another did, for the cause
    settle = 1.0
    #: longest single wait on the inner back-end, so deadlines are kept
    tick = 0.25

    def __init__(
        self,
        inner: Backend,
        hooks: type,
        *,
        backend: str,
        timeout: Optional[float],
        host: Optional[str],
        host_in_caller: bool,
    ) -> None:
        """
        Args:
            inner (Backend): an unstarted back-end whose runner class is ``RankHooks``.
            hooks (type): the user's runner class: its ``setup_worker``,
                ``producer_init``, ``producer_work`` and ``producer_end`` run in the ranks.
            backend (str): the ``torch.distributed`` backend, e.g. "gloo".
            timeout (float or None): seconds the start-up (and each collective) may take.
            host (str or None): the store's address; None: ``127.0.0.1`` when
                the caller hosts it, the node's address when rank 0 does.
            host_in_caller (bool): whether this process hosts the store (local
                ranks) or rank 0 does (ranks that may be on other machines).
        """
        self.devices = list(inner.devices)
        self.backend = backend
        self.timeout = timeout
        self._inner = inner
        self._hooks = hooks
        self._host = host
        self._host_in_caller = host_in_caller
        self._store: Any = None
        self._next_seq = -1  # the group's own chunks; the pipeline's are >= 0
        self._closed = False

    @classmethod
    def from_runner(cls, runner: Any, cfg: Any, **options: Any) -> GroupBackend:
        """Not for this class: runners build a ``ProcessGroupBackend`` or a ``RayGroupBackend``.

        Raises:
            TypeError: always.
        """
        raise TypeError("build a ProcessGroupBackend or a RayGroupBackend from a runner")

    @property
    def world_size(self) -> int:
        """int: the number of ranks."""
        return len(self.devices)

    # ----------------------------------------------------------------- start
    def start(self) -> None:
        deadline = _deadline(self.timeout)
        self._inner.start()
        try:
            n = self.world_size
            if self._host_in_caller:
                host = self._host or LOOPBACK
                self._store, port = open_store(host, self.timeout)
                ports: List[Optional[int]] = [port] * n
            else:
                opened = self.run_each({0: HostStore(self._host, self.timeout)}, deadline,
                                       "opening the rendezvous store")
                host, port = opened[0]
                ports = [None] + [port] * (n - 1)
            joins = {
                r: Join(r, n, self.backend, host, ports[r], self.timeout, self._hooks)
                for r in range(n)
            }
            self.run_each(joins, deadline, "joining the process group")
            self.run_each({r: Init() for r in range(n)}, None, "producer_init")
        except BaseException:
            self.abort()
            raise

    def run_each(
        self, messages: Mapping[int, Any], deadline: Optional[float], what: str
    ) -> Dict[int, Any]:
        """Send one message to each of some ranks and wait for every answer.

        Args:
            messages (dict): rank -> message (a ``rank_worker`` message).
            deadline (float or None): ``time.monotonic()`` value to give up at.
            what (str): what the ranks are doing, for the ``TimeoutError``.

        Returns:
            dict: rank -> what the message returned.

        Raises:
            WorkerError: a rank failed (named, with its device and traceback).
            WorkerDiedError: a rank died.
            TimeoutError: ``deadline`` passed first.
        """
        pending: Dict[int, int] = {}  # seq -> rank
        for rank, message in messages.items():
            seq, self._next_seq = self._next_seq, self._next_seq - 1
            self._inner.submit(rank, seq, [message])
            pending[seq] = rank
        answers: Dict[int, Any] = {}
        while pending:
            wait = self.tick
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise self._timeout_error(sorted(pending.values()), what)
                wait = min(wait, remaining)
            for res in self._poll_inner(wait):
                if res.seq not in pending:
                    continue  # an answer nobody waits for any more
                rank = pending.pop(res.seq)
                value = res.results[0]
                if isinstance(value, Failed):
                    raise self._root_cause(self._report_error(rank, value), deadline)
                answers[rank] = value
        return answers

    # ------------------------------------------------------------ per chunk
    def submit(self, worker: int, seq: int, items: List[Any]) -> None:
        self._inner.submit(worker, seq, items)

    def poll(self, timeout: Optional[float]) -> List[Result]:
        return self._poll_inner(timeout)

    def wakeup(self) -> None:
        self._inner.wakeup()

    # ---------------------------------------------------------------- errors
    def _poll_inner(self, timeout: Optional[float]) -> List[Result]:
        try:
            return self._inner.poll(timeout)
        except ParallelError as err:
            raise self._root_cause(err, None) from None

    def _report_error(self, rank: int, failed: Failed) -> WorkerError:
        return WorkerError.from_report(
            failed.report, self.devices[rank], rank, self._inner.pids[rank]
        )

    def _root_cause(self, first: BaseException, deadline: Optional[float]) -> BaseException:
        """``first``, or within ``settle`` seconds a likelier cause; named by rank.

        A timeout in a peer's collective caused by a stuck rank is reported as
        ``TimeoutError`` when ``deadline`` passes while settling.
        """
        best = first
        if severity(first) >= CONSEQUENCE:
            end = time.monotonic() + self.settle
            while time.monotonic() < end and severity(best) >= CONSEQUENCE:
                if deadline is not None and time.monotonic() >= deadline:
                    return name_rank(best, self.world_size)
                try:
                    results = self._inner.poll(min(0.05, max(0.0, end - time.monotonic())))
                except ParallelError as err:
                    candidate: Optional[BaseException] = err
                else:
                    candidate = next(
                        (self._report_error(r.worker, r.results[0]) for r in results
                         if r.results and isinstance(r.results[0], Failed)),
                        None,
                    )
                if candidate is not None and severity(candidate) < severity(best):
                    best = candidate
        return name_rank(best, self.world_size)

    def _timeout_error(self, ranks: List[int], what: str) -> TimeoutError:
        pids = self._inner.pids
        running = ", ".join(
            f"rank {r} (device {self.devices[r]!r}"
            + (f", pid {pids[r]})" if pids[r] is not None else ")")
            for r in ranks
        )
        return TimeoutError(
            f"{what} did not finish within {self.timeout} s: still running: {running}"
        )

    # ------------------------------------------------------------------ end
    def stop(self, timeout: Optional[float] = None) -> None:
        if self._closed:
            return
        try:
            self._inner.stop(timeout)  # producer_end everywhere, then each rank leaves
        except ParallelError as err:
            raise name_rank(err, self.world_size) from None
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
        self._store = None  # stops listening

    @property
    def closed(self) -> bool:
        """bool: whether the ranks are gone."""
        return self._closed

    @property
    def pids(self) -> List[Optional[int]]:
        return self._inner.pids

    @property
    def inner(self) -> Backend:
        """Backend: the back-end running the ranks."""
        return self._inner


class ProcessGroupBackend(GroupBackend):
    """Ranks as local worker processes; the caller hosts the store."""

    @classmethod
    def from_runner(cls, runner: Any, cfg: Any, **options: Any) -> ProcessGroupBackend:
        """Build from a [`DistributedRunner`][easycore.torch.distributed.DistributedRunner].

        Args:
            runner (DistributedRunner): reads ``devices``, ``dist_backend``,
                ``dist_timeout``, ``dist_host`` and its process seams.
            cfg (CfgNode):
            **options: none are accepted.

        Returns:
            ProcessGroupBackend:
        """
        if options:
            raise TypeError(f"unexpected options for backend='process': {sorted(options)}")
        inner = ProcessBackend(
            RankHooks, runner.devices, cfg, runner.get_mp_context(), runner.make_transport()
        )
        return cls(inner, type(runner), backend=runner.dist_backend,
                   timeout=runner.dist_timeout, host=runner.dist_host, host_in_caller=True)


class RayGroupBackend(GroupBackend):
    """Ranks as Ray actors; rank 0 hosts the store on its node."""

    @classmethod
    def from_runner(cls, runner: Any, cfg: Any, **options: Any) -> RayGroupBackend:
        """Build from a [`DistributedRunner`][easycore.torch.distributed.DistributedRunner].

        Args:
            runner (DistributedRunner):
            cfg (CfgNode):
            **options: ``address`` (which Ray, as for the runners' Ray
                back-end) and ``ray_init_kwargs`` (other ``ray.init`` arguments).

        Returns:
            RayGroupBackend:
        """
        from easycore.common.parallel.ray_backend import RayBackend

        address = options.pop("address", None)
        ray_init_kwargs = options.pop("ray_init_kwargs", None)
        if options:
            raise TypeError(f"unexpected options for backend='ray': {sorted(options)}")
        inner = RayBackend(RankHooks, runner.devices, cfg, address, ray_init_kwargs)
        return cls(inner, type(runner), backend=runner.dist_backend,
                   timeout=runner.dist_timeout, host=runner.dist_host, host_in_caller=False)
