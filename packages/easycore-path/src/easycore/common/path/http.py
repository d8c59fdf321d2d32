"""`HTTPURLHandler`: read-only `http://` and `https://` URLs, cached on disk.

A URL is downloaded once into `get_cache_dir(<protocol>)` (see `.cache` for the layout)
and then served from disk: a cache hit is an `lstat` and a `realpath`, with no import of
`requests` and no network traffic. Only an entry of the user's own (or root's), a
regular file whose real path stays in the cache, is served (`.cache.trusted_entry`).
"""

import errno
import os
import stat
from typing import IO, AbstractSet, Any, List, Optional

from easycore.common.network.download import check_download_options, fetch_locked
from easycore.common.network.transfer import DEFAULT_TIMEOUT, Timeout, probe
from easycore.common.network.urls import redact

from .cache import check_inside, lock_target, trusted_entry, url_to_cache_path
from .keywords import BUILTIN_OPEN_KEYWORDS
from .path_handler import PathHandler

__all__ = ["HTTPURLHandler"]

_WRITE_MODES = frozenset("wax+")


class HTTPURLHandler(PathHandler):
    """Download URLs and cache them to disk.

    Concurrent requests for one URL, from threads or processes, download it once: the
    download runs under [`file_lock`][easycore.common.path.file_lock] and whoever waited
    finds the finished file. A file appears in the cache only complete, holding the bytes
    the server sent (a body the server compressed anyway is stored compressed, as
    `curl -O` stores it). Failures raise
    [`DownloadError`][easycore.common.network.DownloadError] and leave nothing but lock
    files; temporary files of killed downloads are removed by the next download of the
    same URL.

    The cache entry is chosen by everything that changes the server's answer: scheme,
    host, port, path, query string and the credentials in `user:password@`. Credentials
    and query strings are hashed with a secret key of the user's, never written into a
    file name, and a file fetched with credentials is readable by its owner only.

    Remote URLs are read-only here: writing, removing or creating them raises
    `PermissionError`.

    Args:
        timeout (float or tuple): `(connect, read)` timeouts in seconds, per operation;
            positive and finite.
        max_attempts (int): tries in all for transient failures (connection errors,
            timeouts, truncated bodies, 5xx), with exponential backoff between them.
        backoff (float): seconds before the first retry, 0 or more; doubles each time.
        progress (bool): draw a tqdm progress bar while downloading.
        deadline (float or None): seconds for a whole download, retries included, however
            slowly the server sends; None reads `$EASYCORE_DOWNLOAD_DEADLINE` at download
            time, else one hour. `math.inf` for none.
        lock_timeout (float or None): seconds to wait while another process downloads the
            same URL; None reads `$EASYCORE_DOWNLOAD_LOCK_TIMEOUT`, else the deadline plus
            one minute.

    Raises:
        ValueError: an option is out of its range (checked here, not mid-download).
    """

    def __init__(
        self,
        *,
        timeout: Timeout = DEFAULT_TIMEOUT,
        max_attempts: int = 3,
        backoff: float = 0.5,
        progress: bool = True,
        deadline: Optional[float] = None,
        lock_timeout: Optional[float] = None,
    ) -> None:
        # Every option is checked now, not at the first download.
        check_download_options(
            timeout=timeout,
            max_attempts=max_attempts,
            backoff=backoff,
            progress=progress,
            deadline=deadline,
            lock_timeout=lock_timeout,
        )
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.progress = progress
        self.deadline = deadline
        self.lock_timeout = lock_timeout

    def get_supported_prefixes(self) -> List[str]:
        """
        Returns:
            List[str]: `["http://", "https://"]`.
        """
        return ["http://", "https://"]

    def get_local_path(
        self, path: str, force: bool = False, cache_dir: Optional[str] = None
    ) -> str:
        """Get a file path which is compatible with native Python I/O such as `open` and
        `os.path`, downloading the URL into the cache on first use.

        Args:
            path (str): A URI supported by this PathHandler.
            force (bool): download again, replacing the cached copy (which readers
                holding it open keep reading whole).
            cache_dir (str or None): the cache directory instead of `get_cache_dir()`.

        Returns:
            str: the path of a file that exists on the local file system.

        Raises:
            DownloadError: the download failed (HTTP error, timeout, cut connection).
            ValueError: the URL cannot be mapped safely into the cache.
        """
        folder = self._protocol_dir(path, cache_dir)
        local = url_to_cache_path(folder, path)
        if not force and trusted_entry(folder, local):
            return local
        return self._download(path, local, folder, force)

    def open(self, path: str, mode: str = "r", **kwargs: Any) -> IO:
        """Open a stream to a URI, similar to the built-in `open`; read modes only.

        Args:
            path (str): A URI supported by this PathHandler.
            mode (str): Specifies the mode in which the file is opened. It defaults to 'r'.
            kwargs: other arguments of the built-in `open`, such as `encoding`.

        Returns:
            IO: a file-like object reading the cached copy.

        Raises:
            PermissionError: `mode` writes, or the cached copy was replaced by a link or
                by another user's file between the look-up and the open.
        """
        if _WRITE_MODES.intersection(mode):
            raise self._read_only(f"open with mode {mode!r}", path)
        local = self.get_local_path(path)
        # Opened without following a link, and checked again once open: an entry swapped
        # since get_local_path looked at it is refused rather than read.
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
        try:
            fd = os.open(local, flags)
        except OSError as exc:
            raise PermissionError(
                exc.errno, f"cannot open the cached copy of {redact(path)}: {exc.strerror}", local
            ) from None
        try:
            info = os.fstat(fd)
            getuid = getattr(os, "getuid", None)
            if not stat.S_ISREG(info.st_mode) or (
                getuid is not None and info.st_uid not in (getuid(), 0)
            ):
                raise PermissionError(
                    errno.EACCES,
                    f"the cached copy of {redact(path)} changed hands while opening it",
                    local,
                )
            return open(fd, mode, **kwargs)
        except BaseException:
            os.close(fd)
            raise

    def open_keywords(self, path: str) -> Optional[AbstractSet[str]]:
        """
        Returns:
            set or None: the built-in `open`'s keyword arguments, which read the cached
            copy (None for a subclass with an `open` of its own, which decides).
        """
        return BUILTIN_OPEN_KEYWORDS if type(self).open is HTTPURLHandler.open else None

    def exists(self, path: str) -> bool:
        """Checks if there is a resource at the given URI.

        A cached URL exists without asking; otherwise the server is asked (`HEAD`).

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            bool: True if the path exists (cached, or the server answers below 400).

        Raises:
            DownloadError: the server could not be reached or kept failing (5xx).
        """
        if self._is_cached(path, self._cache_path(path)):
            return True
        status = probe(
            path,
            timeout=self.timeout,
            max_attempts=self.max_attempts,
            backoff=self.backoff,
            deadline=self.deadline,
        )
        return status < 400

    def isfile(self, path: str) -> bool:
        """Checks if the resource at the given URI is a file; every existing URL is one.

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            bool: True if the path is a file.
        """
        return self.exists(path)

    def isdir(self, path: str) -> bool:
        """Checks if the resource at the given URI is a directory; a URL never is.

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            bool: False.
        """
        return False

    def listdir(self, path: str) -> List[str]:
        """Not supported: HTTP has no directory listing.

        Args:
            path (str): A URI supported by the PathHandler.

        Raises:
            NotImplementedError: always, naming the URL.
        """
        raise NotImplementedError(f"HTTPURLHandler cannot list directories: {redact(path)!r}")

    def makedirs(self, path: str) -> None:
        """Not supported: remote URLs are read-only.

        Args:
            path (str): A URI supported by this PathHandler.

        Raises:
            PermissionError: always, naming the URL.
        """
        raise self._read_only("makedirs", path)

    def remove(self, path: str) -> None:
        """Not supported: remote URLs are read-only.

        Args:
            path (str): A URI supported by this PathHandler.

        Raises:
            PermissionError: always, naming the URL.
        """
        raise self._read_only("remove", path)

    def removedirs(self, path: str) -> None:
        """Not supported: remote URLs are read-only.

        Args:
            path (str): A URI supported by this PathHandler.

        Raises:
            PermissionError: always, naming the URL.
        """
        raise self._read_only("removedirs", path)

    def mv(self, src_path: str, dst_path: str) -> bool:
        """Not supported: remote URLs are read-only.

        Args:
            src_path (str): A URI supported by this PathHandler.
            dst_path (str): A URI supported by this PathHandler.

        Raises:
            PermissionError: always, naming the URL.
        """
        raise self._read_only("mv", src_path)

    def copy_from_local(self, local_path: str, dst_path: str, overwrite: bool = False) -> bool:
        """Not supported: remote URLs are read-only.

        Args:
            local_path (str): a local file path
            dst_path (str): A URI supported by this PathHandler.
            overwrite (bool): forcing overwrite of existing URI.

        Raises:
            PermissionError: always, naming the URL.
        """
        raise self._read_only("copy_from_local to", dst_path)

    def _protocol_dir(self, url: str, cache_dir: Optional[str] = None) -> str:
        """This URL's protocol folder of `cache_dir` (absolute), or of the default cache."""
        if cache_dir is None:
            return self.get_cache_dir(self._protocol(url))
        return os.path.join(os.path.abspath(os.path.expanduser(cache_dir)), self._protocol(url))

    def _cache_path(self, url: str) -> str:
        return url_to_cache_path(self._protocol_dir(url), url)

    def _is_cached(self, url: str, local: str) -> bool:
        return trusted_entry(self._protocol_dir(url), local)

    def _download(
        self, url: str, local: str, cache_dir: Optional[str] = None, force: bool = False
    ) -> str:
        cache_dir = cache_dir or self._protocol_dir(url)
        check_inside(cache_dir, local, url)
        try:
            mode = os.lstat(local).st_mode
        except OSError:
            mode = 0
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(
                errno.EISDIR, f"cannot cache {redact(url)}: a directory holds its place", local
            )
        fetch_locked(
            url,
            local,
            lock_target(local),
            # force: whatever is there is downloaded over (renamed over, never rewritten)
            accept=lambda found: not force and trusted_entry(cache_dir, found),
            progress=self.progress,
            timeout=self.timeout,
            max_attempts=self.max_attempts,
            backoff=self.backoff,
            deadline=self.deadline,
            lock_timeout=self.lock_timeout,
        )
        return local

    @staticmethod
    def _protocol(url: str) -> str:
        return url.split(":", 1)[0].lower()

    @staticmethod
    def _read_only(operation: str, path: str) -> PermissionError:
        return PermissionError(
            errno.EACCES, f"HTTPURLHandler is read-only, cannot {operation}", redact(path)
        )
