"""The transport interface: how items, results and ``cfg`` cross between the caller and its workers.

A [`Transport`][easycore.common.parallel.Transport] is made in the caller's
process (the device policy's ``make_transport``), pickled into every worker,
and used on both sides of the pipe, in both directions:

* caller: ``encode_items(worker, items)`` before a chunk goes out,
  ``decode_results(worker, payload)`` when its results come back,
  ``feedback(worker)`` (data the worker gets with its next message) and
  ``on_worker_feedback(worker, data)`` (data that came with a worker's
  message), ``idle()`` between calls, ``worker_gone(worker)`` and
  ``cleanup()``;
* worker: ``bind_worker(index)`` once, then ``decode_items(payload)`` and
  ``encode_results(results)`` per chunk, with ``on_feedback(data)`` and
  ``worker_feedback()`` for the channel back;
* ``encode_cfg(cfg)`` (caller) / ``decode_cfg(payload)`` (worker): the
  runner's ``cfg``, once per worker.

**Small chunks travel inline**: a payload is pickled again inside the message
that carries it, so a chunk's items and results each cost two pickles and two
unpickles. A short list of plain values (exact built-in numbers, short
``str``/``bytes``, small tuples, lists and dicts of them; see
[`inline`][easycore.common.parallel.transport.inline] for the bounds) is
therefore its own payload: ``encode_items`` and ``encode_results`` return the
list itself and the message's one pickle carries it, and ``decode_items`` and
``decode_results`` hand a list back as it is. Such values always pickle and
never name ``__main__``, so every error of an item or result that does not
pickle is raised where it was before; ``nbytes`` is then an estimate of the
list's pickle. The ``cfg`` never travels inline.

The transports: [`PickleTransport`][easycore.common.parallel.PickleTransport]
(everything through the pipe), ``DirectTransport`` (objects as they are, for
back-ends that move objects themselves: threads, Ray) here, and
[`SharedMemoryTransport`][easycore.common.parallel.SharedMemoryTransport], the
default, in [`shared_memory`][easycore.common.parallel.transport.shared_memory].
"""

from __future__ import annotations

import pickle

from .inline import inline_size
from .pickling import dumps_data

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any

__all__ = ["DirectTransport", "PickleTransport", "Transport", "plain_or_pickled", "unpickled"]

_HIGHEST = pickle.HIGHEST_PROTOCOL


class Transport:
    """Interface of a transport; see the module docstring for who calls what."""

    # ------------------------------------------------------------ caller side
    def prepare(self) -> None:
        """In the caller's process, before any worker starts."""

    def encode_items(self, worker: int, items: list[Any]) -> tuple[Any, int]:
        """A chunk of inputs as a picklable payload for ``worker``.

        Args:
            worker (int): index of the worker that gets the chunk.
            items (list): the inputs.

        Returns:
            tuple: ``(payload, nbytes)``, nbytes being the data moved. A short
            list of plain values is its own payload (see
            [`inline`][easycore.common.parallel.transport.inline]).
        """
        return plain_or_pickled(items)

    def decode_results(self, worker: int, payload: Any) -> list[Any]:
        """The result list back from a worker's payload.

        Args:
            worker (int): the worker that sent it.
            payload (Any): what ``encode_results`` made.

        Returns:
            list:
        """
        return unpickled(payload)

    def discard(self, worker: int, payload: Any) -> None:
        """Release a result payload that will never be decoded (its job was cancelled)."""

    def feedback(self, worker: int) -> Any:
        """Data for ``worker``, sent with its next message; None for nothing."""
        return None

    def on_worker_feedback(self, worker: int, data: Any) -> None:
        """Data that came with a message of ``worker`` (never None)."""

    def item_payload_done(self, worker: int, payload: Any) -> None:
        """An items payload sent to ``worker`` will not be read (the worker died)."""

    def idle(self) -> None:
        """Nothing is in flight: give back what is only kept for speed."""

    def worker_gone(self, worker: int) -> None:
        """``worker`` died or was replaced: forget what it held."""

    def encode_cfg(self, cfg: Any) -> Any:
        """The runner's ``cfg`` as a payload every worker decodes once."""
        return dumps_data(cfg, _HIGHEST)

    def cleanup(self) -> None:
        """After all workers ended: release everything."""

    # ------------------------------------------------------------ worker side
    def bind_worker(self, worker_index: int) -> None:
        """In the worker, once, before anything else.

        Args:
            worker_index (int): position of this worker in ``devices``.
        """

    def decode_cfg(self, payload: Any) -> Any:
        """In the worker: this worker's own ``cfg``."""
        return pickle.loads(payload)

    def decode_items(self, payload: Any) -> list[Any]:
        """In the worker: the items of a chunk."""
        return unpickled(payload)

    def encode_results(self, results: list[Any]) -> tuple[Any, int]:
        """In the worker: a chunk's results as a payload.

        Args:
            results (list): one per item.

        Returns:
            tuple: ``(payload, nbytes)``; as for ``encode_items``, a short
            list of plain values is its own payload.
        """
        return plain_or_pickled(results)

    def on_feedback(self, data: Any) -> None:
        """In the worker: what ``feedback`` returned (never None)."""

    def worker_feedback(self) -> Any:
        """In the worker: data for the caller with the next message; None for nothing."""
        return None


def plain_or_pickled(values: list[Any]) -> tuple[Any, int]:
    """A list as its own payload when it may travel inline, else its pickle."""
    size = inline_size(values)
    if size is not None:
        return values, size
    data = dumps_data(values, _HIGHEST)
    return data, len(data)


def unpickled(payload: Any) -> list[Any]:
    """What ``plain_or_pickled`` made, back."""
    if type(payload) is list:  # it travelled inline, in its message
        return payload
    return pickle.loads(payload)


class PickleTransport(Transport):
    """Everything pickled in-band through the pipe (the classic way)."""


class DirectTransport:
    """The transport of back-ends that move objects themselves (threads, Ray)."""

    def encode_items(self, worker: int, items: list[Any]) -> tuple[Any, int]:
        return items, 0

    def decode_results(self, worker: int, payload: Any) -> list[Any]:
        return payload

    def discard(self, worker: int, payload: Any) -> None:
        pass

    def feedback(self, worker: int) -> Any:
        return None

    def on_worker_feedback(self, worker: int, data: Any) -> None:
        pass

    def item_payload_done(self, worker: int, payload: Any) -> None:
        pass

    def idle(self) -> None:
        pass

    def worker_gone(self, worker: int) -> None:
        pass
