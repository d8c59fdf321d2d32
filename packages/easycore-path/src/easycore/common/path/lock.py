"""`file_lock`: one holder at a time for a path, across threads and processes."""

import os
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
    """
    from filelock import FileLock

    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    return FileLock(path + ".lock", timeout=timeout)
