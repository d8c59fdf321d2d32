"""An inter-process queue whose arrays travel through shared memory: `Queue`.

machin's ``SimpleQueue(ctx, copy_tensor)`` and ``torch.multiprocessing.Queue``
for easycore: ``put`` / ``get(timeout)`` / ``qsize`` / ``close``, picklable
into any process of this user on this machine (a `Pool` task's argument, a
`BackgroundTask`'s ``args``, a ``spawn``-ed process, or a pickle file that
an unrelated ``python`` loads), and it never hangs when the other side died.

How it works:

* **Data**: ``put`` pickles the item with the runners' transport
  ([`SharedMemoryTransport`][easycore.common.parallel.SharedMemoryTransport];
  ``TensorTransport`` in the torch variant), which copies every large buffer
  once into a POSIX shared-memory segment; ``get`` maps that segment and
  rebuilds the arrays *on* it (no copy), and the owner removes its name at
  once, so its memory goes with the last array viewing it. Small items
  travel inside the message.
* **Order and room**: the process that made the queue (its *owner*) keeps
  the items' messages (a few hundred bytes each, never the data)
  ([`broker`][easycore.common.parallel.queue.broker]); other processes
  reach it through the connection layer that services use too
  ([`connection`][easycore.common.parallel.connection]: a deadline per
  handshake, one serve loop, no thread per connection)
  ([`remote`][easycore.common.parallel.queue.remote]). ``maxsize`` bounds
  memory: a ``put`` reserves room before it makes a segment, so a producer
  waiting on a full queue holds none.
* **Timeouts**: a ``get``/``put`` timeout bounds the whole call in every
  process, the owner's answer included (the owner stopped with SIGSTOP
  costs the caller its timeout, and what it gave up on is cancelled, not
  lost).
* **Death**: a process whose connection ends without saying goodbye (killed,
  crashed) is recorded: every ``get`` waiting on the empty queue then raises
  [`QueuePeerDiedError`][easycore.common.parallel.QueuePeerDiedError] naming
  its pid, instead of waiting for items that may never come; if no ``get``
  was told (none waited, or the one waiting took the dead producer's last
  item), the next one to find the queue empty is. In other
  processes, a queue whose owner died or closed it raises
  [`QueueClosedError`][easycore.common.parallel.QueueClosedError].
* **No leaks, no lost items**: every segment's name is registered with the
  owner's resource tracker, and only there, from before the segment exists
  (a producer makes segments under names the owner handed it): a process
  of another family that puts and leaves takes nothing with it, and the
  owner's exit reports nothing. ``close()`` frees the items never taken;
  the names a dead producer held go when its connection ends.
"""

from __future__ import annotations

import os
import queue as _stdqueue
import secrets
import socket
import threading
import weakref
from multiprocessing import util

from .._os import interrupts
from ..connection.address import new_socket_address, pid_namespace, services_dir
from ..connection.server import Server
from ..errors import QueueClosedError, QueuePeerDiedError
from ..transport import shm
from ..transport.shared_memory import SharedMemoryTransport
from .broker import Broker
from .remote import ClientEnd

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Optional, Tuple, Type

__all__ = ["Queue", "QueueClosedError", "QueuePeerDiedError"]

Empty = _stdqueue.Empty
Full = _stdqueue.Full

# The owners alive in this process, by token: a queue unpickled where it was
# made is that same queue (thread back-end, or a round trip through a pool).
_OWNED: weakref.WeakValueDictionary[str, Queue] = weakref.WeakValueDictionary()


class Queue:
    """A FIFO queue between processes; arrays through shared memory.

    Make it in one process (its owner, which must outlive the others' use of
    it) and hand it to others by pickling: as a task argument, in a
    ``BackgroundTask``'s ``args``, as an argument of
    ``multiprocessing.Process``, or in a file another program of yours
    loads. Thread-safe in every process.

    Args:
        maxsize (int): items held at most; ``put`` then waits (or raises
            ``queue.Full``) before it makes the item's shared memory. 0: no bound.
        transport (SharedMemoryTransport or None): how items are pickled
            (which buffers go through shared memory); None: the runners'
            default. ``easycore.torch.parallel.Queue`` passes ``TensorTransport``.

    Raises:
        ValueError: a bad ``maxsize``.
        OSError: no Unix-domain sockets on this platform.

    Examples:
        ```python
        import numpy as np
        from easycore.common.parallel import Pool, Queue


        def produce(q, n):
            for i in range(n):
                q.put(np.full(1 << 20, i, dtype=np.uint8))  # 1 MiB each
            return n


        if __name__ == "__main__":
            with Queue(maxsize=4) as q, Pool(2) as pool:
                done = pool.starmap_async(produce, [(q, 3)] * 2, chunksize=1)
                got = sorted(int(q.get(timeout=60)[0]) for _ in range(6))
                assert got == [0, 0, 1, 1, 2, 2] and done.get(60) == [3, 3]
        ```
    """

    def __init__(self, maxsize: int = 0, *,
                 transport: Optional[SharedMemoryTransport] = None) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 0:
            raise ValueError(f"maxsize must be an int >= 0, got {maxsize!r}")
        if not hasattr(socket, "AF_UNIX"):  # pragma: no cover - Windows
            raise OSError("Queue needs Unix-domain sockets, which this platform lacks")
        transport = transport if transport is not None else SharedMemoryTransport()
        # The resource tracker, before any worker starts: the queue's peers
        # register segments of their own, and must all report to this one.
        shm.ensure_tracker()
        transport.prepare()
        prefix = shm.make_prefix("ecq")
        authkey = secrets.token_bytes(32)
        address = new_socket_address(services_dir())
        self._setup(secrets.token_hex(8), maxsize, transport, prefix, authkey, address,
                    (os.getpid(), pid_namespace(), shm.tracker_identity()))
        broker = Broker(maxsize, prefix)
        server = broker.server = Server(broker, address, authkey, name="queue")
        self._broker: Optional[Broker] = broker
        self._end: Optional[ClientEnd] = None
        try:
            # A Ctrl-C in here is held until the finalizer owns the broker: then
            # the queue closes again. (A start that fails leaves nothing behind.)
            with interrupts.deferred():
                server.start()
                _OWNED[self._token] = self
                self._finalizer = util.Finalize(self, broker.close, exitpriority=15)
        except BaseException:
            if getattr(self, "_finalizer", None) is not None:
                self.close()
            raise

    def _setup(self, token: str, maxsize: int, transport: SharedMemoryTransport, prefix: str,
               authkey: bytes, address: str, owner: Tuple[int, Optional[int], Any]) -> None:
        self._token = token
        self._maxsize = maxsize
        self._transport = transport
        self._prefix = prefix
        self._authkey = authkey
        self._address = address
        self._owner = owner  # (pid, pid namespace, resource tracker)
        self._owner_pid = owner[0]
        self._closed = False
        self._lock = threading.Lock()  # making this process's end

    # ------------------------------------------------------------ pickling
    def __reduce__(self) -> Any:
        return (_rebuild, (type(self), self._token, self._address, self._authkey,
                           self._prefix, self._owner, self._maxsize, self._transport))

    @property
    def _local(self) -> Optional[Broker]:
        """The broker, in the owner's process (a forked child has a copy: not its own)."""
        return self._broker if os.getpid() == self._owner_pid else None

    def _client(self) -> ClientEnd:
        """This process's connections to the owner (made on first use)."""
        end = self._end
        if end is not None:
            return end
        with self._lock:
            if self._end is not None:
                return self._end
            pid, pidns, tracker = self._owner
            shared = tracker is not None and tracker == shm.tracker_identity()
            end = self._end = ClientEnd(self._address, self._authkey, pid, pidns, self._prefix,
                                        self._transport, self._maxsize, shared)
            # Goodbye when this end is collected or its process exits normally
            # (the exit of a multiprocessing child runs these, not atexit):
            # only a process that ends without it counts as dead for the owner.
            util.Finalize(self, end.close, exitpriority=15)
            return end

    # ------------------------------------------------------------ public API
    def put(self, item: Any, block: bool = True, timeout: Optional[float] = None) -> None:
        """Add ``item`` at the end.

        Args:
            item (Any): anything picklable; large arrays (tensors with the torch
                variant) are copied once, into shared memory.
            block (bool): wait for room when the queue is full.
            timeout (float or None): the longest wait, for room and for the
                owner's answer (None: as long as it takes).

        Raises:
            queue.Full: no room (``block=False``, or ``timeout`` passed), or
                the owner did not answer within ``timeout``.
            QueueClosedError: the queue was closed, or its owner died.
        """
        self._check_open()
        broker = self._local
        if broker is None:
            self._client().put(item, block, timeout)
            return
        broker.reserve(block, timeout)  # room first, then the item's memory
        try:
            payload, _ = self._transport.pack(item, self._segment_for)
        except BaseException:
            broker.unreserve()
            raise
        broker.commit(payload)

    def _segment_for(self, nbytes: int) -> Tuple[str, int, Any]:
        """A segment for the owner's own put, under a name of the queue's."""
        assert self._broker is not None
        name = self._broker.new_name()
        return name, nbytes, shm.create(name, nbytes)

    def put_nowait(self, item: Any) -> None:
        """``put(item, block=False)``."""
        self.put(item, block=False)

    def get(self, block: bool = True, timeout: Optional[float] = None) -> Any:
        """Remove and return the first item.

        Args:
            block (bool): wait for an item when the queue is empty.
            timeout (float or None): the longest wait, the owner's answer
                included (None: as long as it takes).

        Returns:
            Any: the item; its arrays view shared memory, freed with the last of them.

        Raises:
            queue.Empty: no item (``block=False``, or ``timeout`` passed), or
                the owner did not answer within ``timeout``.
            QueuePeerDiedError: the queue is empty and a process using it
                ended without closing it (see the module docstring).
            QueueClosedError: the queue was closed, or its owner died.
        """
        self._check_open()
        broker = self._local
        if broker is None:
            return self._client().get(block, timeout)
        payload = broker.get(block, timeout)
        segment = SharedMemoryTransport.segment_of(payload)
        if segment is None:
            return self._transport.unpack(payload)
        try:
            mm = shm.open_existing(*segment)
        except FileNotFoundError:  # removed by something else meanwhile
            raise QueueClosedError(f"the segment of an item of {self!r} vanished") from None
        # The name goes now (the memory stays while anything views it): no
        # later crash can leak it.
        shm.release(segment[0])
        return self._transport.unpack(payload, mm)

    def get_nowait(self) -> Any:
        """``get(block=False)``."""
        return self.get(block=False)

    def qsize(self) -> int:
        """Items in the queue now.

        Returns:
            int:
        """
        self._check_open()
        broker = self._local
        if broker is not None:
            return broker.qsize()
        return self._client().qsize()

    def empty(self) -> bool:
        """Whether ``qsize() == 0``."""
        return self.qsize() == 0

    def close(self) -> None:
        """Close this process's end; the owner's close ends the queue for everyone.

        The owner's close wakes every waiting ``get`` and ``put`` (here and in
        other processes: ``QueueClosedError``), frees the items never taken
        and the shared memory of any producer killed mid-``put``. Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        broker = self._local
        if broker is not None:
            self._finalizer.cancel()
            broker.close()
            _OWNED.pop(self._token, None)
        elif self._end is not None:
            self._end.close()

    @property
    def closed(self) -> bool:
        """bool: whether this end was closed."""
        return self._closed

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        role = "owner" if self._local is not None else f"client of pid {self._owner_pid}"
        return f"<Queue {self._prefix.rstrip('-')} {role}{' closed' if self._closed else ''}>"

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosedError(f"{self!r} is closed")


def _rebuild(cls: Type[Queue], token: str, address: str, authkey: bytes, prefix: str,
             owner: Tuple[int, Optional[int], Any], maxsize: int,
             transport: SharedMemoryTransport) -> Queue:
    owned = _OWNED.get(token)
    if owned is not None and os.getpid() == owned._owner_pid:
        return owned
    q = cls.__new__(cls)
    q._setup(token, maxsize, transport, prefix, authkey, address, owner)
    q._broker = None
    q._end = None
    return q

