"""POSIX shared-memory segments: create, map, release, sweep.

The same primitive ``multiprocessing.shared_memory`` uses (``shm_open`` and
``mmap``), without its object per segment, so that a transport can keep
mappings open across chunks and reuse them (fresh shared memory costs a page
fault and a zeroed page per 4 KiB on first touch, more than the copy itself).

Three rules make segments safe:

* **Space is reserved when a segment is made** (``posix_fallocate``): on a
  full ``/dev/shm`` (Docker's default is 64 MB) creating the segment fails
  with [`SharedMemoryFull`][easycore.common.parallel.transport.shm.SharedMemoryFull],
  which the transport handles by sending that chunk through the pipe instead,
  rather than a worker dying of ``SIGBUS`` when it first writes a page that
  tmpfs cannot back.
* **Only the caller unlinks.** Workers may be killed at any instant; the caller
  is not. A segment's name is registered with multiprocessing's resource
  tracker *before* the segment exists, so that if the whole process family is
  killed the tracker still removes it, and unregistered by the caller when it
  unlinks it. Where the caller outlives its workers, it registers the names
  its workers will make ([`reserve`][easycore.common.parallel.transport.shm.reserve]):
  a worker killed after the registration and before ``shm_open`` then leaves a
  name the caller knows and forgets, instead of one the tracker would report
  "leaked" (and fail to unlink) when the program ends. The caller also makes
  each reserved name's segment, empty, and the worker only sizes it: once the
  name is removed (the caller released it, or the tracker did after the
  caller was killed) no process can make that segment any more, so a worker
  that gets there a moment after its caller died leaves nothing behind.
* **Idle memory goes back at once**: [`release`][easycore.common.parallel.transport.shm.release]
  can truncate a free segment before unlinking it, which gives its pages back
  even while a worker still maps it (that worker is told to unmap it and
  never touches it again).

Names carry the caller's pid and a per-activation token
(``ecp-<pid>-<token>-...``), so [`sweep`][easycore.common.parallel.transport.shm.sweep]
can remove exactly one activation's leftovers on Linux, where names are files
in ``/dev/shm``.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import sys
import weakref

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable

__all__ = [
    "AVAILABLE",
    "BufferView",
    "SegmentVanished",
    "SharedMemoryFull",
    "create",
    "exists",
    "made",
    "make_prefix",
    "open_existing",
    "release",
    "reserve",
    "sweep",
    "unmake",
]

_SHM_DIR = "/dev/shm"


class _DevShmFiles:
    """``shm_open`` and ``shm_unlink`` as glibc makes them, for an interpreter without
    CPython's private ``_posixshmem``: on Linux a segment is the file of its name in
    ``/dev/shm``, opened with ``O_NOFOLLOW | O_CLOEXEC``."""

    @staticmethod
    def _path(name: str) -> str:
        base = name.lstrip("/")
        if not base or "/" in base:
            raise OSError(errno.EINVAL, f"invalid shared-memory name {name!r}")
        return os.path.join(_SHM_DIR, base)

    @staticmethod
    def shm_open(name: str, flags: int, mode: int = 0o777) -> int:
        flags |= os.O_NOFOLLOW | os.O_CLOEXEC
        return os.open(_DevShmFiles._path(name), flags, mode)

    @staticmethod
    def shm_unlink(name: str) -> None:
        os.unlink(_DevShmFiles._path(name))


class _Untracked:
    """Where multiprocessing has no resource tracker: names go untracked. The caller
    still releases every segment; only a process family killed outright leaves its
    segments behind."""

    @staticmethod
    def register(name: str, rtype: str) -> None:
        pass

    unregister = register

    @staticmethod
    def ensure_running() -> None:
        pass


_posixshmem: Any
try:  # POSIX shared memory, as multiprocessing.shared_memory uses it
    import _posixshmem  # type: ignore[no-redef]
except ImportError:  # not CPython; on Windows everything travels in-band through the pipe
    _posixshmem = _DevShmFiles if sys.platform.startswith("linux") and os.path.isdir(
        _SHM_DIR) else None
_resource_tracker: Any = None


def _tracker() -> Any:
    """multiprocessing's ``resource_tracker`` module, imported on first use.

    Imported late because a short script that never makes a segment should
    not pay for it (with ``multiprocessing.spawn`` and ``runpy`` behind it,
    about 1 ms). Also this module's ``resource_tracker`` attribute.
    """
    global _resource_tracker
    if _resource_tracker is None:
        try:
            # register, unregister and ensure_running: the module's __all__, not documented
            from multiprocessing import resource_tracker as tracker
        except ImportError:
            tracker = _Untracked  # type: ignore[assignment]
        _resource_tracker = tracker
    return _resource_tracker


if TYPE_CHECKING:
    resource_tracker: Any
else:

    def __getattr__(name: str) -> Any:  # PEP 562: ``shm.resource_tracker``, imported when asked
        if name == "resource_tracker":
            return _tracker()
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: whether this platform has POSIX shared memory
AVAILABLE = _posixshmem is not None
# Mapping a segment that already holds data: fault its pages in with one call
# (Linux) rather than one page fault per 4 KiB as the copy walks through it.
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


# Whether this process started the resource tracker or registered a name with it
# through this module; a process forked afterwards inherits both the tracker's
# pipe and this flag, one forked before has neither.
_tracker_here = False


def ensure_tracker() -> None:
    """Start multiprocessing's resource tracker now, if it is not running.

    Needed by a process whose children register names of their own: they
    must report to this process's tracker, not start one each. A tracker is
    a whole interpreter to start, so the engine, which registers every name
    its workers use itself, leaves it to the first name it registers.
    """
    _tracker().ensure_running()
    tracker_shared()


def tracker_shared() -> None:
    """Record that this process reports to its family's resource tracker.

    Called where that is known: after this module started or used the tracker,
    and in a worker that ``spawn`` or ``forkserver`` started (the standard
    library hands each one its caller's tracker). See
    [`has_tracker`][easycore.common.parallel.transport.shm.has_tracker].
    """
    global _tracker_here
    _tracker_here = True


def has_tracker() -> bool:
    """Whether names registered here reach a tracker this process family shares.

    True in a process that started the tracker, registered a name or asked
    for the tracker's identity through this module, in a process forked from
    one after that, and in a worker started with ``spawn`` or ``forkserver``.
    False in a worker forked before its caller had a tracker, which must then
    register nothing itself: a tracker it started would end with it and
    remove segments still in flight.

    Returns:
        bool:
    """
    return _tracker_here


def _register(name: str) -> None:
    _tracker().register(name, "shared_memory")  # starts the tracker if needed
    tracker_shared()


class SharedMemoryFull(OSError):
    """``/dev/shm`` has no room for a new segment (or shared memory is unavailable)."""


def make_prefix(tag: str = "ecp") -> str:
    """A fresh name prefix for one activation: ``<tag>-<pid>-<token>-``.

    Short, because macOS allows 31 characters per name.

    Args:
        tag (str): what made the segments (``"ecp"``: easycore-parallel).

    Returns:
        str:
    """
    return f"{tag}-{os.getpid():x}-{os.urandom(3).hex()}-"


def reserve(name: str) -> None:
    """Register a name another process will make a segment of, and hold it (caller only).

    The name's segment is made here, empty: the other process
    [`create`][easycore.common.parallel.transport.shm.create]s it with
    ``register=False``, which only sizes it. Made there instead, a worker that
    got to ``shm_open`` just after its caller was killed (and the resource
    tracker had removed the caller's names) made a segment nobody would
    remove. The caller then
    [`release`][easycore.common.parallel.transport.shm.release]s the name
    whether or not the other process used it.

    Args:
        name (str): the POSIX name, ``/`` first.
    """
    if AVAILABLE:
        _register(name)
        try:
            os.close(_posixshmem.shm_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600))
        except BaseException:
            _tracker().unregister(name, "shared_memory")
            raise


def create(name: str, size: int, *, register: bool = True) -> mmap.mmap:
    """Create, reserve and map a new segment of ``size`` bytes.

    Args:
        name (str): the POSIX name, ``/`` first.
        size (int): bytes; the whole size is reserved (``posix_fallocate``).
        register (bool): register the name with the resource tracker first;
            False for a name another process
            [`reserve`][easycore.common.parallel.transport.shm.reserve]d, whose
            (empty) segment this only sizes, and whose registration is that
            process's to remove, on failure too: on failure the segment is
            left empty, its name still usable.

    Returns:
        mmap.mmap: a shared, writable mapping of the whole segment.

    Raises:
        SharedMemoryFull: no room left in ``/dev/shm``.
        SegmentVanished: a reserved name was released first (its process
            closed or died); no segment was made.
    """
    if not AVAILABLE:
        raise SharedMemoryFull(errno.ENOSYS, "no POSIX shared memory on this platform")
    # Registered before it exists: a process killed at any point from here on
    # (a worker whose caller was SIGKILLed dies with it) leaves nothing the
    # tracker does not remove once the process family is gone. Registered
    # after shm_open, a kill between the two leaked the segment.
    if register:
        _register(name)
    try:
        fd = _posixshmem.shm_open(
            name, os.O_CREAT | os.O_EXCL | os.O_RDWR if register else os.O_RDWR, mode=0o600)
    except FileExistsError:
        raise  # someone's segment, which its creator registered: the name stays
    except BaseException as exc:
        if register:
            _tracker().unregister(name, "shared_memory")
        elif isinstance(exc, FileNotFoundError):  # no O_CREAT: a reserved name, released
            raise SegmentVanished(
                errno.ENOENT,
                f"shared-memory name {name!r} was released before process {os.getpid()} "
                "made its segment: the process that reserved it closed or died",
            ) from None
        raise
    try:
        try:
            _reserve(fd, size)
            return mmap.mmap(fd, size)
        except OSError as exc:
            if register:
                _unlink(name)
            else:  # reserved: the name stays, empty, for its process to reuse or release
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
            if exc.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
                raise SharedMemoryFull(
                    exc.errno, f"no room in {_SHM_DIR} for {size} bytes"
                ) from exc
            raise
    finally:
        os.close(fd)


def _reserve(fd: int, size: int) -> None:
    os.ftruncate(fd, size)
    if hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            # Filesystems without fallocate keep the sparse file (as before).
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise


class SegmentVanished(FileNotFoundError):
    """A segment's name was removed before this process could open it."""


def _what(name: str) -> str:
    """What a segment of ``name`` holds, from the names easycore gives them."""
    base = name.lstrip("/")
    if base.startswith("ecs-") and base.endswith("-p"):
        return "the workers' item slots"
    parts = base.split("-")
    role = parts[3][:1] if len(parts) > 3 else ""
    return {"g": "the cfg", "c": "items or results the caller lent",
            "w": "a worker's results"}.get(role, "data in flight")


def open_existing(name: str, size: int, *, private: bool = False) -> mmap.mmap:
    """Map an existing segment.

    Args:
        name (str): the POSIX name.
        size (int): bytes to map from the start.
        private (bool): a copy-on-write mapping: writes stay in this process.

    Returns:
        mmap.mmap:

    Raises:
        SegmentVanished: the name is gone (a ``FileNotFoundError`` that says
            which segment vanished, and what it held).
    """
    try:
        fd = _posixshmem.shm_open(name, os.O_RDWR, mode=0o600)
    except FileNotFoundError:
        owner = name.lstrip("/").split("-")
        pid = f" (owned by pid {int(owner[1], 16)})" if len(owner) > 2 and _is_hex(
            owner[1]) else ""
        raise SegmentVanished(
            errno.ENOENT,
            f"shared-memory segment {name!r}{pid}, holding {_what(name)}, vanished before "
            f"process {os.getpid()} could open it: its name was removed from {_SHM_DIR} "
            "(by the process that made it, as it closed, or by something that deletes "
            f"{_SHM_DIR} entries)",
        ) from None
    try:
        if private:  # no populate: that would copy every page for this process
            return mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE)
        return mmap.mmap(fd, size, flags=mmap.MAP_SHARED | _POPULATE)
    finally:
        os.close(fd)


def made(name: str) -> bool:
    """Whether a segment of ``name`` exists and was sized (a reserved name's is empty until then).

    Args:
        name (str): the POSIX name.

    Returns:
        bool:
    """
    return bool(_size(name))


def unmake(name: str) -> None:
    """Give a reserved name's memory back and keep the name, empty, for another segment.

    For the process that made a segment under a name another process
    [`reserve`][easycore.common.parallel.transport.shm.reserve]d, when the
    segment will not be used after all; never raises (a name already gone
    stays gone).

    Args:
        name (str): the POSIX name.
    """
    with contextlib.suppress(OSError):
        _empty(name)


def exists(name: str) -> bool:
    """Whether a segment of ``name`` exists now.

    Args:
        name (str): the POSIX name.

    Returns:
        bool:
    """
    return _size(name) is not None


def _size(name: str) -> int | None:
    """A segment's size in bytes; None: no such name."""
    try:
        fd = _posixshmem.shm_open(name, os.O_RDONLY, mode=0o600)
    except FileNotFoundError:
        return None
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _empty(name: str) -> bool:
    """Truncate a segment to nothing: its pages go back at once, even while another
    process maps it (best effort). False: no such name."""
    try:
        fd = _posixshmem.shm_open(name, os.O_RDWR, mode=0o600)
    except FileNotFoundError:
        return False
    try:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)
    return True


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def release(name: str, *, free_now: bool = False, registered: bool = True) -> None:
    """Remove a segment's name (caller only); its memory goes with the last mapping.

    Args:
        name (str): the POSIX name.
        free_now (bool): also give its pages back at once, even while another
            process maps it. Only for segments nobody reads any more: a
            mapping touched after that dies of ``SIGBUS``.
        registered (bool): whether the resource tracker knows the name.
    """
    # Not there: never made, or removed by someone else; a registered name
    # still goes below. Not emptied: the memory goes with its last mapping.
    if free_now and not _empty(name) and not registered:
        return  # nothing there, nothing for the tracker to forget
    if not registered:
        # Whether the tracker knows the name is not known here (a sweep's
        # find, another process's segment): unregistering an unknown name
        # makes the tracker print a traceback, registering first is harmless.
        _register(name)
    _unlink(name)


def _unlink(name: str, *, forget: bool = True) -> None:
    # Removed by someone else (something deleting /dev/shm entries): the
    # tracker must still forget it, or at exit it reports it "leaked" and
    # fails to unlink it again.
    with contextlib.suppress(FileNotFoundError):
        _posixshmem.shm_unlink(name)
    if forget:
        _tracker().unregister(name, "shared_memory")


def sweep(prefix: str) -> None:
    """Release every segment whose name starts with ``prefix`` (Linux only).

    Args:
        prefix (str): from [`make_prefix`][easycore.common.parallel.transport.shm.make_prefix].
    """
    for name in _names_with(prefix):
        # Gone meanwhile, or not ours to remove: the sweep goes on.
        with contextlib.suppress(OSError):
            release(name, free_now=True, registered=False)


# ------------------------------------------------------------ watched views
_view_types: dict[int, Any] = {}


def _view_type(size: int) -> Any:
    cls = _view_types.get(size)
    if cls is None:
        # A subclass, so that instances take weak references. One type per
        # segment size, and segment sizes come in few classes.
        import ctypes  # ~2 ms to import: only once a segment's data is read

        cls = _view_types[size] = type("SegmentView", (ctypes.c_char * size,), {})
    return cls


class BufferView:
    """A buffer over a mapping whose death can be watched.

    Arrays unpickled from a segment view the mapping; the mapping stays open
    for reuse, so its own lifetime says nothing. Each use gets a fresh view
    object instead, a ctypes array over the mapping (C code, a few
    microseconds): every buffer handed to ``pickle.loads`` derives from it,
    and when the last array built on them is collected, ``on_free(token)``
    runs. ``on_free`` should be C code (``deque.append``): Python code run
    from a weakref callback would swallow a ``KeyboardInterrupt`` delivered
    while it runs.
    """

    __slots__ = ("_ref", "memory")

    def __init__(self, mm: mmap.mmap, size: int, on_free: Callable[[Any], Any]) -> None:
        view = _view_type(size).from_buffer(mm)
        self._ref = weakref.ref(view, on_free)
        self.memory: memoryview | None = memoryview(view).cast("B")

    @property
    def ref(self) -> weakref.ref:
        """weakref.ref: the token ``on_free`` receives."""
        return self._ref

    def slice(self, offset: int, nbytes: int) -> memoryview:
        """A view of ``nbytes`` at ``offset`` (holds the watched object alive)."""
        assert self.memory is not None
        return self.memory[offset : offset + nbytes]

    def drop(self) -> None:
        """Stop holding the view; only the slices handed out keep it alive."""
        self.memory = None


# ------------------------------------------------------------------ hand-over
# Added for the connection layer (services, Queue): names registered by the
# other side of a connection, whose files this side may have to remove.
def remove_names(prefix: str) -> None:
    """Unlink every segment whose name starts with ``prefix``, telling no tracker (Linux).

    For segments made under names another process registered and releases
    (a service's, a ``Queue`` owner's): that process removes the
    registration, which unregistering here too would remove twice (the
    tracker prints an error for the second).

    Args:
        prefix (str): from [`make_prefix`][easycore.common.parallel.transport.shm.make_prefix].
    """
    for name in _names_with(prefix):
        remove(name)


def _names_with(prefix: str) -> list[str]:
    """The POSIX names of the segments whose name starts with ``prefix`` (Linux only)."""
    if not AVAILABLE or not os.path.isdir(_SHM_DIR):
        return []
    try:
        return ["/" + entry for entry in os.listdir(_SHM_DIR) if entry.startswith(prefix)]
    except OSError:
        return []


def remove(name: str) -> None:
    """Unlink one segment, telling no tracker (see `remove_names`); never raises.

    Args:
        name (str): the POSIX name, ``/`` first.
    """
    if AVAILABLE:
        with contextlib.suppress(OSError):  # gone already: nothing to remove
            _posixshmem.shm_unlink(name)


# Added for the connection layer too: whether the other side of a connection
# shares this process's resource tracker (then either may release a segment).
def tracker_identity() -> tuple[int, int] | None:
    """Which resource tracker this process reports shared memory to.

    Processes of one family share the tracker's pipe (forked, spawned and
    forkserver children inherit it): equal identities mean shared memory may
    be handed over. None where there is no POSIX shared memory.

    Returns:
        tuple or None: ``(st_dev, st_ino)`` of the tracker's pipe.
    """
    if not AVAILABLE:
        return None
    try:
        fd = _tracker().getfd()  # starts the tracker if none runs
        if fd is None:
            return None
        st = os.fstat(fd)
    except (OSError, RuntimeError):  # no tracker (it failed to start): in-band
        return None
    tracker_shared()
    return (st.st_dev, st.st_ino)
