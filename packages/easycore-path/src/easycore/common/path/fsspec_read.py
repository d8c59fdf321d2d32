"""`Reader`: an fsspec file open for reading whose errors name the URL.

An fsspec file fetches blocks lazily, so the store can fail in the middle of a `read`
(server gone, connection cut, object replaced: s3fs reads with `If-Match` on the ETag).
The client's exceptions (`botocore`, `aiohttp`) are no `OSError`s and name an endpoint,
not the object; `Reader` says them again as `OSError`s naming the URL. Everything else is
the fsspec file's own: one method call in between, no copy of the bytes.
"""

from typing import Any, Callable, Iterator, List, Optional

__all__ = ["Reader"]

# Raised for misuse (closed file, bad argument), not by the store: passed on unchanged.
_PASS = (ValueError, TypeError, AttributeError, NotImplementedError)


class Reader:
    """A binary file open for reading (duck-typed, as fsspec's own files are io.IOBase)."""

    def __init__(self, raw: Any, on_error: Callable[[BaseException], OSError]) -> None:
        self._raw = raw
        self._on_error = on_error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    @property
    def closed(self) -> bool:
        """Whether the file was closed."""
        return bool(self._raw.closed)

    def _call(self, method: Any, *args: Any) -> Any:
        try:
            return method(*args)
        except _PASS:
            raise
        except Exception as exc:  # noqa: BLE001 (any back-end's error, reported naming the URL)
            raise self._on_error(exc) from None

    def read(self, size: int = -1) -> bytes:
        """Read up to `size` bytes (all that is left if negative)."""
        return self._call(self._raw.read, size)

    def read1(self, size: int = -1) -> bytes:
        """As `read` (fsspec files buffer by blocks already)."""
        return self._call(self._raw.read, size)

    def readinto(self, buffer: Any) -> int:
        """Read into a writable buffer; the number of bytes read."""
        return self._call(self._raw.readinto, buffer)

    def readinto1(self, buffer: Any) -> int:
        """As `readinto`."""
        return self._call(self._raw.readinto, buffer)

    def readline(self, size: Optional[int] = -1) -> bytes:
        """Read one line."""
        return self._call(self._raw.readline, -1 if size is None else size)

    def readlines(self, hint: int = -1) -> List[bytes]:
        """Read the remaining lines."""
        return self._call(self._raw.readlines, hint)

    def seek(self, offset: int, whence: int = 0) -> int:
        """Move to `offset` (fetches nothing by itself)."""
        return self._call(self._raw.seek, offset, whence)

    def tell(self) -> int:
        """The current position."""
        return self._raw.tell()

    def readable(self) -> bool:
        """True."""
        return True

    def writable(self) -> bool:
        """False."""
        return False

    def seekable(self) -> bool:
        """Whether the file can seek (fsspec files can)."""
        return bool(self._raw.seekable())

    def flush(self) -> None:
        """Nothing to flush when reading."""

    def close(self) -> None:
        """Close the file."""
        self._call(self._raw.close)
