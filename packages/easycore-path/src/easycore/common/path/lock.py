"""`file_lock`: one holder at a time for a path, across threads and processes."""

import errno
import os
import stat
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from filelock import FileLock

__all__ = ["file_lock"]

LOCK_TIMEOUT = 30 * 60  # seconds


def file_lock(path: str, timeout: float = LOCK_TIMEOUT) -> "FileLock":
    """A file lock. Once entered, it is guaranteed that no one else holds the same lock.

    Others trying to enter the lock will block for 30 minutes and raise an exception
    (`filelock.Timeout`, a `TimeoutError`). This is useful to make sure workers don't
    cache files to the same location. The directory of `path` is created if missing.

    The lock file is created here without following a symbolic link (`O_NOFOLLOW`) and
    must be a regular file: a link planted at its name (in a shared directory) is refused
    before `filelock` opens it, so no lock ever writes through one, whatever the version
    of `filelock` (before 3.20.1 it truncated a link's target, CVE-2025-68146).

    Examples:
        ```python
        filename = "/path/to/file"
        with file_lock(filename):
            if not os.path.isfile(filename):
                do_create_file()
        ```

    Args:
        path (str): a path to be locked. This function will create a lock named
            `path + ".lock"`.
        timeout (float): seconds to wait for the lock before raising.

    Returns:
        filelock.FileLock: a context manager holding the lock while entered.

    Raises:
        OSError: the lock file cannot be created, or is a symbolic link (`errno.ELOOP`)
            or not a regular file; the error names the lock file.
    """
    from filelock import FileLock

    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    lock_file = path + ".lock"
    _create_lock_file(lock_file)
    return FileLock(lock_file, timeout=timeout)


def _create_lock_file(lock_file: str) -> None:
    # No O_TRUNC (a lock file holds nothing), and O_NOFOLLOW: a symbolic link at the name,
    # dangling or not, fails with ELOOP instead of creating or truncating its target.
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(lock_file, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(lock_file):
            raise OSError(
                errno.ELOOP,
                "refusing to lock through a symbolic link at the lock file (planted by "
                "someone else?); remove it",
                lock_file,
            ) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EEXIST, "the lock file is not a regular file", lock_file)
    finally:
        os.close(fd)
