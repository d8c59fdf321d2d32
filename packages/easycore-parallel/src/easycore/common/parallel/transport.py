"""Result transport: how a chunk of producer results reaches the consumer.

A :class:`Transport` is made in the caller's process by
:meth:`BaseRunner.make_transport`, pickled into every worker, and then used on
both sides of the pipe:

* in the worker, :meth:`Transport.bind_worker` once, then
  :meth:`Transport.encode` per chunk turns the result list into a small,
  picklable *payload*;
* in the caller, :meth:`Transport.decode` turns the payload back into the
  list, :meth:`Transport.discard` releases a payload that will never be
  decoded (the call failed), and :meth:`Transport.cleanup` releases whatever
  is left once the workers are gone;
* a feedback channel back to the worker: the back-end piggybacks
  ``feedback(worker)`` (caller side) on the next chunk it sends that worker,
  which hands it to ``on_feedback`` (worker side).

:class:`SharedMemoryTransport`, the default, pickles with protocol 5 and moves
every large out-of-band buffer (NumPy arrays, anything that pickles through
``PickleBuffer``) into a POSIX shared-memory segment instead of through the
pipe: one copy in the worker, none in the caller, whose arrays *view* the
segment. Segments are recycled, because on first touch fresh shared memory
costs more than the copy: when the last array viewing a segment is
garbage-collected, a weak reference queues it, the feedback channel returns
it to its worker, and the worker writes the next results there. A worker
keeps a few free segments mapped between calls; ``cleanup`` unlinks them all.
NumPy is never imported here: arrays pickle themselves, and unpickling
imports NumPy only when a result holds one.

Leak safety: the worker registers each segment with multiprocessing's
resource tracker when it creates it, so if the whole process family is
SIGKILLed the tracker still removes them. Only the caller unlinks (and
unregisters): segments a worker no longer wants travel back in its next
payload, and :meth:`~Transport.cleanup` unlinks every name the caller has seen
(arrays still alive keep their memory until they die) and, on Linux, sweeps
``/dev/shm`` for this activation's prefix (``ecp-<caller pid>-<token>-``) to
catch segments a killed worker never sent. Workers, which may be killed at
any instant, thus never leave the tracker's books and the files out of step.

A torch back-end overrides this seam (``BaseRunner.transport_class``), e.g.
to carry tensor storages out of band through the same segments.
"""

from __future__ import annotations

import mmap
import os
import pickle
import secrets
import weakref
from collections import deque
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["Transport", "PickleTransport", "SharedMemoryTransport"]

try:  # POSIX shared memory, the same primitive multiprocessing.shared_memory uses
    import _posixshmem
    from multiprocessing import resource_tracker
except ImportError:  # Windows: results travel in-band through the pipe
    _posixshmem = None
    resource_tracker = None

_SHM_DIR = "/dev/shm"  # where Linux exposes POSIX shared memory names, for the sweep
_ALIGN = 64  # cache-line aligned buffers, as NumPy prefers


class Transport:
    """Interface of a result transport; see the module docstring for the protocol."""

    def prepare(self) -> None:
        """In the caller's process, before any worker starts."""

    def bind_worker(self, worker_index: int) -> None:
        """In the worker, once, before the first :meth:`encode`.

        Args:
            worker_index (int): position of this worker in ``devices``.
        """

    def encode(self, results: List[Any]) -> Tuple[Any, int]:
        """In the worker: turn one chunk's results into a picklable payload.

        Args:
            results (list): what ``producer_work`` returned, one per item.

        Returns:
            tuple: ``(payload, nbytes)``, nbytes being the data moved, for chunking.
        """
        raise NotImplementedError

    def decode(self, payload: Any) -> List[Any]:
        """In the caller's process: the result list back from a payload.

        Args:
            payload (Any): what :meth:`encode` returned.

        Returns:
            list:
        """
        raise NotImplementedError

    def discard(self, payload: Any) -> None:
        """In the caller's process: release a payload that will not be decoded."""

    def feedback(self, worker_index: int) -> Any:
        """In the caller's process: data for a worker, sent with its next chunk.

        Args:
            worker_index (int):

        Returns:
            Any: picklable, or None for nothing.
        """
        return None

    def on_feedback(self, feedback: Any) -> None:
        """In the worker: receive what :meth:`feedback` returned (never None)."""

    def cleanup(self) -> None:
        """In the caller's process, after all workers ended: release leftovers."""


class PickleTransport(Transport):
    """Results pickled in-band through the pipe (the classic way)."""

    def encode(self, results: List[Any]) -> Tuple[Any, int]:
        data = pickle.dumps(results, protocol=pickle.HIGHEST_PROTOCOL)
        return data, len(data)

    def decode(self, payload: Any) -> List[Any]:
        return pickle.loads(payload)


class SharedMemoryTransport(PickleTransport):
    """Large out-of-band buffers go through recycled shared-memory segments.

    Args:
        threshold (int): buffers smaller than this many bytes stay in the
            pickle; a segment costs a few system calls, a pipe ~1 GB/s.
    """

    #: buffers smaller than this stay in the pickle
    threshold = 64 * 1024
    #: free segments a worker keeps for reuse; it drops more (the caller unlinks them).
    #: About what one worker has in flight at queue_scale=3, so big results reuse
    #: segments instead of faulting in fresh pages (4 measured ~20% slower at 8 MB).
    max_free_segments = 8
    #: smallest segment size, so that small arrays of varying size share segments
    min_segment_bytes = 1 << 20

    def __init__(self, threshold: Optional[int] = None) -> None:
        if threshold is not None:
            self.threshold = threshold
        # Names carry the caller's pid (whose segments are these?) and a
        # per-activation token, so the caller can sweep exactly its own, and
        # restarts never collide with old names. Short: macOS allows 31 chars.
        self.prefix = f"ecp-{os.getpid():x}-{secrets.token_hex(3)}-"
        self._init_state()

    def _init_state(self) -> None:
        # worker side
        self._index = -1
        self._counter = 0
        self._free: List[_Segment] = []  # mapped here, not lent: reusable
        self._lent: Dict[str, _Segment] = {}  # handed to the caller, awaiting return
        self._dropped: List[str] = []  # unmapped here; the caller unlinks them
        # caller side
        self._returns: Dict[int, deque] = {}  # worker -> weakrefs of mappings that died
        self._mapped: Dict[weakref.ref, str] = {}  # weakref of a live mapping -> its name
        self._known: set = set()  # every name seen, unlinked by cleanup()

    def __getstate__(self) -> dict:
        # Only configuration crosses into a worker, never mappings or queues.
        return {"threshold": self.threshold, "prefix": self.prefix}

    def __setstate__(self, state: dict) -> None:
        self.threshold = state["threshold"]
        self.prefix = state["prefix"]
        self._init_state()

    @property
    def available(self) -> bool:
        """bool: whether this platform has POSIX shared memory."""
        return _posixshmem is not None

    def prepare(self) -> None:
        if self.available:
            # Forked workers must share the caller's tracker; one started
            # lazily inside a worker would "clean up" segments still in flight.
            resource_tracker.ensure_running()

    # ---------------------------------------------------------------- worker
    def bind_worker(self, worker_index: int) -> None:
        self._index = worker_index

    def encode(self, results: List[Any]) -> Tuple[Any, int]:
        if not self.available:
            return super().encode(results)
        buffers: List[memoryview] = []
        threshold = self.threshold

        def out_of_band(buf: pickle.PickleBuffer) -> bool:
            try:
                raw = buf.raw()
            except BufferError:  # not contiguous: let pickle copy it in-band
                return True
            if raw.nbytes < threshold:
                return True
            buffers.append(raw)
            return False

        data = pickle.dumps(results, protocol=5, buffer_callback=out_of_band)
        dropped, self._dropped = self._dropped, []
        if not buffers:
            if dropped:
                return (data, None, None, self._index, dropped), len(data)
            return data, len(data)
        layout = []
        total = 0
        for raw in buffers:
            layout.append((total, raw.nbytes))
            total += -(-raw.nbytes // _ALIGN) * _ALIGN
        segment = self._segment_for(total)
        mm = segment.mmap
        for (off, n), raw in zip(layout, buffers):
            mm[off : off + n] = raw  # the only copy the data makes
        self._lent[segment.name] = segment
        return (data, segment.name, layout, self._index, dropped), len(data) + total

    def _segment_for(self, nbytes: int) -> _Segment:
        # Reuse beats fresh memory by far: a new tmpfs page must be allocated
        # and zeroed on first touch, which costs more than the copy itself.
        fits = [s for s in self._free if s.size >= nbytes]
        if fits:
            best = min(fits, key=lambda s: s.size)
            self._free.remove(best)
            return best
        # Results outgrew the free segments (chunks grow while the chunker
        # learns): drop them rather than keep memory that will not be reused.
        for segment in self._free:
            self._drop(segment)
        self._free.clear()
        size = max(self.min_segment_bytes, 1 << (nbytes - 1).bit_length())
        name = f"/{self.prefix}{self._index}-{self._counter:x}"
        self._counter += 1
        fd = _posixshmem.shm_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        try:
            # Registered before it holds data, so a crash from here on is still
            # cleaned up by the tracker when the process family is gone.
            resource_tracker.register(name, "shared_memory")
            os.ftruncate(fd, size)  # sparse: unused tail pages cost nothing
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return _Segment(name, size, mm)

    def on_feedback(self, feedback: Any) -> None:
        for name in feedback:
            segment = self._lent.pop(name, None)
            if segment is not None:
                self._free.append(segment)
        while len(self._free) > self.max_free_segments:
            self._drop(self._free.pop(0))

    def _drop(self, segment: _Segment) -> None:
        # Workers never unlink: one killed between unlinking a name and telling
        # the resource tracker would leave the tracker warning about a "leak" at
        # exit. The caller, which we never kill, unlinks what we report.
        segment.mmap.close()
        self._dropped.append(segment.name)

    # ---------------------------------------------------------------- caller
    def decode(self, payload: Any) -> List[Any]:
        if not isinstance(payload, tuple):
            return pickle.loads(payload)
        data, name, layout, worker, dropped = payload
        for old in dropped:
            _unlink(old)
            self._known.discard(old)
        if name is None:
            return pickle.loads(data)
        self._known.add(name)
        total = layout[-1][0] + layout[-1][1]
        fd = _posixshmem.shm_open(name, os.O_RDWR, mode=0o600)
        try:
            mm = mmap.mmap(fd, total)
        finally:
            os.close(fd)
        # When the last array viewing this mapping dies, the segment goes back
        # to its worker for reuse. The callback is deque.append, C code: Python
        # code run from a weakref callback would swallow a KeyboardInterrupt
        # delivered while it runs, and Ctrl-C would be lost.
        returns = self._returns.get(worker)
        if returns is None:
            returns = self._returns[worker] = deque()
        ref = weakref.ref(mm, returns.append)
        hash(ref)  # a weakref hashes its referent, which must still be alive
        self._mapped[ref] = name
        view = memoryview(mm)
        return pickle.loads(data, buffers=[view[off : off + n] for off, n in layout])

    def feedback(self, worker_index: int) -> Any:
        returns = self._returns.get(worker_index)
        if not returns:
            return None
        names = []
        try:
            while True:  # popleft is atomic: mappings may die meanwhile
                names.append(self._mapped.pop(returns.popleft()))
        except IndexError:
            pass
        return names

    def discard(self, payload: Any) -> None:
        if isinstance(payload, tuple):  # unlinked by cleanup(), after the worker is gone
            self._known.update(payload[4])
            if payload[1] is not None:
                self._known.add(payload[1])

    def cleanup(self) -> None:
        if not self.available:
            return
        self._mapped.clear()  # arrays still alive keep their memory, not their slot
        self._returns.clear()
        for name in list(self._known):
            _unlink(name)
        if os.path.isdir(_SHM_DIR):  # Linux: also what workers made but never sent
            try:
                names = os.listdir(_SHM_DIR)
            except OSError:
                names = []
            for entry in names:
                if entry.startswith(self.prefix):
                    _unlink("/" + entry, registered=False)


class _Segment:
    __slots__ = ("name", "size", "mmap")

    def __init__(self, name: str, size: int, mm: mmap.mmap) -> None:
        self.name = name
        self.size = size
        self.mmap = mm


def _unlink(name: str, registered: bool = True) -> None:
    try:
        _posixshmem.shm_unlink(name)
    except FileNotFoundError:
        return  # someone else unlinked (and unregistered) it
    if not registered:
        # A worker killed between creating a segment and registering it left
        # a name the tracker never heard of, and unregistering an unknown name
        # makes it print a traceback; registering first is idempotent.
        resource_tracker.register(name, "shared_memory")
    resource_tracker.unregister(name, "shared_memory")
