"""The segments of the shared-memory transport: who owns, lends, grants, maps and retires them.

[`SharedMemoryTransport`][easycore.common.parallel.SharedMemoryTransport]
encodes and decodes; where segments come from and what happens to them is
the job of two classes here, one per side of the pipe:

* [`CallerSegments`][easycore.common.parallel.transport.segments.CallerSegments]
  (the caller's half) owns every segment: it lends free ones for items,
  grants free ones for a worker's next results, adopts the ones results came
  in, takes them back when their views die, and retires and unlinks them.
* [`WorkerSegments`][easycore.common.parallel.transport.segments.WorkerSegments]
  (a worker's half) maps what it was lent, writes its results into a grant
  (or a segment of its own, which the caller adopts), and reports which of
  its input segments it no longer views.

The two halves talk through the *feedback* that rides on every protocol
message, as two named messages:
[`CallerFeedback`][easycore.common.parallel.transport.segments.CallerFeedback]
(caller to worker: grants, segments to unmap, grants revoked, names reserved)
and [`WorkerFeedback`][easycore.common.parallel.transport.segments.WorkerFeedback]
(worker to caller: input segments returned, grants unused, ``/dev/shm`` full,
names wanted).

No resource tracker is needed before the first segment: the caller
registers every name it and its workers use, and starts reserving names for
a worker once it has a tracker anyway (a segment of its own, ``cfg``, items)
or the worker asks. A worker forked before its caller had a tracker registers
nothing itself: its results travel through the pipe until its names come
(``wants_names``). So a pool of small items never starts a tracker under
``fork``.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque

from .._hints import Protocol
from .._named_tuples import NamedTuple
from . import shm

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any

__all__ = [
    "CallerFeedback",
    "CallerSegments",
    "NoNameYet",
    "Returns",
    "Segment",
    "SegmentSettings",
    "WorkerFeedback",
    "WorkerSegments",
]


class NoNameYet(Exception):
    """A worker has no name to make a segment under yet: this result travels in-band."""


class SegmentSettings(Protocol):
    """What the halves read of their transport (live: the engine tunes ``grants_per_worker``)."""

    grants_per_worker: int
    max_free_per_worker: int
    idle_keep_bytes: int
    reserve_names: bool

    def new_name(self, who: str) -> str:
        """A fresh segment name of this transport, tagged ``who``."""

    def size_class(self, nbytes: int) -> int:
        """The segment size that holds ``nbytes`` (few distinct sizes, so segments get reused)."""


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
    #: results travelled in-band for want of a reserved name: the caller reserves some
    wants_names: bool = False


class Returns:
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


class Segment:
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


class CallerSegments:
    """The caller's half: owns, lends, grants, adopts, takes back and retires segments."""

    def __init__(self, transport: SegmentSettings) -> None:
        self.t = transport  # configuration (read live: the engine tunes grants_per_worker)
        self.segs: dict[str, Segment] = {}
        self.free: dict[int, list[Segment]] = {}
        self.granted: dict[int, list[Segment]] = {}
        self.unmap: dict[int, list[str]] = {}  # names a worker should unmap
        self.revoke: set[int] = set()  # workers whose grants were taken back
        self.returns = Returns()  # result views
        self.cfg_name: str | None = None
        self.big_results: set[int] = set()  # workers whose results came in a segment
        self.want_names: set[int] = set()  # workers that asked for reserved names
        # Names registered for a worker's own next segments (shm.reserve), not
        # yet seen in its results; and those of gone workers that made them.
        self.reserved: dict[int, list[str]] = {}
        self.orphans: set[str] = set()

    # -- where segments come from (encoding) and go to (decoding)
    def cfg_segment(self, nbytes: int) -> tuple[str, int, Any]:
        name = self.t.new_name("g")
        mm = shm.create(name, nbytes)
        self.cfg_name = name
        return name, nbytes, mm

    def lend(self, worker: int, nbytes: int) -> tuple[str, int, Any]:
        """A segment for ``worker``'s items: a free one that fits, or a new one."""
        seg = self._take_free(worker, nbytes)
        if seg is None:
            name = self.t.new_name("c")
            size = self.t.size_class(nbytes)
            seg = Segment(name, size, shm.create(name, size), worker, "items")
            self.segs[name] = seg
        seg.state = "items"
        if seg.mm is None:
            seg.mm = shm.open_existing(seg.name, seg.size)
        return seg.name, seg.size, seg.mm

    def _take_free(self, worker: int, nbytes: int) -> Segment | None:
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
            seg = self.segs[name] = Segment(name, size, None, worker, "results")
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
            seg = self.segs[name] = Segment(name, size, None, worker, "free")
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

    def _remove_grant(self, seg: Segment) -> None:
        granted = self.granted.get(seg.worker)
        if granted and seg in granted:
            granted.remove(seg)

    def _make_free(self, seg: Segment) -> None:
        seg.state = "free"
        free = self.free.setdefault(seg.worker, [])
        free.append(seg)
        while len(free) > self.t.max_free_per_worker:
            self._retire(free.pop(0))

    def _retire(self, seg: Segment) -> None:
        """Give a free segment's memory back now; the worker unmaps it later."""
        self.segs.pop(seg.name, None)
        self.unmap.setdefault(seg.worker, []).append(seg.name)
        self._close(seg)
        shm.release(seg.name, free_now=True)

    @staticmethod
    def _close(seg: Segment) -> None:
        if seg.mm is not None:
            with contextlib.suppress(BufferError):  # still viewed: dropped with its last view
                seg.mm.close()
            seg.mm = None

    # -- the feedback channel
    def feedback(self, worker: int) -> CallerFeedback | None:
        unmap = grants = None
        revoke = False
        # Until a segment exists (every payload so far went in-band, as a
        # kept-alive call's do) there is nothing to grant, unmap or revoke.
        if self.segs or self.unmap or self.revoke:
            self._collect_returns()
            unmap = self.unmap.pop(worker, None)
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
        the tracker; the unused ones are released at ``cleanup``. (Only one
        until a worker's results used a segment was tried: its first chunks
        outran the one name, made their own, and one killed as it registered
        left the tracker a false alarm.)
        """
        if worker not in self.want_names and not shm.has_tracker():
            return None  # no tracker to start for a worker that may never need one
        held = self.reserved.get(worker)
        if held is None:
            held = self.reserved[worker] = []
        want = self.t.grants_per_worker
        if len(held) >= want:
            return None
        new = []
        while len(held) < want:
            name = self.t.new_name(f"w{worker}-")
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
        if data.wants_names:
            self.want_names.add(worker)
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
        if not self.segs:  # none made yet: nothing granted, free or handed out
            return
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
        self.want_names.discard(worker)
        for name in self.reserved.pop(worker, ()):
            if shm.made(name):
                # Made: a message of it not read yet may still name it
                # (adopted then); if not, ``cleanup`` releases it.
                self.orphans.add(name)
            else:  # still empty, and nobody will size it now: the name goes
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


class WorkerSegments:
    """A worker's half: maps what it was lent, writes results into grants, reports returns."""

    def __init__(self, transport: SegmentSettings) -> None:
        self.t = transport
        self.index = -1
        self.maps: dict[str, Any] = {}  # name -> mapping
        self.grants: list[tuple[str, int]] = []
        self.reserved: list[str] = []  # names the caller registered for segments of ours
        self.returns = Returns()  # item views
        self.unused: list[str] = []  # grants handed back
        self.full = False
        self.wants_names = False  # a result went in-band for want of a reserved name

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
            size = self.t.size_class(nbytes)
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
            if self.t.reserve_names and not shm.has_tracker():
                # Forked before the caller had a tracker: one started here
                # would die with this worker, removing segments in flight.
                self.wants_names = True
                raise NoNameYet
            # No name reserved (a service, or more new segments than names
            # before the caller's next message): registered here. The pid in
            # the name: a replacement worker (same index) never collides with
            # a name its predecessor made.
            name = self.t.new_name(f"w{self.index}.{os.getpid():x}-")
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
        wants, self.wants_names = self.wants_names, False
        if not returned and not unused and not full and not wants:
            return None
        return WorkerFeedback(returned, unused, full, wants)
