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
  dead workers left behind.

:class:`SharedMemoryTransport`, the default, pickles with protocol 5 and moves
every large out-of-band buffer (NumPy arrays, anything that pickles through
``PickleBuffer``) into one POSIX shared-memory segment per chunk instead of
through the pipe. The worker writes the buffers once; the consumer maps the
segment, unlinks its name at once and hands out arrays that *view* it, so the
memory is freed exactly when the last such array is garbage-collected and
there is no name left to leak. NumPy is never imported here: arrays pickle
themselves, and unpickling imports NumPy only when a result holds one.

Leak safety: each segment is registered with multiprocessing's resource
tracker by the worker and unregistered by the consumer once unlinked, so if
the whole process family is SIGKILLed the tracker still removes what was in
flight; on Linux, :meth:`cleanup` also sweeps ``/dev/shm`` for this runner's
name prefix after workers were killed mid-write.

A torch back-end overrides this seam with a transport that pickles through
``torch.multiprocessing``'s reducers (tensors shared by torch itself).
"""

from __future__ import annotations

import mmap
import os
import pickle
import secrets
import sys
from typing import Any, List, Tuple

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
    """Large out-of-band buffers go through one shared-memory segment per chunk.

    Args:
        threshold (int): buffers smaller than this many bytes stay in the
            pickle; a segment costs a few system calls, a pipe ~1 GB/s.
    """

    threshold = 64 * 1024

    def __init__(self, threshold: int = None) -> None:
        if threshold is not None:
            self.threshold = threshold
        # Names carry a per-runner token so the consumer can find (and sweep)
        # exactly its own segments, and restarts never collide with old names.
        self.prefix = f"ecp-{secrets.token_hex(4)}-"
        self._worker_prefix = self.prefix + "x-"
        self._counter = 0

    @property
    def available(self) -> bool:
        """bool: whether this platform has POSIX shared memory."""
        return _posixshmem is not None

    def prepare(self) -> None:
        if self.available:
            # Forked workers must share the caller's tracker; one started
            # lazily inside a worker would "clean up" segments still in flight.
            resource_tracker.ensure_running()

    def bind_worker(self, worker_index: int) -> None:
        self._worker_prefix = f"{self.prefix}{worker_index}-"
        self._counter = 0

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
        if not buffers:
            return data, len(data)
        name, layout = self._write_segment(buffers)
        return (data, name, layout), len(data) + sum(n for _, n in layout)

    def _write_segment(self, buffers: List[memoryview]) -> Tuple[str, List[Tuple[int, int]]]:
        layout = []
        offset = 0
        for raw in buffers:
            layout.append((offset, raw.nbytes))
            offset += -(-raw.nbytes // _ALIGN) * _ALIGN
        name = f"/{self._worker_prefix}{self._counter:x}"
        self._counter += 1
        fd = _posixshmem.shm_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        try:
            # Registered before it holds data, so a crash from here on is still
            # cleaned up by the tracker when the process family is gone.
            resource_tracker.register(name, "shared_memory")
            os.ftruncate(fd, max(offset, 1))
            if sys.platform.startswith("linux"):
                # pwrite beats mmap + memcpy on tmpfs: no page faults to take.
                for (off, _), raw in zip(layout, buffers):
                    _pwrite_all(fd, raw, off)
            else:  # macOS shared memory only supports mmap
                with mmap.mmap(fd, offset) as mm:
                    for (off, n), raw in zip(layout, buffers):
                        mm[off : off + n] = raw
        finally:
            os.close(fd)
        return name, layout

    def decode(self, payload: Any) -> List[Any]:
        if not isinstance(payload, tuple):
            return pickle.loads(payload)
        data, name, layout = payload
        total = layout[-1][0] + layout[-1][1]
        fd = _posixshmem.shm_open(name, os.O_RDWR, mode=0o600)
        try:
            mm = mmap.mmap(fd, total)
        finally:
            os.close(fd)
            # The mapping keeps the memory alive; the name is no longer needed,
            # and dropping it now means nothing can leak from here on.
            self._unlink(name)
        view = memoryview(mm)
        return pickle.loads(data, buffers=[view[off : off + n] for off, n in layout])

    def discard(self, payload: Any) -> None:
        if isinstance(payload, tuple):
            self._unlink(payload[1])

    def cleanup(self) -> None:
        if not self.available or not os.path.isdir(_SHM_DIR):
            return
        try:
            names = os.listdir(_SHM_DIR)
        except OSError:
            return
        for entry in names:
            if entry.startswith(self.prefix):
                self._unlink("/" + entry)

    @staticmethod
    def _unlink(name: str) -> None:
        try:
            _posixshmem.shm_unlink(name)
        except FileNotFoundError:
            return
        resource_tracker.unregister(name, "shared_memory")


def _pwrite_all(fd: int, raw: memoryview, offset: int) -> None:
    done = 0
    while done < raw.nbytes:
        done += os.pwrite(fd, raw[done:], offset + done)
