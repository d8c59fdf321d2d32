"""How items, results and ``cfg`` cross between the caller and its workers.

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
* **No leaks**: every segment is registered with multiprocessing's resource
  tracker by its creator, only the caller unlinks, and ``cleanup()`` also
  sweeps ``/dev/shm`` for this activation's name prefix, to catch segments a
  killed worker made but never reported (see [`shm`][easycore.common.parallel.shm]).

Subclasses change *what* goes out of band by overriding
[`dumps`][easycore.common.parallel.SharedMemoryTransport.dumps] (easycore-torch
reduces CPU tensors to a buffer over their bytes).
"""

from __future__ import annotations

import os
import pickle
import warnings
from collections import deque
from typing import Any, Dict, List, Optional, Tuple

from . import shm
from .pickling import dumps_data

__all__ = ["Transport", "PickleTransport", "SharedMemoryTransport"]

_ALIGN = 64  # cache-line aligned buffers, as NumPy prefers
_HIGHEST = pickle.HIGHEST_PROTOCOL


class Transport:
    """Interface of a transport; see the module docstring for who calls what."""

    # ------------------------------------------------------------ caller side
    def prepare(self) -> None:
        """In the caller's process, before any worker starts."""

    def encode_items(self, worker: int, items: List[Any]) -> Tuple[Any, int]:
        """A chunk of inputs as a picklable payload for ``worker``.

        Args:
            worker (int): index of the worker that gets the chunk.
            items (list): the inputs.

        Returns:
            tuple: ``(payload, nbytes)``, nbytes being the data moved.
        """
        data = dumps_data(items, _HIGHEST)
        return data, len(data)

    def decode_results(self, worker: int, payload: Any) -> List[Any]:
        """The result list back from a worker's payload.

        Args:
            worker (int): the worker that sent it.
            payload (Any): what ``encode_results`` made.

        Returns:
            list:
        """
        return pickle.loads(payload)

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

    def decode_items(self, payload: Any) -> List[Any]:
        """In the worker: the items of a chunk."""
        return pickle.loads(payload)

    def encode_results(self, results: List[Any]) -> Tuple[Any, int]:
        """In the worker: a chunk's results as a payload.

        Args:
            results (list): one per item.

        Returns:
            tuple: ``(payload, nbytes)``.
        """
        data = dumps_data(results, _HIGHEST)
        return data, len(data)

    def on_feedback(self, data: Any) -> None:
        """In the worker: what ``feedback`` returned (never None)."""

    def worker_feedback(self) -> Any:
        """In the worker: data for the caller with the next message; None for nothing."""
        return None


class PickleTransport(Transport):
    """Everything pickled in-band through the pipe (the classic way)."""


class _Segment:
    """The caller's record of one segment."""

    __slots__ = ("name", "size", "mm", "worker", "state")

    def __init__(self, name: str, size: int, mm: Any, worker: int, state: str) -> None:
        self.name = name
        self.size = size
        self.mm = mm  # the caller's mapping, or None until it needs one
        self.worker = worker  # whose free list it joins when released
        # "free" | "items" (lent to the worker) | "granted" (the worker may write
        # its results there) | "results" (the caller's arrays view it)
        self.state = state


class _Packed(tuple):
    """A payload that travels partly in a segment: (data, name, size, layout, data_span)."""

    __slots__ = ()


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

    def __init__(self, threshold: Optional[int] = None) -> None:
        if threshold is not None:
            self.threshold = int(threshold)
        self.prefix = shm.make_prefix(self.tag)
        self._init_state()

    def _init_state(self) -> None:
        self._counter = 0
        self._warned = False
        # caller side
        self._segs: Dict[str, _Segment] = {}
        self._free: Dict[int, List[_Segment]] = {}
        self._granted: Dict[int, List[_Segment]] = {}
        self._unmap: Dict[int, List[str]] = {}  # names a worker should unmap
        self._revoke: set = set()  # workers whose grants were taken back
        self._returned: deque = deque()  # weakrefs of result views that died
        self._watch: Dict[int, Tuple[Any, str]] = {}  # id(weakref) -> (weakref, name)
        self._cfg_segment: Optional[str] = None
        self._big_results: set = set()  # workers whose results came in a segment
        # worker side
        self._index = -1
        self._maps: Dict[str, Any] = {}  # name -> mapping
        self._grants: List[Tuple[str, int]] = []
        self._lent_inputs: deque = deque()  # weakrefs of item views that died
        self._input_watch: Dict[int, Tuple[Any, str]] = {}
        self._created: List[Tuple[str, int]] = []
        self._unused: List[str] = []  # grants handed back
        self._full = False

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
    def dumps(self, obj: Any) -> Tuple[bytes, List[memoryview], Any]:
        """Pickle ``obj``, large buffers out of band.

        Override to send more kinds of objects out of band.

        Args:
            obj (Any):

        Returns:
            tuple: ``(pickle bytes, out-of-band buffers, keepalive)``;
            ``keepalive`` holds temporaries the buffers point into until copied.
        """
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

        return dumps_data(obj, 5, out_of_band, restart=buffers.clear), buffers, None

    def _pack(self, obj: Any, segment_for: Any) -> Tuple[Any, int]:
        """Pickle ``obj``; big parts into the segment ``segment_for(nbytes)`` returns."""
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
        for (off, n), raw in zip(layout, buffers):
            mm[off : off + n] = raw  # the only copy the data makes
        if data_span is not None:
            mm[data_span[0] : data_span[0] + data_span[1]] = data
        del keepalive
        return _Packed((None if data_span else data, name, size, layout, data_span)), total

    def _unpack(self, payload: Any, mm: Any, on_free: Any, watch: Dict[int, Any]) -> Any:
        data, name, size, layout, data_span = payload
        view = shm.BufferView(mm, size, on_free)
        # Keyed by id: the view is unhashable; the entry keeps the ref alive.
        watch[id(view.ref)] = (view.ref, name)
        if data_span is not None:
            data = view.slice(*data_span)
        buffers = [view.slice(off, n) for off, n in layout]
        view.drop()
        return pickle.loads(data, buffers=buffers)

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
                stacklevel=3,
            )

    # ---------------------------------------------------------- caller side
    def prepare(self) -> None:
        if self.available:
            # Forked workers must share the caller's tracker; one started
            # lazily inside a worker would "clean up" segments still in flight.
            shm.resource_tracker.ensure_running()

    def encode_cfg(self, cfg: Any) -> Any:
        if not self.available:
            return super().encode_cfg(cfg)

        def segment_for(nbytes: int) -> Tuple[str, int, Any]:
            name = self._new_name("g")
            mm = shm.create(name, nbytes)
            self._cfg_segment = name
            return name, nbytes, mm

        payload, _ = self._pack(cfg, segment_for)
        if self._full:
            self._full = False
            self._warn_full()
        return payload

    def encode_items(self, worker: int, items: List[Any]) -> Tuple[Any, int]:
        if not self.available:
            return super().encode_items(worker, items)
        used: List[_Segment] = []

        def segment_for(nbytes: int) -> Tuple[str, int, Any]:
            seg = self._take_free(worker, nbytes)
            if seg is None:
                name = self._new_name("c")
                size = self._size_class(nbytes)
                seg = _Segment(name, size, shm.create(name, size), worker, "items")
                self._segs[name] = seg
            seg.state = "items"
            if seg.mm is None:
                seg.mm = shm.open_existing(seg.name, seg.size)
            used.append(seg)
            return seg.name, seg.size, seg.mm

        payload, nbytes = self._pack(items, segment_for)
        if self._full:
            self._full = False
            self._warn_full()
        return payload, nbytes

    def _take_free(self, worker: int, nbytes: int) -> Optional[_Segment]:
        free = self._free.get(worker)
        if not free:
            return None
        fits = [s for s in free if s.size >= nbytes]
        if not fits:
            return None
        best = min(fits, key=lambda s: s.size)
        free.remove(best)
        return best

    def decode_results(self, worker: int, payload: Any) -> List[Any]:
        if not isinstance(payload, _Packed):
            return pickle.loads(payload)
        name, size = payload[1], payload[2]
        self._big_results.add(worker)
        seg = self._segs.get(name)
        if seg is None:  # made by the worker: now the caller's
            seg = self._segs[name] = _Segment(name, size, None, worker, "results")
        else:
            self._remove_grant(seg)
        seg.state = "results"
        if seg.mm is None:
            seg.mm = shm.open_existing(name, size)
        return self._unpack(payload, seg.mm, self._returned.append, self._watch)

    def _remove_grant(self, seg: _Segment) -> None:
        granted = self._granted.get(seg.worker)
        if granted and seg in granted:
            granted.remove(seg)

    def discard(self, worker: int, payload: Any) -> None:
        if isinstance(payload, _Packed):
            name, size = payload[1], payload[2]
            seg = self._segs.get(name)
            if seg is None:
                seg = self._segs[name] = _Segment(name, size, None, worker, "free")
            else:
                self._remove_grant(seg)
            self._make_free(seg)

    def item_payload_done(self, worker: int, payload: Any) -> None:
        if isinstance(payload, _Packed):
            seg = self._segs.get(payload[1])
            if seg is not None and seg.state == "items":
                self._make_free(seg)

    def _make_free(self, seg: _Segment) -> None:
        seg.state = "free"
        free = self._free.setdefault(seg.worker, [])
        free.append(seg)
        while len(free) > self.max_free_per_worker:
            self._retire(free.pop(0))

    def _retire(self, seg: _Segment) -> None:
        """Give a free segment's memory back now; the worker unmaps it later."""
        self._segs.pop(seg.name, None)
        self._unmap.setdefault(seg.worker, []).append(seg.name)
        self._close(seg)
        shm.release(seg.name, free_now=True)

    @staticmethod
    def _close(seg: _Segment) -> None:
        if seg.mm is not None:
            try:
                seg.mm.close()
            except BufferError:  # still viewed: dropped with its last view
                pass
            seg.mm = None

    def _collect_returns(self) -> None:
        returned, watch = self._returned, self._watch
        while returned:
            entry = watch.pop(id(returned.popleft()), None)
            seg = self._segs.get(entry[1]) if entry is not None else None
            if seg is not None and seg.state == "results":
                self._make_free(seg)

    def feedback(self, worker: int) -> Any:
        if not self.available:
            return None
        self._collect_returns()
        unmap = self._unmap.pop(worker, None)
        grants = None
        granted = self._granted.setdefault(worker, [])
        # Only to a worker whose results use segments: grants given to one
        # that returns small results sit unused while its inputs need segments.
        free = self._free.get(worker) if worker in self._big_results else None
        while free and len(granted) < self.grants_per_worker:
            seg = max(free, key=lambda s: s.size)
            free.remove(seg)
            seg.state = "granted"
            granted.append(seg)
            if grants is None:
                grants = []
            grants.append((seg.name, seg.size))
        revoke = worker in self._revoke
        if revoke:
            self._revoke.discard(worker)
        if unmap is None and grants is None and not revoke:
            return None
        return (grants, unmap, revoke)

    def on_worker_feedback(self, worker: int, data: Any) -> None:
        released, unused, full = data
        for name in released:  # inputs the worker no longer views
            seg = self._segs.get(name)
            if seg is not None and seg.state == "items":
                self._make_free(seg)
        for name in unused:  # grants the worker handed back
            seg = self._segs.get(name)
            if seg is not None and seg.state == "granted":
                self._remove_grant(seg)
                self._make_free(seg)
        if full:
            self._warn_full()

    def idle(self) -> None:
        if not self.available:
            return
        self._collect_returns()
        # Grants are idle too: the worker writes into one only while it runs a
        # chunk, and it reads this revocation (with the next chunk) first.
        for worker, granted in self._granted.items():
            if granted:
                self._revoke.add(worker)
            for seg in granted:
                seg.state = "free"
                self._free.setdefault(worker, []).append(seg)
            granted.clear()
        for free in self._free.values():
            free.sort(key=lambda s: s.size)
            kept = 0
            for seg in list(free):
                if kept + seg.size <= self.idle_keep_bytes:
                    kept += seg.size
                    continue
                free.remove(seg)
                self._retire(seg)

    def worker_gone(self, worker: int) -> None:
        # Its mappings died with it: whatever it held is free memory now.
        for seg in list(self._segs.values()):
            if seg.worker == worker and seg.state in ("items", "granted", "free"):
                self._remove_grant(seg)
                if seg in self._free.get(worker, ()):
                    self._free[worker].remove(seg)
                self._retire(seg)
        self._unmap.pop(worker, None)
        self._granted.pop(worker, None)
        self._revoke.discard(worker)
        self._big_results.discard(worker)

    def cleanup(self) -> None:
        if not self.available:
            return
        self._collect_returns()
        for seg in list(self._segs.values()):
            # Result arrays the caller still holds keep their memory until they
            # die (unlinking only removes the name); nothing else reads the rest.
            viewed = seg.state == "results"
            try:
                if not viewed:
                    self._close(seg)
                shm.release(seg.name, free_now=not viewed)
            except Exception:
                pass  # the sweep below still removes it
        self._segs.clear()
        self._free.clear()
        self._granted.clear()
        self._unmap.clear()
        self._watch.clear()
        self._returned.clear()
        if self._cfg_segment is not None:
            # Workers map it copy-on-write: its pages may still back theirs.
            shm.release(self._cfg_segment)
            self._cfg_segment = None
        shm.sweep(self.prefix)

    # ---------------------------------------------------------- worker side
    def bind_worker(self, worker_index: int) -> None:
        self._index = worker_index

    def decode_cfg(self, payload: Any) -> Any:
        if not isinstance(payload, _Packed):
            return pickle.loads(payload)
        data, name, size, layout, data_span = payload
        mm = shm.open_existing(name, size, private=True)
        view = memoryview(mm)
        if data_span is not None:
            data = bytes(view[data_span[0] : data_span[0] + data_span[1]])
        return pickle.loads(data, buffers=[view[off : off + n] for off, n in layout])

    def decode_items(self, payload: Any) -> List[Any]:
        if not isinstance(payload, _Packed):
            return pickle.loads(payload)
        name, size = payload[1], payload[2]
        mm = self._maps.get(name)
        if mm is None:
            mm = self._maps[name] = shm.open_existing(name, size)
        return self._unpack(payload, mm, self._lent_inputs.append, self._input_watch)

    def encode_results(self, results: List[Any]) -> Tuple[Any, int]:
        if not self.available:
            return super().encode_results(results)
        return self._pack(results, self._result_segment)

    def _result_segment(self, nbytes: int) -> Tuple[str, int, Any]:
        fits = [g for g in self._grants if g[1] >= nbytes]
        if fits:
            name, size = min(fits, key=lambda g: g[1])
            self._grants.remove((name, size))
        else:
            # The pid in the name: a replacement worker (same index) never
            # collides with a name its predecessor made.
            name = self._new_name(f"w{self._index}.{os.getpid():x}-")
            size = self._size_class(nbytes)
            self._maps[name] = shm.create(name, size)
            # Grants too small for results this size will not be used soon.
            self._unused.extend(g[0] for g in self._grants)
            for g in self._grants:
                self._unmap_one(g[0])
            self._grants.clear()
        mm = self._maps.get(name)
        if mm is None:
            mm = self._maps[name] = shm.open_existing(name, size)
        return name, size, mm

    def on_feedback(self, data: Any) -> None:
        grants, unmap, revoke = data
        if revoke:
            self._grants.clear()
        if unmap:
            for name in unmap:
                self._unmap_one(name)
                self._grants = [g for g in self._grants if g[0] != name]
        if grants:
            self._grants.extend(grants)

    def _unmap_one(self, name: str) -> None:
        mm = self._maps.pop(name, None)
        if mm is not None:
            try:
                mm.close()
            except BufferError:  # a user's object still views it: it goes with that
                pass

    def worker_feedback(self) -> Any:
        lent, watch = self._lent_inputs, self._input_watch
        released = []
        while lent:
            entry = watch.pop(id(lent.popleft()), None)
            if entry is not None:
                released.append(entry[1])
        unused, self._unused = self._unused, []
        full, self._full = self._full, False
        if not released and not unused and not full:
            return None
        return (released, unused, full)
