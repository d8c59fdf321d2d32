"""The back-end seam: who runs the producers, and how results come back.

The per-call machinery (:mod:`.pipeline`: feeding, chunking, ordering, the
consumer hooks) talks only to this interface, so process management is
replaceable. :class:`~.process_backend.ProcessBackend` runs one process per
device; a Ray back-end would run one actor per device, each wrapping
:class:`~.worker.ProducerWorker`, with ``submit`` as ``actor.run_chunk.remote``
and ``poll`` as ``ray.wait``.

Contract (all methods are called from the caller's process):

* ``from_runner(runner, cfg, **options)`` (classmethod): build an unstarted
  back-end for ``runner`` (read ``type(runner)`` for the hooks,
  ``runner.devices``, and whichever runner seams apply, e.g.
  ``runner.get_mp_context()`` and ``runner.make_transport()``); ``options``
  are the runner constructor's extra keyword arguments, e.g. a Ray back-end's
  ``address`` and ``ray_init_kwargs``.

* ``start()``: start every worker and run its ``producer_init``; raise
  :class:`~.errors.WorkerError` / :class:`~.errors.WorkerDiedError` (after
  cleaning up) if any fails.
* ``submit(worker, seq, items)``: hand a chunk to a worker. Called from the
  feeder thread, concurrently with ``poll``. May block until the worker takes
  it; raises :class:`ChannelBroken` if the worker can no longer be reached.
* ``poll(timeout)``: wait for results; return a list of :class:`Result`
  (possibly empty: on timeout, on ``wakeup``, or early, so that the caller
  gets back to Python code and a Ctrl-C is handled promptly). Raise a ``WorkerError`` as soon
  as a hook failed and a ``WorkerDiedError`` as soon as a worker died.
* ``wakeup()``: make a blocked ``poll`` return; thread-safe.
* ``stop(timeout)``: graceful end: ``producer_end`` on every worker, join all.
* ``abort()``: end everything now, release every resource, never raise.
"""

from __future__ import annotations

import abc
from typing import Any, List, NamedTuple, Optional

__all__ = ["Backend", "ChannelBroken", "Result"]


class ChannelBroken(OSError):
    """A chunk could not be handed to a worker (it is gone)."""


class Result(NamedTuple):
    """One finished chunk."""

    worker: int  #: index of the worker in ``devices``
    seq: int  #: the chunk's sequence number in the call
    results: List[Any]  #: decoded producer results, one per item
    n_items: int
    seconds: float  #: worker time on the chunk, for the chunker
    nbytes: int  #: bytes moved, for the chunker


class Backend(abc.ABC):
    """Runs the producer hooks of a runner on a set of devices."""

    #: devices, one worker each, in order
    devices: List[str]

    @classmethod
    @abc.abstractmethod
    def from_runner(cls, runner: Any, cfg: Any, **options: Any) -> Backend:
        """Build an unstarted back-end for ``runner``.

        Args:
            runner (BaseRunner): the runner being activated.
            cfg (CfgNode): the runner's cfg; each worker must get its own copy.
            **options: the runner constructor's extra keyword arguments.

        Returns:
            Backend:
        """

    @abc.abstractmethod
    def start(self) -> None:
        """Start the workers and wait until every ``producer_init`` returned."""

    @abc.abstractmethod
    def submit(self, worker: int, seq: int, items: List[Any]) -> None:
        """Hand chunk ``seq`` to ``worker``.

        Args:
            worker (int): index of the worker.
            seq (int): sequence number of the chunk within the call.
            items (list): the inputs.
        """

    @abc.abstractmethod
    def poll(self, timeout: Optional[float]) -> List[Result]:
        """Wait up to ``timeout`` seconds (None: until something happens).

        Args:
            timeout (float or None):

        Returns:
            list[Result]: finished chunks, maybe none.
        """

    @abc.abstractmethod
    def wakeup(self) -> None:
        """Make a concurrent or the next :meth:`poll` return promptly."""

    @abc.abstractmethod
    def stop(self, timeout: Optional[float] = None) -> None:
        """Run ``producer_end`` everywhere and release everything.

        Args:
            timeout (float or None): seconds to wait for the workers to end
                before killing them and raising ``TimeoutError``.
        """

    @abc.abstractmethod
    def abort(self) -> None:
        """Kill the workers now and release everything; never raises."""

    @property
    def pids(self) -> List[Optional[int]]:
        """list: process ids of the workers, where the back-end has them."""
        return [None] * len(self.devices)
