"""[`SharedList`][easycore.common.parallel.SharedList]: a read-only list stored once in
shared memory.

Why: a worker that reads a Python list it inherited under ``fork`` copies it
page by page anyway. Every read of an item writes that item's reference count,
and a written page becomes the worker's own copy (*copy-on-read*): a list of
400,000 small dicts costs each worker about as much private memory as the
list itself, after one pass. Under ``spawn`` and ``forkserver`` the list is
pickled into every worker, with the same result from the start. This is
pytorch#13246 (a ``DataLoader`` over a list "leaks"), and detectron2's answer,
which ``SharedList`` generalises: keep the items *serialised* in one buffer
(the bytes have no reference counts) with an offset table, and unpickle an
item only when it is read.

The segment's layout (native byte order; one machine only):

* a 64-byte header: magic, a state byte (open or released), the item count,
  where the data starts;
* ``count + 1`` offsets (``int64``) into the data, item ``i`` spanning
  ``offsets[i]:offsets[i + 1]``;
* the items, each pickled on its own (protocol 5).

Ownership. The process that builds a ``SharedList`` owns its segment (made and
released with [`transport.shm`][easycore.common.parallel.transport.shm]'s
primitives): the name is registered with multiprocessing's resource tracker,
so a killed owner's process family leaves nothing, and released (unlinked) by
the owner's ``close()``, or when its last reference in the owner goes, or at
the owner's exit. A ``SharedList`` pickles as a small handle (name, size,
count, the owner's pid); a handle maps the segment on first use, without
registering it, so no other process ever removes it. Releasing sets the
header's state byte before the name goes and never shrinks the segment:
handles that still map it raise a clear error on their next read (and unmap
it), never ``SIGBUS``; the memory goes with the last mapping.
"""

from __future__ import annotations

import errno
import io
import mmap
import os
import pickle
import weakref
from array import array
from collections.abc import Sequence
from contextlib import suppress

from ._hints import TypeVar
from .transport import shm

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Iterable, Iterator, Optional, Union, overload

__all__ = ["SharedList"]

T = TypeVar("T")

_PROTOCOL = 5
_MAGIC = b"ecpSLv1\0"
_STATE = 8  # byte offset of the state byte: 0 while the owner keeps the segment
_RELEASED = 1
_HEADER = 64  # magic, state, then count and data start as int64 at 16 and 24
_INT = 8  # bytes per offset

#: This process's mapping of each segment it reads, shared by every handle of
#: that segment here (a handle unpickled per task does not map it again).
_segments: weakref.WeakValueDictionary[str, _Segment] = weakref.WeakValueDictionary()


class _Segment:
    """One process's view of a SharedList's segment (mapped lazily by handles)."""

    __slots__ = ("__weakref__", "count", "data", "finalizer", "gone", "mm", "name", "offsets",
                 "owner", "size", "view")

    def __init__(self, name: str, size: int, count: int, owner: int) -> None:
        self.name = name
        self.size = size
        self.count = count
        self.owner = owner
        self.data = _HEADER + _INT * (count + 1)
        self.mm: Optional[mmap.mmap] = None
        self.view: Optional[memoryview] = None
        self.offsets: Optional[memoryview] = None
        self.finalizer: Optional[weakref.finalize] = None
        #: why it cannot be read here any more (None while it can)
        self.gone: Optional[str] = None

    def map(self, mm: mmap.mmap) -> None:
        self.mm = mm
        view = memoryview(mm).toreadonly()
        self.offsets = view[_HEADER:self.data].cast("q")
        self.view = view

    @property
    def owned(self) -> bool:
        """Whether this process made the segment (a forked child did not)."""
        return self.finalizer is not None and os.getpid() == self.owner

    def load(self, index: int) -> Any:
        view = self.view
        if view is None or view[_STATE]:
            view = self._reopen()
        offsets = self.offsets
        assert offsets is not None
        try:
            return pickle.loads(view[self.data + offsets[index]:self.data + offsets[index + 1]])
        except Exception as exc:
            if self.gone is not None:  # closed by another thread meanwhile
                raise ValueError(f"{self.describe()} {self.gone}") from None
            raise pickle.UnpicklingError(
                f"item {index} of {self.describe()} cannot be unpickled in process "
                f"{os.getpid()}: {type(exc).__name__}: {exc}"
            ) from exc

    def _reopen(self) -> memoryview:
        """The view to read, after a check: map on first use, or raise if released."""
        if self.view is not None:  # the owner released it: unmap here too, then say so
            self.unmap()
            self.gone = f"was released by its owner, process {self.owner}{_RELEASED_BY}"
        if self.gone is not None:
            raise ValueError(f"{self.describe()} {self.gone}")
        try:
            mm = shm.open_existing(self.name, self.size)
        except FileNotFoundError:
            self.gone = (f"no longer exists: its owner, process {self.owner}, released it or "
                         "exited (or it was made on another machine)" + _KEEP_OPEN)
            raise ValueError(f"{self.describe()} {self.gone}") from None
        if mm[:len(_MAGIC)] != _MAGIC or mm[_STATE]:
            mm.close()
            self.gone = f"was released by its owner, process {self.owner}{_RELEASED_BY}"
            raise ValueError(f"{self.describe()} {self.gone}")
        self.map(mm)
        assert self.view is not None
        return self.view

    def unmap(self) -> None:
        """Drop this process's mapping; memoryviews still alive keep it until they go."""
        for view in (self.offsets, self.view):
            if view is not None:
                with suppress(BufferError):  # a slice still alive: freed with it
                    view.release()
        mm, self.mm, self.view, self.offsets = self.mm, None, None, None
        if mm is not None:
            with suppress(BufferError):
                mm.close()

    def close(self) -> None:
        if self.owned:
            assert self.finalizer is not None
            self.finalizer()  # marks it released through the mapping, so before unmap
        self.unmap()
        if self.gone is None:
            self.gone = ("was closed in this process (its close(), or the end of its `with` "
                         "block)")

    def describe(self) -> str:
        return (f"SharedList {self.name.lstrip('/')!r} ({self.count:,} items, made by "
                f"process {self.owner})")


_KEEP_OPEN = (": keep the SharedList open in the process that made it (a reference to it, "
              "or its `with` block around the work) while other processes read it")
_RELEASED_BY = " (its close(), the end of its `with` block, or its last reference gone)" + \
    _KEEP_OPEN


def _release(name: str, mm: mmap.mmap, owner: int) -> None:
    """Release a segment (the owner's finalizer): mark it released, then unlink it.

    Never truncated: a handle still mapping it reads the state byte and raises,
    where a shrunk segment would kill it with ``SIGBUS``.
    """
    if os.getpid() != owner:  # a forked child inherited the finalizer: not its to release
        return
    with suppress(ValueError):  # already unmapped here
        mm[_STATE] = _RELEASED
    shm.release(name)
    with suppress(BufferError):  # a slice still alive: unmapped with it
        mm.close()


def _build(iterable: Iterable[Any]) -> _Segment:
    """Pickle every item once, in one pass, then copy them into a new segment."""
    if not shm.AVAILABLE:
        raise OSError(errno.ENOSYS, "SharedList needs POSIX shared memory (Linux, macOS), "
                      "which this platform does not have")
    buf = io.BytesIO()
    offsets = array("q", [0])
    # One pickler, its memo cleared per item: every item loads on its own, and
    # no bytes object is made per item (a third faster than pickle.dumps each).
    pickler = pickle.Pickler(buf, protocol=_PROTOCOL)
    dump, forget, tell, append = pickler.dump, pickler.clear_memo, buf.tell, offsets.append
    for index, item in enumerate(iterable):
        try:
            dump(item)
        except Exception as exc:
            raise pickle.PicklingError(
                f"SharedList: item {index} ({type(item).__name__}) cannot be pickled: "
                f"{type(exc).__name__}: {exc}") from exc
        forget()
        append(tell())
    count = len(offsets) - 1
    data = _HEADER + _INT * (count + 1)
    size = data + offsets[-1]
    name = "/" + shm.make_prefix() + "l"
    try:
        mm = shm.create(name, size)
    except shm.SharedMemoryFull as exc:
        raise shm.SharedMemoryFull(
            exc.errno, f"SharedList: {count:,} items need {size / 2**20:.1f} MB of shared "
            "memory, more than /dev/shm has room for (Docker: give the container more with "
            "--shm-size)") from exc
    try:
        mm[:len(_MAGIC)] = _MAGIC
        mm[16:32] = array("q", [count, data]).tobytes()
        mm[_HEADER:data] = offsets.tobytes()
        with buf.getbuffer() as payload:
            mm[data:size] = payload
    except BaseException:
        mm.close()
        shm.release(name)
        raise
    finally:
        buf.close()
    segment = _Segment(name, size, count, os.getpid())
    segment.map(mm)
    segment.finalizer = weakref.finalize(segment, _release, name, mm, segment.owner)
    _segments[name] = segment
    return segment


def _attach(name: str, size: int, count: int, owner: int, span: range) -> SharedList[Any]:
    """Unpickle a handle: this process's segment if it has one, else a lazy one."""
    segment = _segments.get(name)
    if segment is None or segment.gone is not None:  # a handle closed here: this one maps anew
        segment = _segments[name] = _Segment(name, size, count, owner)
    shared: SharedList[Any] = SharedList.__new__(SharedList)
    shared._segment = segment
    shared._span = span
    return shared


class SharedList(Sequence[T]):
    """A read-only list stored once in shared memory, read by every worker without a copy.

    Give it an iterable; it pickles each item once (pickle protocol 5) into one
    shared-memory segment beside an offset table, and unpickles an item when
    it is read. The items' bytes have no reference counts, so reading them
    copies nothing into a worker: a forked worker that reads every item of a
    plain list ends up holding a private copy of it (*copy-on-read*), and
    under ``spawn`` or ``forkserver`` the list is copied into each worker
    from the start; with a ``SharedList`` each worker holds only the items it
    is reading. See [Why does memory grow?](../tutorials/parallel.md#why-does-memory-grow).

    It is a ``collections.abc.Sequence``: ``len``, indexing (negative too),
    iteration, ``reversed``, ``in``, ``index`` and ``count``, so it serves as
    a ``torch.utils.data.Dataset`` as it is or as a data set's storage. An
    item read is a new object equal to the original (a dict read twice is
    two dicts); changing it changes nothing shared. A slice is a
    ``SharedList`` too: a view of the same segment (steps included), made
    without copying; ``list(shared[a:b])`` gives a list.

    The process that made it owns the segment; a ``SharedList`` sent to
    another process (an argument, a ``DataLoader``'s data set, a pool
    initializer's argument) pickles as a handle of about 150 bytes that
    maps the segment there, under every start method, and also in a process
    that is not a child of the owner (same machine and user) while the
    owner holds it. The segment is released by the owner's
    [`close`][easycore.common.parallel.SharedList.close] (or the end of its
    ``with`` block), when the owner's last reference to it (views included)
    goes, or when the owner exits; if the owner is killed, multiprocessing's
    resource tracker removes it once the owner's process family is gone.
    After the release, reading it anywhere raises ``ValueError`` naming it.

    Args:
        iterable (Iterable): the items; read once. Each must pickle.

    Raises:
        pickle.PicklingError: an item cannot be pickled (the message names its
            index and type); nothing is left in shared memory.
        OSError: ``/dev/shm`` has no room for the items (Docker: ``--shm-size``),
            or the platform has no POSIX shared memory.

    Examples:
        ```python
        from easycore.common.parallel import SharedList

        items = SharedList({"id": i, "file": f"{i:06d}.jpg"} for i in range(1000))
        print(items[-1], len(items[::2]))  # {'id': 999, 'file': '000999.jpg'} 500
        items.close()
        ```
    """

    __slots__ = ("_segment", "_span")

    _segment: _Segment
    _span: range

    def __init__(self, iterable: Iterable[T]) -> None:
        self._segment = _build(iterable)
        self._span = range(self._segment.count)

    # ------------------------------------------------------------ sequence
    def __len__(self) -> int:
        return len(self._span)

    if TYPE_CHECKING:  # what a type checker sees
        @overload
        def __getitem__(self, index: int) -> T: ...

        @overload
        def __getitem__(self, index: slice) -> SharedList[T]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[T, SharedList[T]]:
        if isinstance(index, slice):
            return self._view(self._span[index])
        try:
            position = self._span[index]
        except IndexError:
            raise IndexError(f"SharedList index {index} out of range: it has "
                             f"{len(self._span):,} items") from None
        except TypeError:
            raise TypeError("SharedList indices must be integers or slices, not "
                            f"{type(index).__name__}") from None
        value: T = self._segment.load(position)
        return value

    def __iter__(self) -> Iterator[T]:
        load = self._segment.load
        for position in self._span:
            yield load(position)

    def __reversed__(self) -> Iterator[T]:
        load = self._segment.load
        for position in reversed(self._span):
            yield load(position)

    def _view(self, span: range) -> SharedList[T]:
        view: SharedList[T] = SharedList.__new__(SharedList)
        view._segment = self._segment  # keeps the owner's segment alive
        view._span = span
        return view

    # ------------------------------------------------------------ lifetime
    @property
    def closed(self) -> bool:
        """bool: whether this process closed it (or found it released by its owner)."""
        return self._segment.gone is not None

    @property
    def nbytes(self) -> int:
        """int: the size of the shared segment (header, offsets and every item's bytes),
        which views share."""
        return self._segment.size

    def close(self) -> None:
        """Release the shared memory; idempotent.

        In the process that made it, this releases the segment for every
        process (views and handles included: their next read raises
        ``ValueError``). Elsewhere it unmaps the segment in this process only.
        """
        self._segment.close()

    def __enter__(self) -> SharedList[T]:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # ------------------------------------------------------------ pickling
    def __reduce__(self) -> tuple:
        segment = self._segment
        if segment.gone is not None:
            raise ValueError(f"cannot pickle {segment.describe()}: it {segment.gone}")
        return _attach, (segment.name, segment.size, segment.count, segment.owner, self._span)

    def __copy__(self) -> SharedList[T]:
        return self  # read-only: a copy would be the same items

    def __deepcopy__(self, memo: dict) -> SharedList[T]:
        return self

    def __repr__(self) -> str:
        segment = self._segment
        total = segment.count
        span = self._span
        if span == range(total):
            what = f"{total:,} items"
        elif span:
            step = f" step {span.step}" if span.step != 1 else ""
            what = f"{len(span):,} of {total:,} items: {span[0]} to {span[-1]}{step}"
        else:
            what = f"0 of {total:,} items"
        state = "closed, " if segment.gone is not None else ""
        size = (f"{segment.size / 2**20:.1f} MB" if segment.size >= 2**20
                else f"{segment.size / 2**10:.1f} kB")
        return (f"<SharedList: {what}, {state}{size} shared as {segment.name.lstrip('/')!r}, "
                f"owner {segment.owner}>")
