"""Tensors through shared memory, both ways.

[`TensorTransport`][easycore.torch.parallel.TensorTransport]: how it works, and why.

How: tensor bytes ride in easycore's shared-memory segments. Items going to a
worker and results coming back are pickled by a pickler that reduces every
CPU tensor to its metadata (dtype, size, stride) plus a ``PickleBuffer`` over
the bytes it spans; those buffers, and NumPy's, are what
[`SharedMemoryTransport`][easycore.common.parallel.SharedMemoryTransport]
copies once into a recycled POSIX shared-memory segment (this class only
overrides its ``dumps``). On the receiving side each tensor is rebuilt *on*
the mapped segment (``torch.frombuffer`` + ``as_strided``): no copy, and the
segment is recycled when the last tensor viewing it is garbage-collected.
Segment recycling, the full-``/dev/shm`` fallback and leak safety are thus
exactly easycore-parallel's.

Why not torch's own sharing (``torch.multiprocessing``'s ForkingPickler
reductions)? Those move each storage into a *fresh* shared-memory file in the
worker (every page zeroed and faulted in anew, which costs more than the copy
itself) and hand its file descriptor over a Unix socket, served by a thread in
the worker, one connection per storage; with the ``file_system`` strategy
names can be left in ``/dev/shm`` by a killed process. Recycled segments skip
the page faults, cost no extra round trip, and inherit easycore-parallel's leak
safety: segments are registered with the resource tracker, unlinked by
``cleanup`` after errors, and swept by name prefix (``ect-`` for torch
runners) if a worker was killed mid-write. ``benchmarks/bench_torch.py``
measures them side by side (2-core shared VM, 8 MB results): this transport
moves tensors at par with easycore-parallel's NumPy arrays (0.94-1.02x the
rate, 1.01-1.08x the CPU per item over runs; what remains is a few tens of
microseconds of per-tensor Python and binding work per result), about 9x the
rate of torch's fd sharing and 20-30x that of pickling tensors by value.

What travels how:

* CPU tensors (``torch.Tensor`` exactly, and the data of an
  ``nn.Parameter``) keep dtype, shape and strides, non-contiguous ones
  included. Only the bytes a tensor spans travel, never the rest of a larger
  storage it views; a sparse view (``x[::100]``) is compacted first, arriving
  contiguous. Each tensor arrives with storage of its own: two views of one
  storage arrive as two independent tensors, as NumPy views do through pickle
  (the same tensor object twice arrives as one object). ``requires_grad`` is
  kept on a leaf; the graph and ``.grad`` are not (as with
  ``torch.multiprocessing``).
* Tensors smaller than ``threshold`` (64 KiB) travel inside the pickle, like
  NumPy arrays: a segment costs more than copying them.
* Anything else (CUDA tensors, sparse, quantized or nested tensors, tensor
  subclasses, tensors with Python attributes) uses its own pickling, in-band:
  correct, not zero-copy (a sparse tensor's indices and values, plain
  tensors, still go out of band). Return CPU tensors from ``producer_work``
  (``.cpu()``); a CUDA tensor would be rebuilt on its GPU *in the caller*
  (through CUDA IPC: use ``Pool(tensor_sharing="torch")`` for that on purpose).
"""

from __future__ import annotations

import copyreg
import ctypes
import functools
import glob
import io
import os
import pickle
import secrets
import shutil
import tempfile
from typing import Any, List, Tuple

import psutil  # a dependency of easycore-parallel
import torch

from easycore.common.parallel import PickleTransport, SharedMemoryTransport
from easycore.common.parallel.extending import names_main, reduce_main

__all__ = ["TensorTransport", "TorchSharingTransport"]

# A memoryview over raw memory, without a ctypes array type per size (ctypes
# caches those forever). Our own prototype, so no global restype is changed.
_memory_from_address = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int
)(("PyMemoryView_FromMemory", ctypes.pythonapi))
_PyBUF_WRITE = 0x200


class TensorTransport(SharedMemoryTransport):
    """CPU tensors (and NumPy arrays) through recycled shared memory, both ways.

    Args:
        threshold (int): tensors and buffers smaller than this many bytes stay
            in the pickle.
    """

    #: name tag of the segments: a leak check can tell torch runners' from others'
    tag = "ect"

    def dumps(self, obj: Any) -> Tuple[bytes, List[memoryview], Any]:
        """Pickle ``obj`` with every large CPU tensor's bytes out of band.

        Args:
            obj (Any):

        Returns:
            tuple: ``(pickle bytes, out-of-band buffers, keepalive)``.
        """
        pickler = self.__dict__.get("_pickler")
        if pickler is None:  # made once per process: never pickled with the transport
            pickler = self._pickler = _TensorPickler(self.threshold)
        if not isinstance(pickler, _MainAwareTensorPickler):
            try:
                data, buffers, keepalive = pickler.pickle(obj)
            except (pickle.PicklingError, AttributeError):
                # e.g. an instance of a class of __main__ that came by value
                return _MainAwareTensorPickler(self.threshold).pickle(obj)
            if not names_main(data):
                return data, buffers, keepalive
            # Data of __main__'s classes: from now on in one pass that also
            # carries them by value (see extending.reduce_main).
            pickler = self._pickler = _MainAwareTensorPickler(self.threshold)
        return pickler.pickle(obj)

    def copy_into(self, mm: Any, offset: int, data: memoryview) -> None:
        """Copy a buffer into a segment; a large one with ``Tensor.copy_``.

        A plain copy runs on one core; torch's splits a large one over its
        intra-op threads (``torch.get_num_threads()``: the worker's thread
        budget), which doubled the rate of an 8 MB copy on two cores.

        Args:
            mm (mmap.mmap): the segment's mapping.
            offset (int): where the buffer goes.
            data (memoryview): the buffer, contiguous bytes.
        """
        n = data.nbytes
        if n < _THREADED_COPY_BYTES or data.readonly or torch.get_num_threads() < 2:
            super().copy_into(mm, offset, data)
            return
        target = torch.frombuffer(mm, dtype=torch.uint8, count=n, offset=offset)
        target.copy_(torch.frombuffer(data, dtype=torch.uint8))
        del target  # releases the segment's buffer export at once


#: buffers at least this large are copied with torch's threads (below, the
#: threads' start-up costs more than they save)
_THREADED_COPY_BYTES = 1 << 20


# ----------------------------------------------------------------- worker side
class _TensorPickler(pickle.Pickler):
    """Protocol 5; every buffer (tensor storages, NumPy data) goes out of band.

    One per worker, reused chunk after chunk. Tensors are found through a
    private ``dispatch_table`` (a dict lookup in C per object), not through
    ``reducer_override`` (a Python call per object); exact ``torch.Tensor``
    only: subclasses pickle themselves, ``nn.Parameter`` through its ``.data``.
    A tensor reduces to ``_rebuild_tensor(PickleBuffer over the bytes it spans,
    dtype, size, stride, requires_grad)``.
    """

    def __init__(self, threshold: int) -> None:
        self._file = io.BytesIO()
        self._buffers: List[memoryview] = []
        self._threshold = threshold
        super().__init__(self._file, protocol=5, buffer_callback=self._out_of_band)
        table = copyreg.dispatch_table.copy()
        table[torch.Tensor] = self._reduce_tensor
        self.dispatch_table = table
        # tensors made here (compacted or resolved views) that buffers point into
        self._keepalive: List[torch.Tensor] = []

    def _out_of_band(self, buf: pickle.PickleBuffer) -> bool:
        try:
            raw = buf.raw()
        except BufferError:  # not contiguous: pickle copies it in-band
            return True
        if raw.nbytes < self._threshold:
            return True
        self._buffers.append(raw)
        return False

    def pickle(self, obj: Any) -> Tuple[bytes, List[memoryview], list]:
        """Pickle ``obj``; return the bytes, the out-of-band buffers, and
        the temporaries those buffers point into (keep them until copied)."""
        try:
            self.dump(obj)
            return self._file.getvalue(), list(self._buffers), self._keepalive
        finally:
            # Forget this chunk: the memo holds references to every object in it.
            self.clear_memo()
            self._file.seek(0)
            self._file.truncate()
            self._buffers.clear()
            self._keepalive = []

    def _reduce_tensor(self, t: torch.Tensor) -> Any:
        # Only the torch calls needed (no storage object, no offset): each is a
        # trip through the binding layer, cache-cold after the previous chunk's
        # copy of megabytes.
        if not t.is_cpu or t.layout is not _STRIDED or t.is_quantized or t.is_nested or t.__dict__:
            return t.__reduce_ex__(5)  # torch's own pickling: in-band, device kept
        requires_grad = t.requires_grad
        if requires_grad:
            t = t.detach()
        dtype = t.dtype
        # Lazy conjugate / negative views: their bytes are not their values yet
        # (the conj bit exists for complex tensors only; the neg bit, from
        # x.conj().imag, on real ones too).
        if (dtype.is_complex and t.is_conj()) or t.is_neg():
            t = t.resolve_conj().resolve_neg()
            self._keepalive.append(t)
        size, stride = tuple(t.shape), t.stride()
        itemsize = dtype.itemsize
        need = itemsize
        for n in size:
            need *= n
        if need == 0:
            return _rebuild_empty, (dtype, size, stride, requires_grad)
        # The bytes from the first element to the last one (strides are >= 0).
        span = (sum((n - 1) * s for n, s in zip(size, stride)) + 1) * itemsize
        if span > 2 * need:  # a sparse view (x[::100]): pack it
            t = t.contiguous()
            self._keepalive.append(t)
            stride, span = t.stride(), need
        view = _memory_from_address(t.data_ptr(), span, _PyBUF_WRITE)
        if span < self._threshold:  # small: a copy inside the pickle beats a segment
            return _rebuild_tensor, (bytearray(view), dtype, size, stride, requires_grad)
        return _rebuild_tensor, (pickle.PickleBuffer(view), dtype, size, stride, requires_grad)


_STRIDED = torch.strided


# ----------------------------------------------------------------- caller side
# Module-level functions: pickle finds them by name on the receiving side.

class _MainAwareTensorPickler(_TensorPickler):
    """The same, for data holding classes or functions of ``__main__``: those go by
    reference and by value, so that a worker that cannot import them still can
    read the data (a ``reducer_override``: a Python call per object, hence not
    the default)."""

    def reducer_override(self, obj: Any) -> Any:
        return reduce_main(obj)


def _rebuild_tensor(
    buffer: Any,
    dtype: torch.dtype,
    size: Tuple[int, ...],
    stride: Tuple[int, ...],
    requires_grad: bool,
) -> torch.Tensor:
    # buffer: a view of the mapped segment (or, in-band, a bytearray). The
    # tensor's storage holds a reference to it, hence to the segment, which
    # returns to its worker when the last tensor on it dies.
    t = torch.frombuffer(buffer, dtype=dtype).as_strided(size, stride)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _rebuild_empty(
    dtype: torch.dtype, size: Tuple[int, ...], stride: Tuple[int, ...], requires_grad: bool
) -> torch.Tensor:
    return torch.empty_strided(size, stride, dtype=dtype, requires_grad=requires_grad)


class TorchSharingTransport(PickleTransport):
    """Tensors through torch's own sharing (``torch.multiprocessing``'s reductions).

    CPU tensors move into shared-memory files handed over as file
    descriptors, CUDA tensors through CUDA IPC (no copy off the GPU: the
    receiving process must be on the same machine and keep within torch's
    rules for CUDA IPC). What ``Pool(tensor_sharing="torch")`` uses.
    """

    #: what a worker's temporary directory is called after (its pid, a token)
    tempdir_tag = "ecpt"

    def __init__(self) -> None:
        super().__init__()
        self._owner = os.getpid()
        self.tempdir_prefix = f"{self.tempdir_tag}-{os.getpid():x}-{secrets.token_hex(3)}-"

    # CPU tensors travel as file descriptors that a worker serves from a
    # listener socket in multiprocessing's temporary directory (pymp-*/
    # listener-*), removed only by a clean exit. A worker killed (a timeout,
    # SIGKILL) left it behind: each worker now makes its own, under a name the
    # caller knows, and the caller removes a dead worker's at once.
    def bind_worker(self, worker_index: int) -> None:
        super().bind_worker(worker_index)
        if os.getpid() == self._owner:
            return  # a service client's copy, in the caller: its directory is its own
        from multiprocessing import process, util

        path = os.path.join(tempfile.gettempdir(),
                            f"{self.tempdir_prefix}w{worker_index}-{os.getpid():x}")
        os.makedirs(path, mode=0o700, exist_ok=True)
        process.current_process()._config["tempdir"] = path  # type: ignore[attr-defined]
        # As multiprocessing does for its own: removed when the worker exits.
        util.Finalize(None, shutil.rmtree, args=(path, True), exitpriority=-100)

    def worker_gone(self, worker: int) -> None:
        super().worker_gone(worker)
        self._sweep(f"w{worker}-")

    def cleanup(self) -> None:
        super().cleanup()
        self._sweep("w")

    def _sweep(self, tail: str) -> None:
        pattern = os.path.join(tempfile.gettempdir(), f"{self.tempdir_prefix}{tail}*")
        for path in glob.glob(pattern):
            # Only the directories of processes that are gone: a copy of this
            # transport cleaned up in a live worker (services) keeps its own.
            try:
                pid = int(path.rsplit("-", 1)[-1], 16)
            except ValueError:
                continue
            if pid != os.getpid() and not psutil.pid_exists(pid):
                shutil.rmtree(path, ignore_errors=True)

    def _dumps(self, obj: Any) -> Tuple[bytes, int]:
        from multiprocessing.reduction import ForkingPickler

        import torch.multiprocessing  # noqa: F401  (registers torch's reductions)

        try:
            data = bytes(ForkingPickler.dumps(obj, pickle.HIGHEST_PROTOCOL))
        except (pickle.PicklingError, AttributeError):
            data = None  # e.g. an instance of a class of __main__ that came by value
        if data is None or names_main(data):
            # classes of __main__ by reference and by value (extending.reduce_main)
            data = bytes(_main_aware(ForkingPickler).dumps(obj, pickle.HIGHEST_PROTOCOL))
        return data, len(data)

    def encode_items(self, worker: int, items: List[Any]) -> Tuple[Any, int]:
        return self._dumps(items)

    def encode_results(self, results: List[Any]) -> Tuple[Any, int]:
        return self._dumps(results)


@functools.cache
def _main_aware(pickler: Any) -> Any:
    """``pickler`` (a class) with ``reduce_main`` as its ``reducer_override``."""

    class MainAware(pickler):
        def reducer_override(self, obj: Any) -> Any:
            return reduce_main(obj)

    return MainAware
