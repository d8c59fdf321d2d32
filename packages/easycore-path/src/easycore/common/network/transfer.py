"""Stream one URL into one file: atomically, within a deadline, with bounded retries.

`requests`, `urllib3` and `tqdm` are imported inside the functions, so importing this
module (and everything that imports it) stays cheap until a transfer actually happens.

What is stored is what the server sent: the body is read without content decoding, so a
server that answers `Content-Encoding: gzip` anyway gets its gzip bytes stored, as
`curl -O` does (a `.tar.gz` stays gzipped), and nothing is ever expanded onto the disk.
"""

import contextlib
import errno
import os
import random
import secrets
import time
from typing import TYPE_CHECKING, Any, Callable, Optional, Tuple, TypeVar, Union
from urllib.parse import urlsplit

from .errors import DownloadError
from .limits import MAX_WAIT, resolve_deadline
from .names import PART_SUFFIX, own_prefix
from .urls import credentials, redact

if TYPE_CHECKING:
    import logging

    from .deadline import Deadline

__all__ = [
    "DEFAULT_TIMEOUT",
    "Timeout",
    "check_attempts",
    "check_backoff",
    "check_options",
    "check_timeout",
    "fetch",
    "probe",
    "remove_stale_parts",
]

#: `(connect, read)` seconds, or one number for both, as `requests` takes it.
Timeout = Union[float, Tuple[float, float]]

DEFAULT_TIMEOUT: Tuple[float, float] = (10.0, 60.0)
CHUNK_SIZE = 1 << 20

# Ask for the bytes as stored: Content-Length then counts what we write to disk.
_HEADERS = {"Accept-Encoding": "identity"}

#: Retries are logged (as warnings) here; the library configures no handler.
LOGGER_NAME = "easycore.common.network"

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
    deadline: Optional[float] = None,
) -> str:
    """Download `url` to the file `dst`, which appears only once it is complete.

    The body is streamed into a temporary file next to `dst` and renamed into place with
    `os.replace` once complete (its length matches `Content-Length`, or a chunked body
    ended with its last chunk). Whatever fails, the temporary file is removed and `dst`
    is left untouched. A URL with credentials (`user:password@`) gives a file only its
    owner can read (mode 0600).

    Args:
        url (str): an `http://` or `https://` URL. TLS certificates are verified.
        dst (str): the file to create or replace. Its directory must exist.
        progress (bool): draw a tqdm progress bar on stderr.
        timeout (float or tuple): `(connect, read)` timeouts in seconds, per operation.
        max_attempts (int): tries in all; connection errors, timeouts, cut bodies and
            5xx/408/429 answers are tried again after `backoff * 2**k` seconds (plus up
            to half as much at random), or after what a 429/503's `Retry-After` asks,
            never past the deadline. urllib3's `Retry` on the session's adapter retries
            what fails before the body; a body cut mid-stream is retried here.
        backoff (float): seconds to wait before the first retry; doubles each time.
        chunk_size (int): bytes read from the socket at a time.
        deadline (float or None): seconds for the whole download, every attempt and pause
            included; None reads `$EASYCORE_DOWNLOAD_DEADLINE`, else one hour.

    Returns:
        str: `dst`.

    Raises:
        DownloadError: naming the URL (and the HTTP status, if any).
    """
    check_options(timeout, max_attempts, backoff)
    clock_seconds = resolve_deadline(deadline)
    private = credentials(url) is not None
    from .deadline import Deadline
    from .session import new_session

    with Deadline(clock_seconds) as clock, new_session() as session:
        attempts = _Attempts(session, url, max_attempts, backoff)

        def once() -> str:
            return _fetch_once(
                session, url, dst, progress, clock, timeout, chunk_size, private, attempts
            )

        return _with_retries(once, url, attempts, clock)


def probe(
    url: str,
    *,
    timeout: Timeout = DEFAULT_TIMEOUT,
    max_attempts: int = 3,
    backoff: float = 0.5,
    deadline: Optional[float] = None,
) -> int:
    """Ask a server for the status of `url` without downloading its body.

    Sends `HEAD` (following redirects) and falls back to the headers of a `GET` when
    the server refuses `HEAD`.

    Args:
        url (str): an `http://` or `https://` URL.
        timeout (float or tuple): `(connect, read)` timeouts in seconds.
        max_attempts (int): tries in all for transient failures, as in `fetch`.
        backoff (float): seconds before the first retry; doubles each time.
        deadline (float or None): seconds for the whole exchange, as in `fetch`.

    Returns:
        int: the final HTTP status code (below 500).

    Raises:
        DownloadError: when no answer arrives or the server keeps failing (5xx).
    """
    check_options(timeout, max_attempts, backoff)
    clock_seconds = resolve_deadline(deadline)
    import requests

    from .deadline import Deadline
    from .session import new_session

    def once() -> int:
        try:
            limits = clock.cap(timeout)
            response = session.head(url, allow_redirects=True, timeout=limits, headers=_HEADERS)
            attempts.count(response)
            if response.status_code in (405, 501):
                attempts.arm()
                response = session.get(url, stream=True, timeout=limits, headers=_HEADERS)
                attempts.count(response)
                response.close()
        except requests.RequestException as exc:
            attempts.exhaust()  # the adapter retried what it could
            raise _as_download_error(url, exc) from exc
        if _is_transient_status(response.status_code):
            raise DownloadError(url, response.reason or "error", response.status_code, True)
        return response.status_code

    with Deadline(clock_seconds) as clock, new_session() as session:
        attempts = _Attempts(session, url, max_attempts, backoff)
        return _with_retries(once, url, attempts, clock)


def check_timeout(timeout: Timeout) -> None:
    """Refuse a missing, non-positive or infinite timeout: a transfer must never wait
    forever (and a socket cannot take `math.inf`: use `deadline=` for the whole), nor
    one longer than a socket can wait (`MAX_WAIT`, about 292 years on Linux).

    Args:
        timeout (float or tuple): `(connect, read)` seconds, or one number for both.

    Raises:
        ValueError: `timeout` is None, neither a number nor a pair, or not positive and
            at most `MAX_WAIT`.
    """
    values = timeout if isinstance(timeout, tuple) else (timeout,)
    if (isinstance(timeout, tuple) and len(timeout) != 2) or not all(
        _is_number(v) and 0 < v <= MAX_WAIT for v in values
    ):
        raise ValueError(
            f"timeout must be positive, finite seconds (at most {MAX_WAIT:.4g}) or "
            f"(connect, read), got {timeout!r}"
        )


def check_attempts(max_attempts: int) -> None:
    """Refuse fewer than one attempt, or a count that is not an integer.

    Raises:
        ValueError: `max_attempts` is not an int of at least 1.
    """
    from numbers import Integral  # NumPy integers too (a count read from an array)

    if isinstance(max_attempts, bool) or not isinstance(max_attempts, Integral) or max_attempts < 1:
        raise ValueError(f"max_attempts must be an integer of at least 1, got {max_attempts!r}")


def check_backoff(backoff: float) -> None:
    """Refuse a negative, infinite or non-numeric backoff, or one no sleep can take.

    Raises:
        ValueError: `backoff` is not a number of seconds from 0 to `MAX_WAIT`.
    """
    if not (_is_number(backoff) and 0 <= backoff <= MAX_WAIT):
        raise ValueError(
            f"backoff must be finite seconds, 0 or more (at most {MAX_WAIT:.4g}), "
            f"got {backoff!r}"
        )


def check_options(timeout: Timeout, max_attempts: int, backoff: float) -> None:
    """`check_timeout`, `check_attempts` and `check_backoff` at once.

    Raises:
        ValueError: naming the first bad option.
    """
    check_timeout(timeout)
    check_attempts(max_attempts)
    check_backoff(backoff)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def remove_stale_parts(dst: str) -> None:
    """Remove the temporary files earlier downloads of `dst` left (killed mid-body).

    Call it only while holding the download lock of `dst`: every download of `dst`
    holds that lock while its temporary file exists, so any found then is stale.

    Args:
        dst (str): the file a download creates.
    """
    directory, name = os.path.split(own_prefix(dst))
    try:
        entries = os.listdir(directory or ".")
    except OSError:
        return
    for entry in entries:
        if entry.startswith(name) and PART_SUFFIX.fullmatch(entry, len(name)):
            _unlink_quietly(os.path.join(directory, entry))


def logger() -> "logging.Logger":
    """The `easycore.common.network` logger (imported on first use: logging is not light)."""
    import logging

    return logging.getLogger(LOGGER_NAME)


class _Attempts:
    """The attempts one download has spent, urllib3's retries and ours together."""

    def __init__(self, session: Any, url: str, max_attempts: int, backoff: float) -> None:
        self.session = session
        self.url = url
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.spent = 0

    @property
    def left(self) -> bool:
        return self.spent < self.max_attempts

    def arm(self) -> None:
        """Give the session's adapters the retries this download has left."""
        from .retry import download_retry

        retry = download_retry(self.url, self.backoff, self.spent, self.max_attempts)
        for adapter in self.session.adapters.values():
            adapter.max_retries = retry

    def count(self, response: Any) -> None:
        """Count a request that got `response`, and the retries urllib3 made for it."""
        retries = getattr(response.raw, "retries", None)
        self.spent += 1 + (len(retries.history) if retries is not None else 0)

    def exhaust(self) -> None:
        """urllib3 gave up (or the error is not one to retry): no attempt is left."""
        self.spent = self.max_attempts


def _with_retries(attempt: Callable[[], T], url: str, attempts: _Attempts, clock: "Deadline") -> T:
    """Run `attempt`; try again only after a body cut mid-stream (urllib3 retries the
    rest), within the attempts left and the deadline."""
    while True:
        if clock.expired:
            raise clock.error(url)
        attempts.arm()
        try:
            return attempt()
        except DownloadError as err:
            if clock.expired:
                raise clock.error(url) from err
            if not err.transient:
                raise
            if not attempts.left or not getattr(err, "mid_body", False):
                if attempts.max_attempts > 1 and not attempts.left:
                    reason = f"{err.reason} (gave up after {attempts.max_attempts} attempts)"
                    raise DownloadError(url, reason, err.status, True) from err
                raise
            pause = attempts.backoff * 2 ** (attempts.spent - 1)
            pause += random.uniform(0.0, pause / 2)
            logger().warning(
                "download of %s failed (%s%s); attempt %d of %d, retrying in %.3g s",
                redact(url),
                f"HTTP {err.status} " if err.status is not None else "",
                err.reason,
                attempts.spent,
                attempts.max_attempts,
                pause,
            )
        time.sleep(min(pause, clock.remaining(), MAX_WAIT))


def _fetch_once(
    session: Any,
    url: str,
    dst: str,
    progress: bool,
    clock: "Deadline",
    timeout: Timeout,
    chunk_size: int,
    private: bool,
    attempts: _Attempts,
) -> str:
    import requests

    try:
        response = session.get(url, stream=True, timeout=clock.cap(timeout), headers=_HEADERS)
    except requests.RequestException as exc:
        attempts.exhaust()  # urllib3 retried what it could before raising
        raise _as_download_error(url, exc) from exc
    attempts.count(response)
    with response:
        _check_status(url, response)
        try:
            fd, tmp = _create_temporary_file(dst, 0o600 if private else 0o666)
        except OSError as exc:
            raise _write_error(url, dst, exc) from exc
        try:
            try:
                try:
                    _stream_into(response, fd, url, dst, progress, chunk_size)
                except DownloadError as err:
                    err.mid_body = err.transient  # type: ignore[attr-defined]  # ours to retry
                    raise
                if clock.expired:
                    # The deadline's shutdown can look like the end of a body that has no
                    # length: never rename such a body into place.
                    raise clock.error(url)
                os.replace(tmp, dst)
            except DownloadError:
                raise
            except OSError as exc:  # the disk is full, a quota, a read-only file system...
                raise _write_error(url, dst, exc) from exc
        except BaseException:
            _unlink_quietly(tmp)
            raise
    return dst


def _check_status(url: str, response: Any) -> None:
    """Refuse any final answer but 200 and 203, the two that carry the resource itself.

    Redirects were followed, so a 3xx here has no usable `Location` (or is a 304 or 300);
    204/205 carry nothing, 206 only a part (and we never send `Range`); 201, 202 and the
    rest describe something else than the resource. None of them is ever cached.
    """
    status = response.status_code
    reason = response.reason or "error"
    if status >= 400:
        raise DownloadError(url, reason, status, _is_transient_status(status))
    if status in (200, 203):
        return
    if 300 <= status < 400:
        why = "a redirect without a usable Location" if status != 304 else "not a body"
    elif status == 206:
        why = "a partial body, to a request without Range"
    else:
        why = "no body of the resource"
    raise DownloadError(url, f"{reason} ({why}: only 200 and 203 are stored)", status)


def _write_error(url: str, dst: str, exc: OSError) -> DownloadError:
    """`exc`, raised while storing `url` at `dst`, as a `DownloadError` naming both."""
    error = DownloadError(url, f"cannot store it at {dst}: {exc.strerror or exc}")
    error.errno = exc.errno  # ENOSPC, EDQUOT, EFBIG, EROFS, ENAMETOOLONG...
    return error


def _stream_into(
    response: Any, fd: int, url: str, dst: str, progress: bool, chunk_size: int
) -> None:
    from urllib3.exceptions import HTTPError, ReadTimeoutError

    expected = _content_length(response, url)
    written = 0
    # decode_content=False: the bytes the server sent, never expanded (see module doc).
    chunks = response.raw.stream(chunk_size, decode_content=False)
    # Write through the descriptor that created the file: reopening it with O_TRUNC
    # makes ext4 flush the whole file at close (its replace-via-truncate heuristic).
    with open(fd, "wb") as f:
        bar = _progress_bar(expected, os.path.basename(dst)) if progress else None
        try:
            while True:
                try:
                    chunk = next(chunks, None)
                except ReadTimeoutError as exc:
                    raise DownloadError(url, f"timed out ({exc})", transient=True) from exc
                except (HTTPError, OSError) as exc:
                    # urllib3 enforces Content-Length and the chunked terminator.
                    raise _cut_short(url, expected) from exc
                if chunk is None:
                    break
                f.write(chunk)
                written += len(chunk)
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
    if expected is not None and written != expected:
        raise _cut_short(url, expected, written)


def _cut_short(url: str, expected: Optional[int], received: Optional[int] = None) -> DownloadError:
    total = f"{expected} bytes" if expected is not None else "the body"
    if received is None:
        # urllib3 reads whole chunks, so when it notices the cut, how much came is unknown.
        reason = f"connection closed before all of {total} arrived"
    else:
        reason = f"connection closed after {received} of {total}"
    return DownloadError(url, reason, transient=True)


def _progress_bar(total: Optional[int], name: str) -> Any:
    from tqdm import tqdm

    class _Bar(tqdm):
        # tqdm's monitor thread would outlive the download (a later fork in
        # this process would then fork a process with threads); the bar is
        # updated per chunk, so it has no use for it.
        monitor_interval = 0

    return _Bar(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=name)


def _create_temporary_file(dst: str, mode: int) -> Tuple[int, str]:
    # Same directory as dst, so os.replace is an atomic rename. Not mkstemp: its 0600
    # would stick to the final file, whereas 0666 here gets the umask like any new file
    # (0600 is asked for on purpose for files fetched with credentials).
    # The '@' keeps the name out of the cache's namespace (see easycore.common.path.cache).
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = f"{own_prefix(dst)}@{secrets.token_hex(4)}.part"
        try:
            return os.open(tmp, flags, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name next to", dst)


def _content_length(response: Any, url: str) -> Optional[int]:
    """The body's length the answer promises, or None when it gives none.

    Raises:
        DownloadError: an invalid `Content-Length` (not digits, or several different
            values): RFC 9112 (6.3) makes the answer's framing an unrecoverable error,
            so nothing of it is stored.
    """
    if "chunked" in response.headers.get("Transfer-Encoding", "").lower():
        return None  # a Content-Length beside chunked coding is to be ignored (RFC 9112)
    raw = response.headers.get("Content-Length")
    if raw is None:
        return None
    # "10, 10" (a header repeated with one value) is valid; anything else is not.
    values = {value.strip() for value in raw.split(",")}
    if len(values) != 1 or not all(value.isascii() and value.isdigit() for value in values):
        raise _invalid_length(url, repr(raw))
    return int(values.pop())


def _invalid_length(url: str, what: str) -> DownloadError:
    reason = f"the server sent an invalid Content-Length {what}; nothing was stored"
    return DownloadError(url, reason)


def _is_transient_status(status: int) -> bool:
    return status >= 500 or status in (408, 429)


def _as_download_error(url: str, exc: Exception) -> DownloadError:
    import socket

    import requests
    from urllib3.exceptions import MaxRetryError
    from urllib3.exceptions import TimeoutError as Urllib3Timeout

    from .retry import resolution_failure

    unresolved = resolution_failure(exc)
    if unresolved is not None:
        # Not a timeout, whatever urllib3's classes say: the name has no address.
        host = urlsplit(url).hostname or url
        transient = unresolved.errno == getattr(socket, "EAI_AGAIN", None)
        return DownloadError(
            url, f"cannot resolve the host name {host!r} ({unresolved})", transient=transient
        )
    if isinstance(exc, requests.exceptions.InvalidHeader) and "Content-Length" in str(exc):
        return _invalid_length(url, f"({exc})")  # urllib3 refused it first ("10, 11")
    # After urllib3's retries, requests wraps the last error in MaxRetryError: name it.
    cause = exc.args[0] if exc.args else None
    if isinstance(cause, MaxRetryError) and isinstance(cause.reason, Urllib3Timeout):
        return DownloadError(url, f"timed out ({cause.reason})", transient=True)
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
    with contextlib.suppress(OSError):
        os.unlink(path)
