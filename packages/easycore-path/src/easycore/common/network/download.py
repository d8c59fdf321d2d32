"""``download_file``: fetch a URL into a directory once, however many ask at once."""

import os
from typing import Optional
from urllib.parse import unquote, urlsplit

from .transfer import DEFAULT_TIMEOUT, Timeout, fetch

__all__ = ["download_file"]


def download_file(
    url: str,
    dir: str,
    filename: Optional[str] = None,
    progress: bool = True,
    *,
    timeout: Timeout = DEFAULT_TIMEOUT,
    max_attempts: int = 3,
    backoff: float = 0.5,
) -> str:
    """Download a file from a given URL to a directory.

    If the file exists, will not overwrite the existing file. Processes downloading the
    same file at once are serialised by a file lock (``<file>.lock``): one downloads, the
    others wait and find the finished file. The file appears only once it is complete.

    Example:
    ::

        path = download_file("https://example.com/data/mnist.npz", "/tmp/data")
        # -> "/tmp/data/mnist.npz"

    Args:
        url (str): an ``http://`` or ``https://`` URL.
        dir (str): the directory to store the file. It is created if missing.
        filename (str or None): the basename to save the file. Use the name in the URL if
            not given.
        progress (bool): whether to use tqdm to draw a progress bar.
        timeout (float or tuple): ``(connect, read)`` timeouts in seconds.
        max_attempts (int): tries in all for transient failures (connection errors,
            timeouts, 5xx).
        backoff (float): seconds before the first retry; doubles each time.

    Returns:
        str: the path to the downloaded file or the existing one.

    Raises:
        DownloadError: the download failed; nothing is left at the returned path.
        ValueError: no usable file name in ``filename`` or in the URL.
    """
    if filename is None:
        filename = _filename_from_url(url)
    elif not _is_plain_name(filename):
        raise ValueError(f"filename must be a plain file name, got {filename!r}")
    path = os.path.join(dir, filename)
    if os.path.exists(path):
        return path

    # Imported here: easycore.common.path imports this package for DownloadError.
    from easycore.common.path.lock import file_lock

    with file_lock(path):
        if not os.path.exists(path):
            fetch(
                url,
                path,
                progress=progress,
                timeout=timeout,
                max_attempts=max_attempts,
                backoff=backoff,
            )
    return path


def _filename_from_url(url: str) -> str:
    name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    if not _is_plain_name(name):
        raise ValueError(f"cannot derive a file name from {url!r}; pass filename=")
    return name


def _is_plain_name(name: str) -> bool:
    return (
        name not in ("", ".", "..")
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
        and os.path.basename(name) == name
    )
