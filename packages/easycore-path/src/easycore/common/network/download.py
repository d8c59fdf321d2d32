"""`download_file`: fetch a URL into a directory once, however many ask at once."""

import errno
import os
import stat
from typing import Callable, Optional
from urllib.parse import unquote, urlsplit

from .errors import DownloadError
from .limits import resolve_deadline, resolve_lock_timeout
from .names import is_own_file_name, lock_target
from .transfer import (
    DEFAULT_TIMEOUT,
    Timeout,
    check_options,
    fetch,
    remove_stale_parts,
)
from .urls import redact

__all__ = ["check_download_options", "download_file", "fetch_locked"]


def download_file(
    url: str,
    dir: str,  # noqa: A002 (a public parameter: callers may pass dir=)
    filename: Optional[str] = None,
    progress: bool = True,
    *,
    timeout: Timeout = DEFAULT_TIMEOUT,
    max_attempts: int = 3,
    backoff: float = 0.5,
    deadline: Optional[float] = None,
    lock_timeout: Optional[float] = None,
) -> str:
    """Download a file from a given URL to a directory.

    If the file exists, will not overwrite the existing file. Processes downloading the
    same file at once are serialised by a file lock (`<file>@.lock`, a name no download
    may have): one downloads, the others wait and find the finished file. The file
    appears only once it is complete; temporary files left by a download that was killed
    are removed by the next one.

    Examples:
        ```python
        path = download_file("https://example.com/data/mnist.npz", "/tmp/data")
        # -> "/tmp/data/mnist.npz"
        ```

    Args:
        url (str): an `http://` or `https://` URL. A password in it is sent to that
            host only, and the file is then created readable by its owner only.
        dir (str): the directory to store the file. It is created if missing.
        filename (str or None): the basename to save the file. Use the name in the URL if
            not given.
        progress (bool): whether to use tqdm to draw a progress bar.
        timeout (float or tuple): `(connect, read)` timeouts in seconds, per operation.
        max_attempts (int): tries in all for transient failures (connection errors,
            timeouts, 5xx).
        backoff (float): seconds before the first retry; doubles each time.
        deadline (float or None): seconds for the whole download, retries included; None
            reads `$EASYCORE_DOWNLOAD_DEADLINE`, else one hour. `math.inf` for none.
        lock_timeout (float or None): seconds to wait while another process downloads
            the same file; None reads `$EASYCORE_DOWNLOAD_LOCK_TIMEOUT`, else the
            deadline plus one minute.

    Returns:
        str: the path to the downloaded file or the existing one.

    Raises:
        DownloadError: the download failed, did not finish within its deadline, or
            another process held the file's lock for longer than `lock_timeout`; nothing
            is left at the returned path.
        IsADirectoryError: a directory has the file's name.
        FileExistsError: something other than a regular file has the file's name.
        ValueError: no usable file name in `filename` or in the URL (or one shaped like
            our lock and temporary files, `...@.lock` and `...@<8 hex>.part`), or a bad
            setting.
        OSError: the file cannot be stored there (a parent is not a directory, the name
            is too long, a symbolic link is planted at its lock file...), naming the URL.
    """
    if filename is None:
        filename = _filename_from_url(url)
    elif not _is_plain_name(filename):
        raise ValueError(f"filename must be a plain file name, got {filename!r}")
    if is_own_file_name(filename):
        raise ValueError(
            f"cannot download {redact(url)!r} as {filename!r}: names ending in '@.lock' or "
            "'@<8 hex>.part' are easycore's lock and temporary files; pass another filename="
        )
    check_download_options(
        timeout=timeout,
        max_attempts=max_attempts,
        backoff=backoff,
        progress=progress,
        deadline=deadline,
        lock_timeout=lock_timeout,
    )
    path = os.path.join(dir, filename)
    _check_name_length(url, dir, path)
    if _is_downloaded(path, url):
        return path
    fetch_locked(
        url,
        path,
        lock_target(path),
        progress=progress,
        timeout=timeout,
        max_attempts=max_attempts,
        backoff=backoff,
        deadline=deadline,
        lock_timeout=lock_timeout,
    )
    return path


def check_download_options(
    *,
    timeout: Timeout,
    max_attempts: int,
    backoff: float,
    progress: bool,
    deadline: Optional[float],
    lock_timeout: Optional[float],
) -> None:
    """Refuse a bad download option at once, naming it, rather than mid-download.

    Raises:
        ValueError: a timeout that is not positive and finite, `max_attempts` not an int of
            at least 1, a negative or infinite `backoff`, a non-bool `progress`, or a
            `deadline` / `lock_timeout` that is not positive seconds (`math.inf` allowed).
    """
    check_options(timeout, max_attempts, backoff)
    _check_limits(deadline, lock_timeout)
    if not isinstance(progress, bool):
        raise ValueError(f"progress must be True or False, got {progress!r}")


def fetch_locked(
    url: str,
    dst: str,
    lock_path: str,
    *,
    progress: bool,
    timeout: Timeout,
    max_attempts: int,
    backoff: float,
    deadline: Optional[float],
    lock_timeout: Optional[float],
    accept: Optional[Callable[[str], bool]] = None,
) -> None:
    """Download `url` to `dst` unless it is there, holding the lock of `lock_path`.

    Under the lock: look again (another process may have finished meanwhile), remove
    the temporary files of killed downloads of `dst`, then fetch.

    `accept`, if given, decides whether what is found at `dst` may be kept (the HTTP
    cache keeps only its user's own regular files); a symbolic link or anything it
    refuses is downloaded over (replaced, never written through). Without it, any
    regular file at `dst` (a link to one included) counts as downloaded.

    Raises:
        DownloadError: as `fetch`, or the lock was not free within `lock_timeout`.
    """
    # Imported here: easycore.common.path imports this package for DownloadError.
    from filelock import Timeout as LockTimeout

    from easycore.common.path.lock import file_lock

    seconds = resolve_deadline(deadline)
    wait = resolve_lock_timeout(lock_timeout, seconds)
    try:
        lock = file_lock(lock_path, timeout=-1 if wait == float("inf") else wait)
    except OSError as exc:
        # e.g. the cache holds a file ".../a" and this URL is ".../a/b"
        raise _path_error(url, exc, dst) from None
    try:
        lock.acquire()
    except LockTimeout as exc:
        raise DownloadError(
            url,
            f"gave up after waiting {wait:g} s for another download of it to finish "
            f"(lock file {lock.lock_file}; set lock_timeout= or "
            "$EASYCORE_DOWNLOAD_LOCK_TIMEOUT)",
            transient=True,
        ) from exc
    except OSError as exc:  # e.g. the lock file was swapped for a link since file_lock
        raise _path_error(url, exc, lock.lock_file) from None
    try:
        if accept is None:
            if _is_downloaded(dst, url):
                return
        elif _is_downloaded(dst, url, follow=False) and accept(dst):
            return
        remove_stale_parts(dst)
        fetch(
            url,
            dst,
            progress=progress,
            timeout=timeout,
            max_attempts=max_attempts,
            backoff=backoff,
            deadline=seconds,
        )
    finally:
        lock.release()


def _check_limits(deadline: Optional[float], lock_timeout: Optional[float]) -> None:
    """Refuse a bad `deadline` or `lock_timeout` now, before anything is locked or sent."""
    if deadline is not None:
        resolve_deadline(deadline)
    if lock_timeout is not None:
        resolve_lock_timeout(lock_timeout, 0.0)


def _check_name_length(url: str, folder: str, path: str) -> None:
    """Refuse a name longer than the file system takes before anything is created."""
    try:
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # no such folder yet, or not POSIX
        limit = 255
    if len(os.fsencode(os.path.basename(path))) > limit:
        too_long = OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), path)
        raise _path_error(url, too_long, path)


def _is_downloaded(path: str, url: str, follow: bool = True) -> bool:
    """True if a regular file is at `path`; an error if something else is. With
    `follow=False` a symbolic link is not followed and counts as nothing (False)."""
    try:
        mode = (os.stat if follow else os.lstat)(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _path_error(url, exc, path) from None
    if stat.S_ISREG(mode):
        return True
    if stat.S_ISLNK(mode):
        return False
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(
            errno.EISDIR, f"cannot download {redact(url)}: a directory has its name", path
        )
    raise FileExistsError(
        errno.EEXIST, f"cannot download {redact(url)}: a non-regular file has its name", path
    )


def _path_error(url: str, exc: OSError, path: str) -> OSError:
    """`exc` (about where `url` is to be stored) again, naming the URL."""
    reasons = {
        errno.ENOTDIR: "a parent of its path is not a directory",
        errno.EEXIST: "a parent of its path is not a directory",
        errno.ENAMETOOLONG: "its path is longer than the file system allows",
        errno.ELOOP: "a symbolic link is planted at its lock file or in its path (remove it)",
    }
    why = reasons.get(exc.errno or 0, exc.strerror)
    # OSError(errno, ...) builds the matching subclass (NotADirectoryError for ENOTDIR).
    return OSError(exc.errno, f"cannot download {redact(url)}: {why}", exc.filename or path)


def _filename_from_url(url: str) -> str:
    name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    if not _is_plain_name(name):
        raise ValueError(f"cannot derive a file name from {redact(url)!r}; pass filename=")
    return name


def _is_plain_name(name: str) -> bool:
    return (
        name not in ("", ".", "..")
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
        and os.path.basename(name) == name
    )
