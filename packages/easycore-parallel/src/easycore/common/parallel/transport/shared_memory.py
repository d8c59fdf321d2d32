"""How items, results and ``cfg`` cross between the caller and its workers.

(One module over 400 lines on purpose: it is the one file that answers "how
do inputs and results travel through shared memory", both halves side by
side.)

A [`Transport`][easycore.common.parallel.Transport] is made in the caller's
process (the runner's ``make_transport`` seam), pickled into every worker,
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
list's pickle. Both transports here do it; the ``cfg`` never travels inline.

[`SharedMemoryTransport`][easycore.common.parallel.SharedMemoryTransport],
the default, pickles with protocol 5 and moves every large out-of-band buffer
(NumPy arrays, anything that pickles through ``PickleBuffer``; CPU tensors
with easycore-torch) into POSIX shared memory instead of the pipe: one copy
on the sending side, none on the receiving side, whose arrays *view* the
segment. What it guarantees:

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
  feedback) and releases each, made or not, so a worker killed between the
  registration and ``shm_open`` leaves nothing the tracker reports "leaked"
  when the program ends. Only for callers that outlive their workers (the
  engine's); services, whose peers may outlive them, let each side register
  its own (``reserve_names = False``).

How it is built: both directions run the same two steps. *Encoding*
(``_encode``) pickles the object once, out-of-band buffers apart, and copies
what is large into a segment that the *sending side* picks; *decoding*
(``_decode``) maps the segment the payload names, on the *receiving side*,
and unpickles over views of it, watching when the last view dies. Only where
segments come from and what happens to them differs, and that is the job of
two classes, one per side:

* ``_CallerSide`` (the caller's half) owns every segment: it lends free ones
  for items, grants free ones for a worker's next results, adopts the ones
  results came in, takes them back when their views die, and retires and
  unlinks them.
* ``_WorkerSide`` (a worker's half) maps what it was lent, writes its
  results into a grant (or a segment of its own, which the caller adopts),
  and reports which of its input segments it no longer views.

The two halves talk through the *feedback* that rides on every protocol
message, as two named messages: ``CallerFeedback`` (caller to worker: grants,
segments to unmap, grants revoked) and ``WorkerFeedback`` (worker to caller:
input segments returned, grants unused, ``/dev/shm`` full).

Subclasses change *what* goes out of band by overriding
[`dumps`][easycore.common.parallel.SharedMemoryTransport.dumps] (easycore-torch
reduces CPU tensors to a buffer over their bytes), and *how* a buffer is
copied into its segment by overriding
[`copy_into`][easycore.common.parallel.SharedMemoryTransport.copy_into]
(easycore-torch copies large ones on torch's threads).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import warnings
from collections import deque
from typing import Any, Callable, NamedTuple

from . import shm
from .inline import inline_size
from .pickling import dumps_data

__all__ = [
    "CallerFeedback",
    "PickleTransport",
    "SharedMemoryTransport",
    "Transport",
    "WorkerFeedback",
]

_ALIGN = 64  # cache-line aligned buffers, as NumPy prefers
_HIGHEST = pickle.HIGHEST_PROTOCOL

#: ``(name, size, mapping)`` of the segment an encoding writes into
SegmentFor = Callable[[int], tuple[str, int, Any]]


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
        return _plain_or_pickled(items)

    def decode_results(self, worker: int, payload: Any) -> list[Any]:
        """The result list back from a worker's payload.

        Args:
            worker (int): the worker that sent it.
            payload (Any): what ``encode_results`` made.

        Returns:
            list:
        """
        return _unpickled(payload)

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
        return _unpickled(payload)

    def encode_results(self, results: list[Any]) -> tuple[Any, int]:
        """In the worker: a chunk's results as a payload.

        Args:
            results (list): one per item.

        Returns:
            tuple: ``(payload, nbytes)``; as for ``encode_items``, a short
            list of plain values is its own payload.
        """
        return _plain_or_pickled(results)

    def on_feedback(self, data: Any) -> None:
        """In the worker: what ``feedback`` returned (never None)."""

    def worker_feedback(self) -> Any:
        """In the worker: data for the caller with the next message; None for nothing."""
        return None


def _plain_or_pickled(values: list[Any]) -> tuple[Any, int]:
    """A list as its own payload when it may travel inline, else its pickle."""
    size = inline_size(values)
    if size is not None:
        return values, size
    data = dumps_data(values, _HIGHEST)
    return data, len(data)


def _unpickled(payload: Any) -> list[Any]:
    """What ``_plain_or_pickled`` made, back."""
    if type(payload) is list:  # it travelled inline, in its message
        return payload
    return pickle.loads(payload)


class PickleTransport(Transport):
    """Everything pickled in-band through the pipe (the classic way)."""


# --------------------------------------------------------------- the messages
class CallerFeedback(NamedTuple):
    """Caller to worker, with its next message: changes to the segments it may use."""

    #: ``(name, size)`` of free segments the worker may write its next results into
    grants: list[tuple[str, int]] | None
    #: segments the caller retired: the worker unmaps them and never uses them again
    unmap: list[str] | None
    #: every grant the worker holds is taken back (the caller went idle)
    revoke: bool
    #: names the caller registered for segments the worker may make (see ``shm.reserve``)
    reserved: list[str] | None = None


class WorkerFeedback(NamedTuple):
    """Worker to caller, with its next message: segments it is done with."""

    #: input segments whose last view died in the worker
    returned: list[str]
    #: grants the worker hands back unused (too small for its results)
    unused: list[str]
    #: ``/dev/shm`` was full: some results travelled in-band
    full: bool


# ----------------------------------------------------------- the mechanism
class _Packed(tuple):
    """A payload that travels partly in a segment: (data, name, size, layout, data_span)."""

    __slots__ = ()


class _Returns:
    """Views of segments handed out by decoding, and which of them came back.

    A segment returns when the last object viewing it dies: the view's
    weakref lands in ``died`` (``deque.append``, C code: see ``shm.BufferView``).
    """

    __slots__ = ("died", "names")

    def __init__(self) -> None:
        self.died: deque = deque()  # weakrefs of views that died
        self.names: dict[int, tuple[Any, str]] = {}  # id(weakref) -> (weakref, name)

    def collect(self) -> list[str]:
        """Names of the segments that came back since the last call."""
        died, names = self.died, self.names
        back = []
        while died:
            entry = names.pop(id(died.popleft()), None)
            if entry is not None:
                back.append(entry[1])
        return back

    def clear(self) -> None:
        self.died.clear()
        self.names.clear()


class _Segment:
    """The caller's record of one segment."""

    __slots__ = ("mm", "name", "size", "state", "worker")

    def __init__(self, name: str, size: int, mm: Any, worker: int, state: str) -> None:
        self.name = name
        self.size = size
        self.mm = mm  # the caller's mapping, or None until it needs one
        self.worker = worker  # whose free list it joins when released
        # "free" | "items" (lent to the worker) | "granted" (the worker may write
        # its results there) | "results" (the caller's arrays view it)
        self.state = state


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
        self._caller = _CallerSide(self)
        self._worker = _WorkerSide(self)

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
        return _Packed((None if data_span else data, name, size, layout, data_span)), total

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
                returns: _Returns) -> Any:
        """Results (caller) or items (worker): the receiving side maps the segment."""
        if not isinstance(payload, _Packed):  # inline, or in-band
            return _unpickled(payload)
        mm = mapping(payload[1], payload[2])
        return self._unpack(payload, mm, returns.died.append, returns.names)

    def _new_name(self, who: str) -> str:
        self._counter += 1
        return f"/{self.prefix}{who}{self._counter:x}"

    def _size_class(self, nbytes: int) -> int:
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
            warnings.warn(
                "/dev/shm is full: large items and results now travel through the pipe "
                "(slower); give the container more shared memory (e.g. docker run "
                "--shm-size=1g) to restore the fast path",
                ResourceWarning,
                stacklevel=4,
            )

    # ---------------------------------------------------------- caller side
    def prepare(self) -> None:
        if self.available:
            # Forked workers must share the caller's tracker; one started
            # lazily inside a worker would "clean up" segments still in flight.
            shm.resource_tracker.ensure_running()

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
        if isinstance(payload, _Packed):
            self._caller.discard(worker, payload[1], payload[2])

    def item_payload_done(self, worker: int, payload: Any) -> None:
        if isinstance(payload, _Packed):
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
        if not isinstance(payload, _Packed):
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

    # ------------------------------------------------ one payload, one reader
    # Added for easycore.common.parallel.Queue (the connection work of issue
    # 35): the Queue picks the segment (under a name its owner registered) and
    # the reader maps it, outside the caller/worker halves above.
    def pack(self, obj: Any, segment_for: SegmentFor) -> tuple[Any, int]:
        """Pickle ``obj``; large buffers go into the segment ``segment_for(nbytes)`` makes.

        Args:
            obj (Any):
            segment_for (callable): ``nbytes -> (name, size, mapping)``, called
                only when something goes out of band.

        Returns:
            tuple: ``(payload, nbytes)``. On a full ``/dev/shm`` the payload is
            in-band (one ``ResourceWarning`` per transport).
        """
        return self._encode(obj, segment_for, self._warn_full)

    @staticmethod
    def segment_of(payload: Any) -> tuple[str, int] | None:
        """``(name, size)`` of the segment a ``pack`` payload lives in; None: in-band."""
        return (payload[1], payload[2]) if isinstance(payload, _Packed) else None

    def unpack(self, payload: Any, mm: Any = None) -> Any:
        """What ``pack`` packed; its arrays view ``mm``, the mapping of ``segment_of(payload)``."""
        if not isinstance(payload, _Packed):
            return pickle.loads(payload)
        return self._unpack(payload, mm, _IGNORE, {})


class _CallerSide:
    """The caller's half: owns, lends, grants, adopts, takes back and retires segments."""

    def __init__(self, transport: SharedMemoryTransport) -> None:
        self.t = transport  # configuration (read live: the engine tunes grants_per_worker)
        self.segs: dict[str, _Segment] = {}
        self.free: dict[int, list[_Segment]] = {}
        self.granted: dict[int, list[_Segment]] = {}
        self.unmap: dict[int, list[str]] = {}  # names a worker should unmap
        self.revoke: set[int] = set()  # workers whose grants were taken back
        self.returns = _Returns()  # result views
        self.cfg_name: str | None = None
        self.big_results: set[int] = set()  # workers whose results came in a segment
        # Names registered for a worker's own next segments (shm.reserve), not
        # yet seen in its results; and those of gone workers that made them.
        self.reserved: dict[int, list[str]] = {}
        self.orphans: set[str] = set()

    # -- where segments come from (encoding) and go to (decoding)
    def cfg_segment(self, nbytes: int) -> tuple[str, int, Any]:
        name = self.t._new_name("g")
        mm = shm.create(name, nbytes)
        self.cfg_name = name
        return name, nbytes, mm

    def lend(self, worker: int, nbytes: int) -> tuple[str, int, Any]:
        """A segment for ``worker``'s items: a free one that fits, or a new one."""
        seg = self._take_free(worker, nbytes)
        if seg is None:
            name = self.t._new_name("c")
            size = self.t._size_class(nbytes)
            seg = _Segment(name, size, shm.create(name, size), worker, "items")
            self.segs[name] = seg
        seg.state = "items"
        if seg.mm is None:
            seg.mm = shm.open_existing(seg.name, seg.size)
        return seg.name, seg.size, seg.mm

    def _take_free(self, worker: int, nbytes: int) -> _Segment | None:
        free = self.free.get(worker)
        if not free:
            return None
        fits = [s for s in free if s.size >= nbytes]
        if not fits:
            return None
        best = min(fits, key=lambda s: s.size)
        free.remove(best)
        return best

    def adopt(self, worker: int, name: str, size: int) -> Any:
        """The mapping of a segment ``worker``'s results came in; the caller's from now on."""
        self.big_results.add(worker)
        seg = self.segs.get(name)
        if seg is None:  # made by the worker: now the caller's
            self._claim(worker, name)
            seg = self.segs[name] = _Segment(name, size, None, worker, "results")
        else:
            self._remove_grant(seg)
        seg.state = "results"
        if seg.mm is None:
            seg.mm = shm.open_existing(name, size)
        return seg.mm

    # -- segments coming back
    def discard(self, worker: int, name: str, size: int) -> None:
        seg = self.segs.get(name)
        if seg is None:
            self._claim(worker, name)
            seg = self.segs[name] = _Segment(name, size, None, worker, "free")
        else:
            self._remove_grant(seg)
        self._make_free(seg)

    def items_done(self, name: str) -> None:
        seg = self.segs.get(name)
        if seg is not None and seg.state == "items":
            self._make_free(seg)

    def _collect_returns(self) -> None:
        for name in self.returns.collect():
            seg = self.segs.get(name)
            if seg is not None and seg.state == "results":
                self._make_free(seg)

    def _remove_grant(self, seg: _Segment) -> None:
        granted = self.granted.get(seg.worker)
        if granted and seg in granted:
            granted.remove(seg)

    def _make_free(self, seg: _Segment) -> None:
        seg.state = "free"
        free = self.free.setdefault(seg.worker, [])
        free.append(seg)
        while len(free) > self.t.max_free_per_worker:
            self._retire(free.pop(0))

    def _retire(self, seg: _Segment) -> None:
        """Give a free segment's memory back now; the worker unmaps it later."""
        self.segs.pop(seg.name, None)
        self.unmap.setdefault(seg.worker, []).append(seg.name)
        self._close(seg)
        shm.release(seg.name, free_now=True)

    @staticmethod
    def _close(seg: _Segment) -> None:
        if seg.mm is not None:
            with contextlib.suppress(BufferError):  # still viewed: dropped with its last view
                seg.mm.close()
            seg.mm = None

    # -- the feedback channel
    def feedback(self, worker: int) -> CallerFeedback | None:
        self._collect_returns()
        unmap = self.unmap.pop(worker, None)
        grants = None
        granted = self.granted.setdefault(worker, [])
        # Only to a worker whose results use segments: grants given to one
        # that returns small results sit unused while its inputs need segments.
        free = self.free.get(worker) if worker in self.big_results else None
        while free and len(granted) < self.t.grants_per_worker:
            seg = max(free, key=lambda s: s.size)
            free.remove(seg)
            seg.state = "granted"
            granted.append(seg)
            if grants is None:
                grants = []
            grants.append((seg.name, seg.size))
        revoke = worker in self.revoke
        if revoke:
            self.revoke.discard(worker)
        reserved = self._reserve(worker) if self.t.reserve_names else None
        if unmap is None and grants is None and not revoke and reserved is None:
            return None
        return CallerFeedback(grants, unmap, revoke, reserved)

    def _reserve(self, worker: int) -> list[str] | None:
        """New names for ``worker``'s own segments, registered now; None if it holds enough.

        As many as grants (the engine makes that its credits plus one): a
        worker runs up to that many chunks, each of which may make one, before
        the name of the first comes back. A few microseconds each, a line to
        the tracker; the unused ones are released at ``cleanup``.
        """
        held = self.reserved.get(worker)
        if held is None:
            held = self.reserved[worker] = []
        want = self.t.grants_per_worker
        if len(held) >= want:
            return None
        new = []
        while len(held) < want:
            name = self.t._new_name(f"w{worker}-")
            shm.reserve(name)
            held.append(name)
            new.append(name)
        return new

    def _claim(self, worker: int, name: str) -> None:
        """A worker's segment came back under a reserved name: a segment like any other now."""
        held = self.reserved.get(worker)
        if held and name in held:
            held.remove(name)
        elif self.orphans:
            self.orphans.discard(name)

    def on_feedback(self, worker: int, data: WorkerFeedback) -> None:
        for name in data.returned:  # inputs the worker no longer views
            seg = self.segs.get(name)
            if seg is not None and seg.state == "items":
                self._make_free(seg)
        for name in data.unused:  # grants the worker handed back
            seg = self.segs.get(name)
            if seg is not None and seg.state == "granted":
                self._remove_grant(seg)
                self._make_free(seg)
            elif seg is None and name in self.reserved.get(worker, ()):
                # A reserved name the worker could not make a segment of
                # (/dev/shm full): gone, and another one comes with the next message.
                self.reserved[worker].remove(name)
                shm.release(name, free_now=True)

    # -- the end of a call, of a worker, of everything
    def idle(self) -> None:
        self._collect_returns()
        # Grants are idle too: the worker writes into one only while it runs a
        # chunk, and it reads this revocation (with the next chunk) first.
        for worker, granted in self.granted.items():
            if granted:
                self.revoke.add(worker)
            for seg in granted:
                seg.state = "free"
                self.free.setdefault(worker, []).append(seg)
            granted.clear()
        for free in self.free.values():
            free.sort(key=lambda s: s.size)
            kept = 0
            for seg in list(free):
                if kept + seg.size <= self.t.idle_keep_bytes:
                    kept += seg.size
                    continue
                free.remove(seg)
                self._retire(seg)

    def worker_gone(self, worker: int) -> None:
        # Its mappings died with it: whatever it held is free memory now.
        for seg in list(self.segs.values()):
            if seg.worker == worker and seg.state in ("items", "granted", "free"):
                self._remove_grant(seg)
                if seg in self.free.get(worker, ()):
                    self.free[worker].remove(seg)
                self._retire(seg)
        self.unmap.pop(worker, None)
        self.granted.pop(worker, None)
        self.revoke.discard(worker)
        self.big_results.discard(worker)
        for name in self.reserved.pop(worker, ()):
            if shm.exists(name):
                # Made: a message of it not read yet may still name it
                # (adopted then); if not, ``cleanup`` releases it.
                self.orphans.add(name)
            else:  # never made, and nobody will now: the tracker forgets it
                shm.release(name)

    def cleanup(self) -> None:
        self._collect_returns()
        for seg in list(self.segs.values()):
            # Result arrays the caller still holds keep their memory until they
            # die (unlinking only removes the name); nothing else reads the rest.
            viewed = seg.state == "results"
            # On failure the caller's sweep of the prefix still removes it.
            with contextlib.suppress(OSError):
                if not viewed:
                    self._close(seg)
                shm.release(seg.name, free_now=not viewed)
        self.segs.clear()
        self.free.clear()
        self.granted.clear()
        self.unmap.clear()
        self.returns.clear()
        # Names registered for workers' segments and never seen in a result:
        # made by a worker killed before it reported them, or never made.
        for names in self.reserved.values():
            self.orphans.update(names)
        self.reserved.clear()
        for name in self.orphans:
            with contextlib.suppress(OSError):
                shm.release(name, free_now=True)
        self.orphans.clear()
        if self.cfg_name is not None:
            # Workers map it copy-on-write: its pages may still back theirs.
            shm.release(self.cfg_name)
            self.cfg_name = None


class _WorkerSide:
    """A worker's half: maps what it was lent, writes results into grants, reports returns."""

    def __init__(self, transport: SharedMemoryTransport) -> None:
        self.t = transport
        self.index = -1
        self.maps: dict[str, Any] = {}  # name -> mapping
        self.grants: list[tuple[str, int]] = []
        self.reserved: list[str] = []  # names the caller registered for segments of ours
        self.returns = _Returns()  # item views
        self.unused: list[str] = []  # grants handed back
        self.full = False

    def map(self, name: str, size: int) -> Any:
        """The mapping of a segment the caller lent (opened once, kept open)."""
        mm = self.maps.get(name)
        if mm is None:
            mm = self.maps[name] = shm.open_existing(name, size)
        return mm

    def on_full(self) -> None:
        self.full = True  # the caller warns, once per runner

    def results_segment(self, nbytes: int) -> tuple[str, int, Any]:
        """A segment for this chunk's results: the smallest grant that fits, or a new one."""
        fits = [g for g in self.grants if g[1] >= nbytes]
        if fits:
            name, size = min(fits, key=lambda g: g[1])
            self.grants.remove((name, size))
        else:
            size = self.t._size_class(nbytes)
            name = self._new_segment(size)
            # Grants too small for results this size will not be used soon.
            self.unused.extend(g[0] for g in self.grants)
            for g in self.grants:
                self._unmap_one(g[0])
            self.grants.clear()
        return name, size, self.map(name, size)

    def _new_segment(self, size: int) -> str:
        """Make a segment of this worker's own; its name."""
        if not self.reserved:
            # No name reserved (a service, or more new segments than names
            # before the caller's next message): registered here. The pid in
            # the name: a replacement worker (same index) never collides with
            # a name its predecessor made.
            name = self.t._new_name(f"w{self.index}.{os.getpid():x}-")
            self.maps[name] = shm.create(name, size)
            return name
        # A name the caller registered: killed at any point from here on, this
        # worker leaves nothing the caller does not release.
        name = self.reserved.pop(0)
        try:
            self.maps[name] = shm.create(name, size, register=False)
        except BaseException:
            self.unused.append(name)  # the caller releases it, and reserves another
            raise
        return name

    def on_feedback(self, data: CallerFeedback) -> None:
        if data.revoke:
            self.grants.clear()
        if data.unmap:
            for name in data.unmap:
                self._unmap_one(name)
                self.grants = [g for g in self.grants if g[0] != name]
        if data.grants:
            self.grants.extend(data.grants)
        if data.reserved:
            self.reserved.extend(data.reserved)

    def _unmap_one(self, name: str) -> None:
        mm = self.maps.pop(name, None)
        if mm is not None:
            # A user's object may still view it: then it goes with that object.
            with contextlib.suppress(BufferError):
                mm.close()

    def feedback(self) -> WorkerFeedback | None:
        returned = self.returns.collect()
        unused, self.unused = self.unused, []
        full, self.full = self.full, False
        if not returned and not unused and not full:
            return None
        return WorkerFeedback(returned, unused, full)


# No one watches an ``unpack``'s views (the segment is the reader's alone):
# C code, as ``shm.BufferView`` asks of its callbacks.
_IGNORE: Callable[[Any], Any] = deque(maxlen=0).append
