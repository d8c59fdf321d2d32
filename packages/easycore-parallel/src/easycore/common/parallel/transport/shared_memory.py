"""The default transport: large buffers through recycled shared-memory segments, both ways.

[`SharedMemoryTransport`][easycore.common.parallel.SharedMemoryTransport]
(the interface it implements, and who calls what, is in
[`interface`][easycore.common.parallel.transport.interface]) pickles with protocol 5 and
moves every large out-of-band buffer (NumPy arrays, anything that pickles
through ``PickleBuffer``; CPU tensors with easycore-torch) into POSIX shared
memory instead of the pipe: one copy on the sending side, none on the
receiving side, whose arrays *view* the segment. Short lists of plain values
travel inline, as with every transport. What it guarantees:

* **Segments belong to the caller** and are recycled: a segment comes back to
  its worker's free list when the last array viewing it dies (a worker's
  input arrays, the consumer's result arrays), and is written again instead
  of faulting in fresh pages (which costs more than the copy). Both sides
  keep their mappings open across chunks.
* **Small things stay on the pipe**: buffers under ``threshold`` (64 KiB)
  stay in the pickle; a pickle's own bytes move into the segment too when
  they are large, so pipe messages stay small.
* **A full ``/dev/shm`` is no crash**: space is reserved when a segment is
  made; when there is none the chunk travels in-band through the pipe (one
  ``ResourceWarning`` per runner) and the call goes on.
* **An idle runner holds little**: ``idle()`` (the end of every call) gives
  back every free segment beyond ``idle_keep_bytes`` per worker, including
  the ones a worker was holding for its next results, at once.
* **``cfg`` is shared, not copied**: its large buffers go into one segment
  that every worker maps copy-on-write: each worker sees its own ``cfg``,
  memory holds one copy until a worker writes to a page.
* **No leaks**: every segment's name is registered with multiprocessing's
  resource tracker before the segment exists, only the caller unlinks, and
  ``cleanup()`` also sweeps ``/dev/shm`` for this activation's name prefix,
  to catch segments a killed worker made but never reported (see
  [`shm`][easycore.common.parallel.transport.shm]).
* **No false alarms from killed workers**: the caller registers the names a
  worker will make its own result segments under (``reserved``, with the
  feedback, once the caller has a tracker or the worker asks for names: no
  tracker is started for a pool of small items) and releases each, made or
  not, so a worker killed between the registration and ``shm_open`` leaves
  nothing the tracker reports "leaked" when the program ends. Only for
  callers that outlive their workers (the engine's); services, whose peers
  may outlive them, let each side register its own (``reserve_names = False``).

How it is built: both directions run the same two steps. *Encoding*
(``_encode``) pickles the object once, out-of-band buffers apart, and copies
what is large into a segment that the *sending side* picks; *decoding*
(``_decode``) maps the segment the payload names, on the *receiving side*,
and unpickles over views of it, watching when the last view dies. Only where
segments come from and what happens to them differs: that is
[`segments`][easycore.common.parallel.transport.segments], one class per side.

[`pack`][easycore.common.parallel.SharedMemoryTransport.pack] and
[`unpack`][easycore.common.parallel.SharedMemoryTransport.unpack] are the two
steps alone, for a reader that maps the segment itself (the ``Queue``): a
[`Packed`][easycore.common.parallel.transport.shared_memory.Packed] payload
names its segment.

Subclasses change *what* goes out of band by overriding
[`dumps`][easycore.common.parallel.SharedMemoryTransport.dumps] (easycore-torch
reduces CPU tensors to a buffer over their bytes), and *how* a buffer is
copied into its segment by overriding
[`copy_into`][easycore.common.parallel.SharedMemoryTransport.copy_into]
(easycore-torch copies large ones on torch's threads).
"""

from __future__ import annotations

import collections
import pickle
import warnings
from collections.abc import Callable

from .. import logs
from . import shm
from .inline import inline_size
from .interface import PickleTransport, Transport, unpickled
from .pickling import dumps_data
from .segments import (
    CallerFeedback,
    CallerSegments,
    NoNameYet,
    Returns,
    WorkerFeedback,
    WorkerSegments,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any

# (Transport, PickleTransport, CallerFeedback and WorkerFeedback were defined
# here before the transport was split: their old import path keeps working.)
__all__ = [
    "CallerFeedback",
    "Packed",
    "PickleTransport",
    "SegmentFor",
    "SharedMemoryTransport",
    "Transport",
    "WorkerFeedback",
]

_ALIGN = 64  # cache-line aligned buffers, as NumPy prefers
_HIGHEST = pickle.HIGHEST_PROTOCOL

#: ``(name, size, mapping)`` of the segment an encoding writes into
if TYPE_CHECKING:
    SegmentFor = Callable[[int], tuple[str, int, Any]]
else:  # the same, made without typing
    SegmentFor = Callable[[int], tuple]

#: an ``on_free`` that forgets: for readers that do not watch their views
_FORGET: Callable[[Any], Any] = collections.deque(maxlen=0).append


class Packed(tuple):
    """A payload that travels partly in a segment: ``(data, name, size, layout, data_span)``.

    A reader maps the segment ``name`` (``size`` bytes) and hands the
    mapping to [`unpack`][easycore.common.parallel.SharedMemoryTransport.unpack];
    any other payload travelled in-band.
    """

    __slots__ = ()

    @property
    def name(self) -> str:
        """str: the segment's name."""
        return self[1]

    @property
    def size(self) -> int:
        """int: the segment's size in bytes."""
        return self[2]




class SharedMemoryTransport(Transport):
    """Large buffers through recycled shared-memory segments, both ways.

    Args:
        threshold (int or None): buffers smaller than this many bytes stay in
            the pickle (a segment costs a few system calls, a pipe ~1 GB/s).
    """

    #: buffers (and pickles) smaller than this stay in-band
    threshold = 64 * 1024
    #: smallest segment, so that small arrays of varying size share segments
    min_segment_bytes = 1 << 20
    #: free segments a worker may hold for its next results
    grants_per_worker = 2
    #: free segments kept per worker while a call runs
    max_free_per_worker = 8
    #: bytes of free segments kept per worker between calls (see ``idle``)
    idle_keep_bytes = 16 << 20
    #: name tag of the segments (a leak check can tell torch's from ours)
    tag = "ecp"
    #: the caller registers the names its workers make segments under (it
    #: outlives them); False where a peer may outlive the caller (services)
    reserve_names = True

    def __init__(self, threshold: int | None = None) -> None:
        if threshold is not None:
            self.threshold = int(threshold)
        self.prefix = shm.make_prefix(self.tag)
        self._init_state()

    def _init_state(self) -> None:
        self._counter = 0
        self._warned = False
        self._full = False  # the last _pack found /dev/shm full
        self._caller = CallerSegments(self)
        self._worker = WorkerSegments(self)

    def __getstate__(self) -> dict:
        # Only configuration crosses into a worker, never mappings or tables.
        return {k: v for k, v in self.__dict__.items() if k in ("threshold", "prefix")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_state()

    @property
    def available(self) -> bool:
        """bool: whether this platform has POSIX shared memory."""
        return shm.AVAILABLE

    # ------------------------------------------------------------- pickling
    def dumps(self, obj: Any) -> tuple[bytes, list[memoryview], Any]:
        """Pickle ``obj``, large buffers out of band.

        Override to send more kinds of objects out of band.

        Args:
            obj (Any):

        Returns:
            tuple: ``(pickle bytes, out-of-band buffers, keepalive)``;
            ``keepalive`` holds temporaries the buffers point into until copied.
        """
        buffers: list[memoryview] = []
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

        return dumps_data(obj, 5, out_of_band, restart=buffers.clear), buffers, None

    def copy_into(self, mm: Any, offset: int, data: memoryview) -> None:
        """Copy one out-of-band buffer into a segment: the one copy its data makes.

        Override to copy faster (easycore-torch copies large buffers with
        torch's threads, within the process's thread budget).

        Args:
            mm (mmap.mmap): the segment's mapping.
            offset (int): where the buffer goes.
            data (memoryview): the buffer, contiguous bytes.
        """
        mm[offset : offset + data.nbytes] = data

    def _pack(self, obj: Any, segment_for: SegmentFor) -> tuple[Any, int]:
        """Pickle ``obj``; big parts into the segment ``segment_for(nbytes)`` returns.

        Sets ``_full`` when there was no room: ``obj`` then went in-band.
        """
        data, buffers, keepalive = self.dumps(obj)
        if not buffers and len(data) < self.threshold:
            return data, len(data)
        layout = []
        total = 0
        for raw in buffers:
            layout.append((total, raw.nbytes))
            total += -(-raw.nbytes // _ALIGN) * _ALIGN
        inline = len(data) < self.threshold
        data_span = None
        if not inline:
            data_span = (total, len(data))
            total += len(data)
        try:
            name, size, mm = segment_for(total)
        except NoNameYet:
            data = dumps_data(obj, _HIGHEST)  # in-band until the worker's names come
            return data, len(data)
        except shm.SharedMemoryFull:
            self._full = True
            # In-band through the pipe: slower, but the call goes on.
            data = dumps_data(obj, _HIGHEST)
            return data, len(data)
        for (off, _n), raw in zip(layout, buffers):
            self.copy_into(mm, off, raw)  # the only copy the data makes
        if data_span is not None:
            mm[data_span[0] : data_span[0] + data_span[1]] = data
        del keepalive
        return Packed((None if data_span else data, name, size, layout, data_span)), total

    def _unpack(self, payload: Any, mm: Any, on_free: Any, watch: dict[int, Any]) -> Any:
        """Unpickle ``payload`` over views of ``mm``; ``on_free`` hears when they all died."""
        data, name, size, layout, data_span = payload
        view = shm.BufferView(mm, size, on_free)
        # Keyed by id: the view is unhashable; the entry keeps the ref alive.
        watch[id(view.ref)] = (view.ref, name)
        if data_span is not None:
            data = view.slice(*data_span)
        buffers = [view.slice(off, n) for off, n in layout]
        view.drop()
        return pickle.loads(data, buffers=buffers)

    # ------------------------------------------- the two steps, for other readers
    def pack(self, obj: Any, segment_for: SegmentFor) -> tuple[Any, int]:
        """Pickle ``obj`` for a reader that maps the segment itself (the ``Queue``).

        Large buffers, and a large pickle, go into the segment that
        ``segment_for(nbytes)`` returns as ``(name, size, mapping)``; with no
        room there (``shm.SharedMemoryFull``) ``obj`` travels in-band instead,
        with one ``ResourceWarning`` per transport.

        Args:
            obj (Any): what to send.
            segment_for (callable): ``nbytes -> (name, size, mapping)`` of a
                segment of at least ``nbytes``; called only when something
                goes out of band.

        Returns:
            tuple: ``(payload, nbytes)``: a ``Packed`` naming the segment, or
            the pickle's bytes; and the bytes moved.
        """
        payload, nbytes = self._pack(obj, segment_for)
        if self._full:
            self._full = False
            self._warn_full()
        return payload, nbytes

    @staticmethod
    def segment_of(payload: Any) -> tuple[str, int] | None:
        """``(name, size)`` of the segment a ``pack`` payload lives in; None: in-band."""
        return (payload.name, payload.size) if isinstance(payload, Packed) else None

    def unpack(self, payload: Any, mm: Any = None, on_free: Callable[[Any], Any] | None = None,
               watch: dict[int, Any] | None = None) -> Any:
        """What [`pack`][easycore.common.parallel.SharedMemoryTransport.pack] made, back.

        Args:
            payload (Any): a ``Packed`` payload, or one that travelled in-band.
            mm (mmap.mmap or None): the mapping of ``payload.name`` (a
                ``Packed`` payload's arrays view it; the reader maps it).
            on_free (callable or None): ``on_free(token)`` when the last
                object viewing the segment died (C code such as
                ``deque.append``: see ``shm.BufferView``); None: not watched.
            watch (dict or None): where ``id(token) -> (token, name)`` is
                recorded for ``on_free``'s caller; None: nowhere.

        Returns:
            Any: the object.

        Raises:
            ValueError: a ``Packed`` payload without its segment's mapping.
        """
        if not isinstance(payload, Packed):
            return unpickled(payload)
        if mm is None:
            raise ValueError(f"payload in segment {payload.name!r} needs its mapping to unpack")
        return self._unpack(payload, mm, _FORGET if on_free is None else on_free,
                            {} if watch is None else watch)

    # ------------------------------------------------ one way, both directions
    def _encode(self, obj: Any, segment_for: SegmentFor,
                on_full: Callable[[], None]) -> tuple[Any, int]:
        """Items (caller) or results (worker): the sending side picks the segment."""
        if not self.available:
            data = pickle.dumps(obj, protocol=_HIGHEST)
            return data, len(data)
        payload, nbytes = self._pack(obj, segment_for)
        if self._full:
            self._full = False
            on_full()
        return payload, nbytes

    def _decode(self, payload: Any, mapping: Callable[[str, int], Any],
                returns: Returns) -> Any:
        """Results (caller) or items (worker): the receiving side maps the segment."""
        if not isinstance(payload, Packed):  # inline, or in-band
            return unpickled(payload)
        mm = mapping(payload[1], payload[2])
        return self._unpack(payload, mm, returns.died.append, returns.names)

    def new_name(self, who: str) -> str:
        """A fresh segment name of this transport (its prefix, ``who``, a counter)."""
        self._counter += 1
        return f"/{self.prefix}{who}{self._counter:x}"

    def size_class(self, nbytes: int) -> int:
        """The segment size that holds ``nbytes``."""
        # Powers of two up to 64 MiB, then 16 MiB steps: few distinct sizes
        # (so segments get reused), without doubling huge ones.
        if nbytes <= self.min_segment_bytes:
            return self.min_segment_bytes
        if nbytes <= 64 << 20:
            return 1 << (nbytes - 1).bit_length()
        step = 16 << 20
        return -(-nbytes // step) * step

    def _warn_full(self) -> None:
        if not self._warned:
            self._warned = True
            logs.logger.warning("/dev/shm is full: large items and results now travel through "
                           "the pipe (slower)")
            warnings.warn(
                "/dev/shm is full: large items and results now travel through the pipe "
                "(slower); give the container more shared memory (e.g. docker run "
                "--shm-size=1g) to restore the fast path",
                ResourceWarning,
                stacklevel=4,
            )

    # ---------------------------------------------------------- caller side
    def prepare(self) -> None:
        if self.available and not self.reserve_names:
            # Workers that register their own segments must share the caller's
            # tracker: one started inside a worker would "clean up" segments
            # still in flight. Where the caller registers every name (the
            # engine), the first name it registers starts the tracker.
            shm.ensure_tracker()

    def encode_cfg(self, cfg: Any) -> Any:
        return self._encode(cfg, self._caller.cfg_segment, self._warn_full)[0]

    def encode_items(self, worker: int, items: list[Any]) -> tuple[Any, int]:
        size = inline_size(items)
        if size is not None:
            return items, size  # plain: its message's pickle carries it
        caller = self._caller
        return self._encode(items, lambda nbytes: caller.lend(worker, nbytes), self._warn_full)

    def decode_results(self, worker: int, payload: Any) -> list[Any]:
        caller = self._caller
        return self._decode(payload, lambda name, size: caller.adopt(worker, name, size),
                            caller.returns)

    def discard(self, worker: int, payload: Any) -> None:
        if isinstance(payload, Packed):
            self._caller.discard(worker, payload[1], payload[2])

    def item_payload_done(self, worker: int, payload: Any) -> None:
        if isinstance(payload, Packed):
            self._caller.items_done(payload[1])

    def feedback(self, worker: int) -> CallerFeedback | None:
        if not self.available:
            return None
        return self._caller.feedback(worker)

    def on_worker_feedback(self, worker: int, data: WorkerFeedback) -> None:
        self._caller.on_feedback(worker, data)
        if data.full:
            self._warn_full()

    def idle(self) -> None:
        if self.available:
            self._caller.idle()

    def worker_gone(self, worker: int) -> None:
        self._caller.worker_gone(worker)

    def cleanup(self) -> None:
        if not self.available:
            return
        self._caller.cleanup()
        shm.sweep(self.prefix)

    # ---------------------------------------------------------- worker side
    def bind_worker(self, worker_index: int) -> None:
        self._worker.index = worker_index

    def decode_cfg(self, payload: Any) -> Any:
        if not isinstance(payload, Packed):
            return pickle.loads(payload)
        data, name, size, layout, data_span = payload
        # Copy-on-write, never watched: this worker's cfg is its own for good.
        mm = shm.open_existing(name, size, private=True)
        view = memoryview(mm)
        if data_span is not None:
            data = bytes(view[data_span[0] : data_span[0] + data_span[1]])
        return pickle.loads(data, buffers=[view[off : off + n] for off, n in layout])

    def decode_items(self, payload: Any) -> list[Any]:
        worker = self._worker
        return self._decode(payload, worker.map, worker.returns)

    def encode_results(self, results: list[Any]) -> tuple[Any, int]:
        size = inline_size(results)
        if size is not None:
            return results, size  # plain: its message's pickle carries it
        worker = self._worker
        return self._encode(results, worker.results_segment, worker.on_full)

    def on_feedback(self, data: CallerFeedback) -> None:
        self._worker.on_feedback(data)

    def worker_feedback(self) -> WorkerFeedback | None:
        return self._worker.feedback()
