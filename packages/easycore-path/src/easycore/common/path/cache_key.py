"""A secret key per user and cache directory, so that hashed names in the cache reveal
nothing about what they hash.

A cache entry whose URL carries credentials (`user:password@`) or a query string is named
by a keyed hash (HMAC-SHA256) of those parts, never by the parts themselves. Without the
key, another local user who can list the cache cannot test guesses of a password or a
token against a name. The key is 32 random bytes in `<cache_dir>/@key.<uid>`, created
readable by its owner only; a key file owned by someone else, readable by others or not a
regular file is refused, so no one can plant a key they know. Each user of a shared cache
has a key of their own: users never share entries that need credentials or a query.
"""

import contextlib
import errno
import hashlib
import hmac
import os
import secrets
import stat
from functools import lru_cache

__all__ = ["keyed_digest", "user_key"]

KEY_BYTES = 32


def keyed_digest(cache_dir: str, text: str, length: int) -> str:
    """The first `length` hex digits of HMAC-SHA256(`text`) under this user's key.

    Args:
        cache_dir (str): the cache directory the key belongs to.
        text (str): what to hash.
        length (int): hex digits to keep.

    Returns:
        str: lower-case hex digits.
    """
    data = text.encode("utf-8", "surrogatepass")
    return hmac.new(user_key(cache_dir), data, hashlib.sha256).hexdigest()[:length]


@lru_cache(maxsize=64)
def user_key(cache_dir: str) -> bytes:
    """This user's key for `cache_dir`, created on first use.

    Args:
        cache_dir (str): the cache directory (created if missing).

    Returns:
        bytes: the key.

    Raises:
        PermissionError: the key file is not a regular file of this user's that only
            they can read (delete it, and a new one is made).
    """
    path = os.path.join(cache_dir, f"@key.{_uid()}")
    for _ in range(5):
        try:
            return _read_key(path)
        except FileNotFoundError:
            _create_key(path)
    return _read_key(path)


def _uid() -> str:
    getuid = getattr(os, "getuid", None)
    return str(getuid()) if getuid is not None else "user"


def _read_key(path: str) -> bytes:
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:  # ELOOP: a symbolic link
        raise _refused(path, f"cannot be opened ({exc.strerror})") from None
    with open(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refused(path, "is not a regular file")
        if hasattr(os, "getuid"):
            if info.st_uid != os.getuid():
                raise _refused(path, "belongs to another user")
            if info.st_mode & 0o077:
                raise _refused(path, "can be read or written by other users")
        key = f.read(KEY_BYTES + 1)
    if len(key) != KEY_BYTES:
        raise _refused(path, f"does not hold {KEY_BYTES} bytes")
    return key


def _create_key(path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}@{secrets.token_hex(4)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    fd = os.open(tmp, flags, 0o600)
    try:
        with open(fd, "wb") as f:
            f.write(secrets.token_bytes(KEY_BYTES))
        try:
            os.link(tmp, path)  # never replaces a key another process made meanwhile
        except FileExistsError:
            pass  # another process made the key first: everyone uses theirs
        except OSError:
            if not os.path.exists(path):  # no hard links here (FAT, some network shares)
                os.rename(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _refused(path: str, why: str) -> PermissionError:
    return PermissionError(
        errno.EACCES,
        f"refusing the cache key: it {why}; it must be your own file, readable by you only "
        "(delete it and a new one is made)",
        path,
    )
