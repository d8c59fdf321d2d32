"""Local copies of remote objects, in the download cache, by object *and* credentials.

`cached_copy` gives `get_local_path` for fsspec stores the guarantees HTTP downloads
have (see `.cache` and `easycore.common.network.download`), built from the same parts:

- the file name comes from `url_to_cache_path`, so it lies inside the cache whatever the
  key holds (`..`, `//`, `%2F`, unicode, over-long names);
- the name carries a keyed digest (the user's secret key, `.cache_key`) of everything
  that decides the bytes and who may read them: the protocol, the exact path, the
  storage options and credentials in effect, and the object's version (ETag, version
  id, generation, modification time, size). A changed object gets a new name, so a stale
  copy is never served; another user, or other credentials, never find the entry;
- the download runs once across threads and processes under the entry's file lock,
  into an `@<8 hex>.part` file renamed into place only when complete and only if the
  object did not change meanwhile; copies are readable by their owner only;
- a copy is served only while its size is the object's (the metadata fetched for the
  version gives it): a copy truncated or grown on disk is downloaded again.

A hit costs one metadata request (`info`) to learn the object's current version.
"""

import contextlib
import os
import shutil
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple
from urllib.parse import quote

from easycore.common.network.errors import DownloadError
from easycore.common.network.transfer import _create_temporary_file, remove_stale_parts

from .cache import check_inside, lock_target, trusted_entry, url_to_cache_path
from .cache_key import keyed_digest
from .fsspec_errors import as_os_error, describe
from .lock import LOCK_TIMEOUT, file_lock

__all__ = ["cached_copy", "version_of"]

CHUNK = 8 << 20
# What says an object changed, by back-end: S3, GCS, Azure, local, memory spellings.
_VERSION_KEYS = (
    "ETag",
    "etag",
    "VersionId",
    "version_id",
    "generation",
    "LastModified",
    "last_modified",
    "updated",
    "mtime",
    "created",
    "size",
)


def version_of(info: Mapping[str, Any]) -> Tuple[Tuple[str, str], ...]:
    """What in an object's `info` changes when the object does.

    Args:
        info (Mapping): `fs.info(path)` of an fsspec file system.

    Returns:
        tuple: `(name, value)` pairs, comparable and printable.
    """
    return tuple((key, str(info[key])) for key in _VERSION_KEYS if info.get(key) is not None)


def cached_copy(
    fs: Any,
    fspath: str,
    url: str,
    cache_dir: str,
    owner: str,
    secrets: Iterable[str],
    force: bool = False,
) -> str:
    """The local copy of `fspath` in `fs`, downloaded into `cache_dir` if missing or stale.

    Args:
        fs: an fsspec file system.
        fspath (str): the object's path in `fs`.
        url (str): the path as the caller spelt it, for messages.
        cache_dir (str): this protocol's cache directory.
        owner (str): who asks (storage options and credentials in effect); hashed with
            the user's key, never written anywhere.
        secrets (iterable of str): values to keep out of messages.
        force (bool): download even if a current copy is there (it is renamed over).

    Returns:
        str: a regular file inside `cache_dir` with the object's current bytes.

    Raises:
        FileNotFoundError: no such object (or bucket).
        IsADirectoryError: `url` is a directory (a prefix), not an object.
        PermissionError: the credentials were refused.
        DownloadError: the transfer failed or the object kept changing; nothing is left
            in the cache.
    """
    secrets = tuple(secrets)
    info = _info(fs, fspath, url, secrets)
    local = _entry(cache_dir, fs, fspath, owner, version_of(info))
    # A hit is served only if it is ours (a regular file of this user, inside the
    # cache) and has the object's size: what another user planted in a shared cache,
    # or a copy cut short on disk, is downloaded over.
    if not force and _serves(cache_dir, local, info):
        return local
    check_inside(cache_dir, local, url)
    with file_lock(lock_target(local), timeout=LOCK_TIMEOUT):
        # another process may have finished it while we waited
        if not force and _serves(cache_dir, local, info):
            return local
        remove_stale_parts(local)
        _download(fs, fspath, url, local, version_of(info), secrets)
    return local


def _serves(cache_dir: str, local: str, info: Mapping[str, Any]) -> bool:
    """Whether the entry at `local` may be served for the object `info` describes."""
    if not trusted_entry(cache_dir, local):
        return False
    size = info.get("size")
    if size is None:
        return True
    try:
        return os.lstat(local).st_size == size
    except OSError:
        return False


def _info(fs: Any, fspath: str, url: str, secrets: Tuple[str, ...]) -> Dict:
    fs.invalidate_cache(fspath)  # listings cached by the client would hide a change
    try:
        info = fs.info(fspath)
    except Exception as exc:  # noqa: BLE001 (any back-end's error, reported naming the URL)
        raise as_os_error(exc, "get_local_path", url, secrets) from None
    if info.get("type") != "file":
        not_object = IsADirectoryError("a directory (a prefix), not an object")
        raise as_os_error(not_object, "get_local_path", url, secrets)
    return info


def _entry(
    cache_dir: str, fs: Any, fspath: str, owner: str, version: Tuple[Tuple[str, str], ...]
) -> str:
    protocol = _protocol(fs)
    # The layout follows the path (bucket as the host, one directory per segment); the
    # exact path, owner and version are in the keyed digest that names the leaf, so
    # two keys that the layout folds together ("a//b", "a/b") never share an entry.
    host, _, key = fspath.lstrip("/").partition("/")
    identity = keyed_digest(cache_dir, repr((protocol, fspath, owner, version)), 32)
    synthetic = f"{protocol}://{quote(host, safe='') or '%40'}/{quote(key, safe='/')}?{identity}"
    return url_to_cache_path(cache_dir, synthetic)


def _download(
    fs: Any,
    fspath: str,
    url: str,
    local: str,
    version: Tuple[Tuple[str, str], ...],
    secrets: Tuple[str, ...],
) -> None:
    fd, tmp = _create_temporary_file(local, 0o600)
    try:
        try:
            with open(fd, "wb") as out, fs.open(fspath, "rb", cache_type="none") as src:
                shutil.copyfileobj(src, out, CHUNK)
                written = out.tell()
        except (FileNotFoundError, PermissionError) as exc:
            raise as_os_error(exc, "get_local_path", url, secrets) from None
        except Exception as exc:  # noqa: BLE001 (any back-end's error fails this download)
            raise DownloadError(url, describe(exc, secrets), transient=True) from None
        after = _info(fs, fspath, url, secrets)
        if version_of(after) != version:
            raise DownloadError(url, "the object changed while it was downloaded", transient=True)
        size: Optional[int] = after.get("size")
        if size is not None and written != size:
            raise DownloadError(url, f"got {written} of {size} bytes", transient=True)
        os.replace(tmp, local)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _protocol(fs: Any) -> str:
    protocol = fs.protocol
    return protocol if isinstance(protocol, str) else protocol[0]
