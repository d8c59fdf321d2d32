"""Writes to object storage that land whole or not at all.

An fsspec file commits what was written when it is closed, also when it is closed by
the `with` block of an exception: the partial object is then stored. `AtomicWriter`
commits only on a clean close and throws the upload away otherwise.

Three ways to stage the bytes, chosen by the file system:

- local files (`file://`): easycore's own local writer (`.local_write`), as for plain
  paths: a temporary file beside the target (a symbolic link is followed, never
  replaced), renamed into place, or for `x` modes hard-linked, so that of writers racing
  to create one file exactly one wins (fsspec's local files stage only `w` modes, in
  the system's temporary folder, and replace links);
- stores whose files honour `autocommit=False` (s3fs, gcsfs, adlfs) stream as usual; a
  multipart upload is completed (`commit()`) only on a clean close and aborted
  (`discard()`) otherwise;
- any other store: the bytes go to a local temporary file, uploaded with `put_file` on
  a clean close and deleted otherwise.
"""

import contextlib
import errno
import io
import os
import tempfile
from _thread import allocate_lock
from typing import IO, Any, Callable

from . import local_write

__all__ = ["AtomicWriter", "open_atomic"]

# File systems whose files stage their bytes until commit() when opened with
# autocommit=False (by class name along the MRO: no import of the back-ends).
_STAGING = frozenset({"S3FileSystem", "GCSFileSystem", "AzureBlobFileSystem"})
_TEXT_ARGS = ("encoding", "errors", "newline")
# threading's lock type from the built-in module behind it: importing threading is not light
_EXCLUSIVE_UPLOADS = allocate_lock()


def stages_writes(fs: Any) -> bool:
    """Whether `fs`'s files keep written bytes out of the store until `commit()`."""
    return any(klass.__name__ in _STAGING for klass in type(fs).__mro__)


def is_local(fs: Any) -> bool:
    """Whether `fs` is fsspec's local file system (`file://`, `local://`)."""
    return any(klass.__name__ == "LocalFileSystem" for klass in type(fs).__mro__)


def open_atomic(
    fs: Any, fspath: str, mode: str, on_error: Callable[[BaseException], OSError], **kwargs: Any
) -> "AtomicWriter":
    """Open `fspath` of `fs` for writing (`w`, `wb`, `x`, `xb`), committed on clean close.

    Args:
        fs: an fsspec file system.
        fspath (str): the path in `fs` (protocol stripped).
        mode (str): a write mode; text modes take `encoding`, `errors`, `newline`.
        on_error (callable): turns a back-end error into the `OSError` to raise.
        kwargs: text arguments, and other arguments for `fs.open`.

    Returns:
        AtomicWriter: a file-like object; close it (or leave its `with` block cleanly)
        to store the object.
    """
    text_args = {name: kwargs.pop(name) for name in _TEXT_ARGS if name in kwargs}
    binary_mode = mode.replace("t", "").replace("b", "") + "b"
    exclusive = "x" in mode
    try:
        if is_local(fs):
            if exclusive and os.path.lexists(fspath):
                raise FileExistsError(errno.EEXIST, "the file exists", fspath)
            fd, tmp, target = local_write.stage(fspath)
            raw: Any = open(fd, "wb")  # noqa: SIM115 (the AtomicWriter returned owns it)
            commit = lambda: local_write.commit(tmp, target, exclusive)  # noqa: E731
            abandon = lambda: local_write.discard(tmp)  # noqa: E731
        elif stages_writes(fs):
            raw = fs.open(fspath, binary_mode, autocommit=False, **kwargs)
            commit, abandon = raw.commit, raw.discard
        else:
            fd, staged = tempfile.mkstemp(prefix="easycore-upload-", suffix=".part")
            raw = open(fd, "wb")  # noqa: SIM115 (the AtomicWriter returned owns it)
            commit = _uploader(fs, staged, fspath, exclusive)
            abandon = lambda: local_write.discard(staged)  # noqa: E731
    except Exception as exc:  # noqa: BLE001 (any back-end's error, reported naming the URL)
        raise on_error(exc) from None
    stream: IO = raw if "b" in mode else io.TextIOWrapper(raw, **text_args)
    return AtomicWriter(raw, stream, commit, abandon, on_error)


def _uploader(fs: Any, staged: str, fspath: str, exclusive: bool) -> Callable[[], None]:
    def upload() -> None:
        try:
            if not exclusive:
                fs.put_file(staged, fspath)
                return
            # A store without conditional writes: checked again just before the upload,
            # under a lock of this process. That makes `x` exact for a store that lives
            # in the process (memory://) and narrows the window for other processes.
            with _EXCLUSIVE_UPLOADS:
                fs.invalidate_cache(fspath)
                if fs.exists(fspath):
                    raise FileExistsError(errno.EEXIST, "the object exists", fspath)
                fs.put_file(staged, fspath)
        finally:
            local_write.discard(staged)

    return upload


class AtomicWriter:
    """A file open for writing whose object appears only on a clean close.

    Leaving a `with` block by an exception, or calling
    [`discard`][easycore.common.path.fsspec_write.AtomicWriter.discard], throws what was
    written away; [`close`][easycore.common.path.fsspec_write.AtomicWriter.close] stores
    it. Everything else (`write`, `flush`, `tell`, ...) is the underlying file's.
    """

    def __init__(
        self,
        raw: Any,
        stream: IO,
        commit: Callable[[], None],
        abandon: Callable[[], None],
        on_error: Callable[[BaseException], OSError],
    ) -> None:
        self._raw = raw
        self._stream = stream
        self._commit = commit
        self._abandon_staged = abandon
        self._on_error = on_error
        self._done = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __iter__(self) -> Any:
        return iter(self._stream)

    def __enter__(self) -> "AtomicWriter":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()

    def __del__(self) -> None:
        # Never closed: whatever was written is not what the writer meant to store.
        if not getattr(self, "_done", True):
            self.discard()

    @property
    def closed(self) -> bool:
        """Whether the file was closed (stored) or discarded."""
        return self._done

    def write(self, data: Any) -> int:
        """Write `data` (bytes in binary modes, str in text modes)."""
        try:
            return self._stream.write(data)
        except Exception as exc:
            if isinstance(exc, (TypeError, ValueError)):
                raise
            raise self._on_error(exc) from None

    def close(self) -> None:
        """Store what was written: complete the upload, upload or rename the staged file."""
        if self._done:
            return
        self._done = True
        try:
            self._stream.close()  # flushes text into raw and raw's last part to the store
            self._commit()
        except BaseException as exc:
            self._abandon()
            if isinstance(exc, Exception):
                raise self._on_error(exc) from None
            raise

    def discard(self) -> None:
        """Throw away what was written; the store is left as it was."""
        if self._done:
            return
        self._done = True
        self._abandon()

    def _abandon(self) -> None:
        # Close first (with autocommit=False that stores nothing), then throw the staged
        # bytes away: abort a multipart upload, or delete a local temporary file.
        # Broad on purpose: any back-end's error here must not mask why the write is
        # abandoned. Closing may fail (e.g. the store went away): nothing was committed
        # either way; nor is anything after the close, so the abort is tidiness only.
        with contextlib.suppress(Exception):
            self._raw.close()
        with contextlib.suppress(Exception):
            self._abandon_staged()
