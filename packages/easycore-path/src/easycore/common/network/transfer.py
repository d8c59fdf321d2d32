"""Stream one URL into one file: atomically, with timeouts and bounded retries.

``requests`` and ``tqdm`` are imported inside the functions, so importing this module
(and everything that imports it) stays cheap until a transfer actually happens.
"""

import errno
import os
import secrets
import time
from typing import Callable, Optional, Tuple, TypeVar, Union

from .errors import DownloadError

__all__ = ["DEFAULT_TIMEOUT", "Timeout", "check_timeout", "fetch", "probe"]

#: ``(connect, read)`` seconds, or one number for both, as ``requests`` takes it.
Timeout = Union[float, Tuple[float, float]]

DEFAULT_TIMEOUT: Tuple[float, float] = (10.0, 60.0)
CHUNK_SIZE = 1 << 20

# Ask for the bytes as stored: Content-Length then counts what we write to disk.
_HEADERS = {"Accept-Encoding": "identity"}

T = TypeVar("T")


def fetch(
    url: str,
    dst: str,
    *,
    progress: bool = True,
    timeout: Timeout = DEFAULT_TIMEOUT,
    max_attempts: int = 3,
    backoff: float = 0.5,
    chunk_size: int = CHUNK_SIZE,
) -> str:
    """Download ``url`` to the file ``dst``, which appears only once it is complete.

    The body is streamed into a temporary file next to ``dst`` and renamed into place
    with :func:`os.replace` once its length matches ``Content-Length``. Whatever fails,
    the temporary file is removed and ``dst`` is left untouched.

    Args:
        url (str): an ``http://`` or ``https://`` URL. TLS certificates are verified.
        dst (str): the file to create or replace. Its directory must exist.
        progress (bool): draw a tqdm progress bar on stderr.
        timeout (float or tuple): ``(connect, read)`` timeouts in seconds.
        max_attempts (int): tries in all; connection errors, timeouts, cut bodies and
            5xx/408/429 answers are tried again after ``backoff * 2**k`` seconds.
        backoff (float): seconds to wait before the first retry; doubles each time.
        chunk_size (int): bytes read from the socket at a time.

    Returns:
        str: ``dst``.

    Raises:
        DownloadError: naming the URL (and the HTTP status, if any).
    """
    check_timeout(timeout)
    import requests

    def once() -> str:
        return _fetch_once(session, url, dst, progress, timeout, chunk_size)

    with requests.Session() as session:
        return _with_retries(once, url, max_attempts, backoff)


def probe(
    url: str,
    *,
    timeout: Timeout = DEFAULT_TIMEOUT,
    max_attempts: int = 3,
    backoff: float = 0.5,
) -> int:
    """Ask a server for the status of ``url`` without downloading its body.

    Sends ``HEAD`` (following redirects) and falls back to the headers of a ``GET`` when
    the server refuses ``HEAD``.

    Args:
        url (str): an ``http://`` or ``https://`` URL.
        timeout (float or tuple): ``(connect, read)`` timeouts in seconds.
        max_attempts (int): tries in all for transient failures, as in :func:`fetch`.
        backoff (float): seconds before the first retry; doubles each time.

    Returns:
        int: the final HTTP status code (below 500).

    Raises:
        DownloadError: when no answer arrives or the server keeps failing (5xx).
    """
    check_timeout(timeout)
    import requests

    def once() -> int:
        try:
            response = session.head(url, allow_redirects=True, timeout=timeout, headers=_HEADERS)
            if response.status_code in (405, 501):
                response = session.get(url, stream=True, timeout=timeout, headers=_HEADERS)
                response.close()
        except requests.RequestException as exc:
            raise _as_download_error(url, exc) from exc
        if _is_transient_status(response.status_code):
            raise DownloadError(url, response.reason or "error", response.status_code, True)
        return response.status_code

    with requests.Session() as session:
        return _with_retries(once, url, max_attempts, backoff)


def check_timeout(timeout: Timeout) -> None:
    """Refuse a missing or non-positive timeout: a transfer must never wait forever.

    Args:
        timeout (float or tuple): ``(connect, read)`` seconds, or one number for both.

    Raises:
        ValueError: ``timeout`` is None, neither a number nor a pair, or not positive.
    """
    values = timeout if isinstance(timeout, tuple) else (timeout,)
    if (isinstance(timeout, tuple) and len(timeout) != 2) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values
    ):
        raise ValueError(f"timeout must be positive seconds or (connect, read), got {timeout!r}")


def _with_retries(attempt: Callable[[], T], url: str, max_attempts: int, backoff: float) -> T:
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
    for k in range(max_attempts):
        try:
            return attempt()
        except DownloadError as err:
            if not err.transient:
                raise
            if k == max_attempts - 1:
                if max_attempts > 1:
                    reason = f"{err.reason} (gave up after {max_attempts} attempts)"
                    raise DownloadError(url, reason, err.status, True) from err
                raise
        time.sleep(backoff * 2**k)
    raise AssertionError("unreachable")


def _fetch_once(session, url: str, dst: str, progress: bool, timeout: Timeout, chunk_size: int):
    import requests

    try:
        response = session.get(url, stream=True, timeout=timeout, headers=_HEADERS)
    except requests.RequestException as exc:
        raise _as_download_error(url, exc) from exc
    with response:
        status = response.status_code
        if status >= 400:
            raise DownloadError(
                url, response.reason or "error", status, _is_transient_status(status)
            )
        fd, tmp = _create_temporary_file(dst)
        try:
            try:
                _stream_into(response, fd, url, dst, progress, chunk_size)
            except requests.RequestException as exc:
                raise _as_download_error(url, exc) from exc
            os.replace(tmp, dst)
        except BaseException:
            _unlink_quietly(tmp)
            raise
    return dst


def _stream_into(response, fd: int, url: str, dst: str, progress: bool, chunk_size: int) -> None:
    import requests

    expected = _content_length(response)
    written = 0
    # Write through the descriptor that created the file: reopening it with O_TRUNC
    # makes ext4 flush the whole file at close (its replace-via-truncate heuristic).
    with open(fd, "wb") as f:
        bar = _progress_bar(expected, os.path.basename(dst)) if progress else None
        try:
            for chunk in response.iter_content(chunk_size):
                f.write(chunk)
                written += len(chunk)
                if bar is not None:
                    bar.update(len(chunk))
        except requests.exceptions.ChunkedEncodingError as exc:
            # urllib3 noticed the body end early (it enforces Content-Length).
            raise _cut_short(url, expected) from exc
        finally:
            if bar is not None:
                bar.close()
    if expected is not None:
        # With a content coding the length counts wire bytes, not decoded ones.
        encoded = response.headers.get("Content-Encoding", "identity").lower() != "identity"
        received = response.raw.tell() if encoded else written
        if received != expected:
            raise _cut_short(url, expected, received)


def _cut_short(url: str, expected: Optional[int], received: Optional[int] = None) -> DownloadError:
    total = f"{expected} bytes" if expected is not None else "the body"
    if received is None:
        # urllib3 reads whole chunks, so when it notices the cut, how much came is unknown.
        reason = f"connection closed before all of {total} arrived"
    else:
        reason = f"connection closed after {received} of {total}"
    return DownloadError(url, reason, transient=True)


def _progress_bar(total: Optional[int], name: str):
    from tqdm import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=name)


def _create_temporary_file(dst: str) -> Tuple[int, str]:
    # Same directory as dst, so os.replace is an atomic rename. Not mkstemp: its 0600
    # would stick to the final file, whereas 0666 here gets the umask like any new file.
    # The '@' keeps the name out of the cache's namespace (see easycore.common.path.cache).
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = f"{dst}@{secrets.token_hex(4)}.part"
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name next to", dst)


def _content_length(response) -> Optional[int]:
    try:
        value = int(response.headers["Content-Length"])
    except (KeyError, ValueError):
        return None
    return value if value >= 0 else None


def _is_transient_status(status: int) -> bool:
    return status >= 500 or status in (408, 429)


def _as_download_error(url: str, exc: Exception) -> DownloadError:
    import requests

    # SSLError is a ConnectionError: test it first, a bad certificate is not transient.
    if isinstance(exc, requests.exceptions.SSLError):
        return DownloadError(url, f"TLS error ({exc})")
    if isinstance(exc, requests.exceptions.Timeout):
        return DownloadError(url, f"timed out ({exc})", transient=True)
    transient_types = (
        requests.exceptions.ConnectionError,
        requests.exceptions.ChunkedEncodingError,
        requests.exceptions.ContentDecodingError,
    )
    if isinstance(exc, transient_types):
        return DownloadError(url, f"connection failed ({exc})", transient=True)
    return DownloadError(url, f"{type(exc).__name__}: {exc}")


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
