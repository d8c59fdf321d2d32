"""Writes that run in the background: iopath's `opena`, `async_join` and `async_close`.

`PathManager.opena(path, "w")` opens the file at once (an error of opening raises
there) and returns an [`AsyncWriter`][easycore.common.path.async_writes.AsyncWriter]:
its `write`, `flush` and `close` are queued and return at once; a thread of that path
runs them in the order they were called, so that writes to one path (from one or
several `opena` calls) land in order, and writes to different paths run at the same
time. `PathManager.async_join(*paths)` waits until the writes to those paths (all of
them if none is named) are done and raises the first error one of them met;
`async_close()` is `async_join()` for all.

A path's thread runs only while it has work: nothing is left running once the
writes are done. The threads are not daemons, so a script that never joins still
has its writes finished before the interpreter exits (a writer left open is
closed then too); an error is logged (on the `easycore.common.path` logger) when
it happens, whether or not anyone joins.
"""

import collections
import io
import logging
import os
import sys
import threading
from typing import Any, Callable, Deque, Dict, Iterable, Optional

__all__ = ["AsyncWriter", "join", "submit"]

_logger = logging.getLogger("easycore.common.path")


class _Lane:
    """The queued jobs of one path, and the thread running them (None when idle)."""

    __slots__ = ("error", "jobs", "thread")

    def __init__(self) -> None:
        self.jobs: Deque[Callable[[], None]] = collections.deque()
        self.thread: Optional[threading.Thread] = None
        self.error: Optional[BaseException] = None  # the first since the last join


# One condition for every lane: held only to move a job or a thread in or out.
_cond = threading.Condition()
_lanes: Dict[str, _Lane] = {}


def _forget_in_child() -> None:
    # A forked child has none of the parent's threads: waiting on their lanes would hang.
    global _cond
    _cond = threading.Condition()
    _lanes.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def submit(key: str, job: Callable[[], None]) -> None:
    """Queue `job` on the lane of `key`, starting its thread if it is idle.

    While the interpreter shuts down (a writer closed by the garbage collector at exit)
    no thread can start: the jobs then run here, in order all the same.
    """
    with _cond:
        lane = _lanes.setdefault(key, _Lane())
        lane.jobs.append(job)
        if lane.thread is not None:
            return
        lane.thread = threading.Thread(
            target=_drain, args=(key, lane), name=f"easycore-opena:{key}"
        )
        try:
            if sys.is_finalizing():  # start() would wait forever for the thread
                raise RuntimeError("can't create new thread at interpreter shutdown")
            lane.thread.start()
            return
        except RuntimeError:
            lane.thread = threading.current_thread()
    _drain(key, lane)


def _drain(key: str, lane: _Lane) -> None:
    while True:
        with _cond:
            if not lane.jobs:
                lane.thread = None
                if lane.error is None:
                    del _lanes[key]  # nothing to report: the path is forgotten
                _cond.notify_all()
                return
            job = lane.jobs.popleft()
        try:
            job()
        except BaseException as exc:  # noqa: BLE001 (kept for async_join, and logged now)
            # An OSError of the system's (errno, strerror) names its file when it has one;
            # one made from a message alone would print worse for a filename.
            if isinstance(exc, OSError) and exc.errno is not None and exc.filename is None:
                exc.filename = key
            _logger.error("asynchronous write to %s failed: %r", key, exc)
            with _cond:
                if lane.error is None:
                    lane.error = exc


def join(keys: Optional[Iterable[str]] = None) -> bool:
    """Wait until the lanes of `keys` (all if None) are idle; raise the first error.

    Returns:
        bool: True, when every write succeeded.

    Raises:
        BaseException: the first error a write, a close or a callback of those paths
            met since they were last joined (an `OSError` names the path); the other
            lanes' errors are reported by the next join.
        RuntimeError: called by a callback, for its own path.
    """
    with _cond:
        wanted = list(_lanes) if keys is None else list(keys)
        me = threading.current_thread()
        for key in wanted:
            if key in _lanes and _lanes[key].thread is me:
                raise RuntimeError(
                    f"async_join of {key!r} from its own background thread (a callback) "
                    "would wait for itself forever"
                )
        _cond.wait_for(
            lambda: all(_lanes.get(key) is None or _lanes[key].thread is None for key in wanted)
        )
        errors = []
        for key in wanted:
            lane = _lanes.get(key)
            if lane is not None and lane.thread is None:
                del _lanes[key]
                if lane.error is not None:
                    errors.append(lane.error)
    if errors:
        raise errors[0]
    return True


class AsyncWriter(io.IOBase):
    """A file whose writes run in the background (what `PathManager.opena` returns).

    `write` copies the data and returns its length at once; `flush` and `close` are
    queued after it. `seek`, `tell` and `truncate` are not offered (the position is the
    background thread's). A context manager, as files are.

    Args:
        key (str): the path as its lane knows it (absolute for a local path).
        stream (IO): the file, opened for writing.
        binary (bool): whether `stream` takes bytes (else `str`).
        callback (callable or None): called without arguments in the background, once
            the file is closed, unless a write failed.
    """

    def __init__(
        self,
        key: str,
        stream: Any,
        binary: bool,
        callback: Optional[Callable[[], Any]] = None,
    ) -> None:
        super().__init__()
        self._key = key
        self._stream = stream
        self._callback = callback
        self._binary = binary
        self._failed = False

    @property
    def name(self) -> str:
        """The path being written."""
        return self._key

    def readable(self) -> bool:
        """False: only writes are asynchronous."""
        return False

    def writable(self) -> bool:
        """True."""
        return True

    def write(self, data: Any) -> int:
        """Queue a write of `data` (bytes-like in a binary mode, `str` in a text mode).

        Returns:
            int: the length of `data`, which is now the writer's to write.

        Raises:
            ValueError: the writer is closed.
            TypeError: `data` is not of the mode's kind (checked now, not in the thread).
        """
        if self.closed:
            raise ValueError(f"write to {self._key!r}: the file is closed")
        if self._binary:
            if isinstance(data, str):
                raise TypeError(f"write to {self._key!r}: a binary file takes bytes, not str")
            data = bytes(memoryview(data))  # a copy: the caller may reuse its buffer
        elif not isinstance(data, str):
            raise TypeError(
                f"write to {self._key!r}: a text file takes str, not {type(data).__name__}"
            )
        self._queue(lambda: self._stream.write(data))
        return len(data)

    def flush(self) -> None:
        """Queue a flush of what was written so far."""
        if self.closed:
            raise ValueError(f"flush of {self._key!r}: the file is closed")
        self._queue(self._stream.flush)

    def close(self) -> None:
        """Queue the close of the file, and then the callback; later calls do nothing."""
        if self.closed:
            return
        try:
            super().close()  # queues a flush first, as a file's close flushes
        finally:
            submit(self._key, self._close_stream)

    def _queue(self, operation: Callable[[], Any]) -> None:
        def job() -> None:
            if self._failed:
                return  # after a failed write, later ones would leave a hole
            try:
                operation()
            except BaseException:
                self._failed = True
                raise

        submit(self._key, job)

    def _close_stream(self) -> None:
        self._stream.close()
        if self._callback is not None and not self._failed:
            self._callback()
