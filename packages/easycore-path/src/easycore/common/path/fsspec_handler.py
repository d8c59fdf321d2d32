"""`FsspecPathHandler`: object storage (`s3://`, `gs://`, `memory://`, ...) through fsspec.

fsspec is an optional dependency (`pip install easycore-path[fsspec]`, plus the store's
package: s3fs, gcsfs, adlfs, ...). Importing this module does not import it: the file
system is made on first use, and again in a process forked or spawned since.
"""

import errno
import io
import json
import os
import shutil
import time
from functools import cache, lru_cache
from typing import IO, AbstractSet, Any, Dict, List, Mapping, Optional, Sequence, Tuple
from urllib.parse import unquote

from easycore.common.network.urls import redact

from .fsspec_cache import cached_copy
from .fsspec_errors import as_os_error, secret_values
from .fsspec_read import Reader
from .fsspec_write import is_local, open_atomic
from .keywords import check_keywords
from .path_handler import PathHandler
from .prefixes import has_scheme, normalise_scheme

__all__ = ["FsspecPathHandler", "handler_on_first_use"]

_WRITE_MODES = frozenset("wax+")
# Environment variables the stores' clients take credentials (or the endpoint) from:
# part of who asks. A fixed list, read with one get each: a hit must stay cheap.
_CREDENTIAL_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "GCSFS_DEFAULT_PROJECT",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_ACCOUNT",
    "AZURE_STORAGE_KEY",
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
    "AZURE_CLIENT_SECRET",
)
# fsspec's own implementations served on first use: they reach no other host.
_BUILT_IN_AUTO = frozenset({"memory", "file", "local"})
# fsspec protocols that wrap another one and need arguments: never registered on use.
_WRAPPERS = frozenset(
    {"blockcache", "cached", "dir", "filecache", "reference", "simplecache", "http", "https"}
)


class FsspecPathHandler(PathHandler):
    """Serve a protocol fsspec knows (`s3`, `gs`, `az`, `memory`, `file`, ...).

    Every [`PathManager`][easycore.common.path.PathManager] call works: `open` (text and
    binary, read and write), `exists`, `isfile`, `isdir`, `listdir`, `makedirs`,
    `remove`, `removedirs`, `copy_from_local` and `get_local_path`.

    - **Reads** stream from the store (fsspec's read-ahead file), no local copy.
    - **Writes** are atomic where the store allows: the object appears only when the
      file is closed cleanly; an exception inside `with PathManager.open(url, "wb")`
      aborts the (multipart) upload and leaves the store as it was.
    - **`get_local_path`** downloads into the cache once (see `get_cache_dir`), keyed by
      the object's path, its version (ETag, version id, modification time) *and* the
      storage options and credentials in effect, so a changed object is downloaded
      again and a copy is never served to other credentials or another user.
    - **Errors** name the operation and the URL; secrets never appear in them, and
      storage options are never logged.

    A `PathManager` path with an unregistered `scheme://` that fsspec knows gets a
    handler with no options on first use, when the store's package is installed
    (credentials then come from the client's usual places: environment, config files).
    Register one yourself to pass options or to serve one bucket with its own
    credentials.

    Examples:
        ```python
        handler = FsspecPathHandler(
            "s3",
            storage_options={"key": "...", "secret": "...",
                             "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}},
        )
        PathManager.register(handler)
        with PathManager.open("s3://bucket/data/train.csv", "r") as f:
            header = f.readline()
        ```

    Args:
        protocol (str): the fsspec protocol, e.g. `"s3"`, `"gs"`, `"memory"`.
        prefixes (sequence of str or None): the prefixes to serve; default
            `["<protocol>://"]`. A prefix such as `"s3://team-bucket/"` serves one
            bucket, so each bucket can have its own credentials.
        storage_options (Mapping or None): keyword arguments of the fsspec file system
            (credentials, `client_kwargs={"endpoint_url": ...}`, `anon=True`, ...).
        max_age (float): seconds for which `get_local_path` serves a copy it checked in
            this process without asking the store again. The default, 0, asks every
            time (one metadata request); a larger value trades freshness for speed in
            hot loops.
    """

    def __init__(
        self,
        protocol: str,
        prefixes: Optional[Sequence[str]] = None,
        *,
        storage_options: Optional[Mapping[str, Any]] = None,
        max_age: float = 0.0,
    ) -> None:
        if not protocol or "://" in protocol or ":" in protocol:
            raise ValueError(f"protocol must be a bare name such as 's3', got {protocol!r}")
        self.protocol = protocol
        if not max_age >= 0:
            raise ValueError(f"max_age must be a number of seconds >= 0, got {max_age!r}")
        self.prefixes = list(prefixes) if prefixes is not None else [f"{protocol}://"]
        self.max_age = float(max_age)
        # (path, who asks) -> (local copy, time.monotonic() of the check), for max_age
        self._checked: Dict[Tuple[str, Tuple[Any, ...]], Tuple[str, float]] = {}
        self._options: Dict[str, Any] = dict(storage_options or {})
        self._secrets = secret_values(self._options)
        self._options_text = json.dumps(self._options, sort_keys=True, default=repr)
        import threading  # here: importing the package stays light (no threading)

        self._lock = threading.Lock()
        self._fs: Any = None
        self._fs_pid: Optional[int] = None
        self._fs_env: Tuple[Any, ...] = ()
        self._fs_is_local = False

    def __repr__(self) -> str:
        # Never the storage options: they hold credentials.
        return f"FsspecPathHandler({self.protocol!r}, prefixes={self.prefixes!r})"

    def __getstate__(self) -> Dict[str, Any]:
        # The file system (event loop, connections) stays behind; the receiver makes its own.
        state = self.__dict__.copy()
        state.update(_lock=None, _fs=None, _fs_pid=None)
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        import threading

        self.__dict__.update(state)
        self._lock = threading.Lock()

    def get_supported_prefixes(self) -> List[str]:
        """
        Returns:
            List[str]: the prefixes given, default `["<protocol>://"]`.
        """
        return list(self.prefixes)

    @property
    def fs(self) -> Any:
        """The fsspec file system, made on first use in each process, and again when
        the credentials in the environment change (the client read them when made)."""
        pid, env = os.getpid(), _credential_env()
        fs = self._fs
        if fs is not None and self._fs_pid == pid and self._fs_env == env:
            return fs
        with self._lock:
            if self._fs is None or self._fs_pid != pid or self._fs_env != env:
                import fsspec

                # A fresh instance after a fork (the parent's event loop and sockets are
                # not this process's to use) or a change of credentials.
                self._fs = fsspec.filesystem(
                    self.protocol, skip_instance_cache=self._fs_pid is not None, **self._options
                )
                self._fs_pid, self._fs_env = pid, env
                self._fs_is_local = is_local(self._fs)
            return self._fs

    def _path(self, url: str) -> str:
        # Schemes ignore case (RFC 3986); fsspec strips only the spelling it knows.
        url = normalise_scheme(url)
        try:
            fs = self.fs
            path = fs._strip_protocol(url)
        except ImportError as exc:
            raise ImportError(f"cannot open {redact(url)!r}: {exc}") from None
        if self._fs_is_local and "%" in path and has_scheme(url):
            # A file:// URL is percent-encoded (RFC 8089): file:///a%20b is the file "a b".
            # A plain path given to this handler is a path, never decoded.
            path = unquote(path)
        return path

    def _object_path(self, url: str, operation: str) -> str:
        """`_path` of a URL that must name an object: one ending in "/" names a directory."""
        if url.endswith("/"):
            raise self._error(
                IsADirectoryError("a path ending in '/' names a directory, not an object"),
                operation,
                url,
            )
        return self._path(url)

    def _error(self, exc: BaseException, operation: str, url: str) -> OSError:
        return as_os_error(exc, operation, url, self._secrets)

    def _owner(self, env: Tuple[Any, ...]) -> str:
        """Who asks, for the cache's key: the options, credentials from the environment
        (`env`, from `_credential_env`) and the user."""
        return repr((self.protocol, self._options_text, env, _uid()))

    def get_local_path(
        self, path: str, force: bool = False, cache_dir: Optional[str] = None
    ) -> str:
        """A local file with the object's current bytes.

        Local files (`file://`) are returned as they are; anything else is downloaded
        into `get_cache_dir(<protocol>)` once and served from there while the object is
        unchanged (each call asks the store for the object's version, unless it did so
        less than `max_age` seconds ago).

        Args:
            path (str): A URI supported by this PathHandler.
            force (bool): download again even if the cached copy is current.
            cache_dir (str or None): the cache directory instead of `get_cache_dir()`
                (the protocol's folder is made inside it).

        Returns:
            str: a file path which exists on the local file system.

        Raises:
            FileNotFoundError: no such object or bucket.
            IsADirectoryError: `path` is a prefix, not an object.
            PermissionError: the store refused the credentials.
            DownloadError: the transfer failed; nothing is left in the cache.
        """
        fs, fspath = self.fs, self._object_path(path, "get_local_path")
        if self._fs_is_local:
            if not os.path.isfile(fspath):
                raise self._error(FileNotFoundError("no such file"), "get_local_path", path)
            return fspath
        env = _credential_env()
        if self.max_age > 0 and not force and cache_dir is None:
            hit = self._checked.get((fspath, env))
            if (
                hit is not None
                and time.monotonic() - hit[1] < self.max_age
                and os.path.isfile(hit[0])
            ):
                return hit[0]
        checked_at = time.monotonic()
        if cache_dir is None:
            folder = self.get_cache_dir(self.protocol)
        else:
            folder = os.path.join(os.path.abspath(os.path.expanduser(cache_dir)), self.protocol)
        owner = self._owner(env)
        local = cached_copy(fs, fspath, path, folder, owner, self._secrets, force=force)
        if self.max_age > 0 and cache_dir is None:
            self._checked[(fspath, env)] = (local, checked_at)
        return local

    def open(self, path: str, mode: str = "r", **kwargs: Any) -> IO:
        """Open a stream to a URI, similar to the built-in `open`.

        Args:
            path (str): A URI supported by this PathHandler.
            mode (str): `r`, `rb`, `w`, `wb`, `x`, `xb` (text modes take `encoding`,
                `errors`, `newline`); other keyword arguments go to fsspec's `open`:
                `block_size`, `cache_type`, `cache_options`, `compression` and those the
                store's own `_open` names (s3fs: `version_id`, `acl`, ...).

        Returns:
            IO: a file-like object. A writer stores the object only when closed cleanly.

        Raises:
            ValueError: an unsupported mode (appending or updating objects), or a text
                argument in a binary mode.
            UnknownArgumentError: a keyword argument no layer takes (a typo such as
                `encodng=`); a `TypeError`.
            IsADirectoryError: a path that ends in "/", or names a prefix.
            FileExistsError: mode `x` or `xb` and the object exists (a racing writer that
                lost gets it when it closes).
            FileNotFoundError: reading a missing object.
            PermissionError: the store refused the credentials.
        """
        if "+" in mode or "a" in mode:
            raise ValueError(
                f"cannot open {redact(path)!r} with mode {mode!r}: objects are read or "
                "written whole (use 'r', 'rb', 'w', 'wb', 'x' or 'xb')"
            )
        fs, fspath = self.fs, self._object_path(path, "open")
        kwargs = _check_open_arguments(fs, path, mode, kwargs)
        if _WRITE_MODES.intersection(mode):
            if "x" in mode and fs.exists(fspath):
                raise self._error(FileExistsError("the object exists"), "create", path)
            writer = open_atomic(
                fs, fspath, mode, lambda e: self._error(e, "write", path), **kwargs
            )
            return writer  # type: ignore[return-value]  # file-like, not an IO subclass
        text = {
            name: kwargs.pop(name) for name in ("encoding", "errors", "newline") if name in kwargs
        }
        # Listings the client cached may describe a key that is also a prefix as a
        # directory (size 0), or an object as it was before another process wrote it.
        fs.invalidate_cache(fspath)
        try:
            raw = fs.open(fspath, "rb", **kwargs)
        except Exception as exc:  # noqa: BLE001 (any back-end's error, reported naming the URL)
            raise self._error(exc, "open", path) from None
        # s3fs and its kin open a prefix as an empty file; its info says what it is.
        if getattr(raw, "details", None) and raw.details.get("type") == "directory":
            raw.close()
            raise self._error(IsADirectoryError("a directory (a prefix)"), "open", path)
        reader = Reader(raw, lambda e: self._error(e, "read", path))
        return reader if "b" in mode else io.TextIOWrapper(reader, **text)  # type: ignore[return-value]

    def open_keywords(self, path: str) -> Optional[AbstractSet[str]]:
        """
        Returns:
            set or None: those of fsspec's `open` for this store (`block_size`,
            `cache_type`, `cache_options`, `compression` and those its `_open` names)
            and a text mode's `encoding`, `errors`, `newline`.
        """
        return _open_parameters(self.fs.__class__) | set(_TEXT_ARGS)

    def exists(self, path: str) -> bool:
        """Whether an object or a prefix (directory) is at `path`.

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            bool: True if the path exists.
        """
        return self._ask("exists", path)

    def isfile(self, path: str) -> bool:
        """Whether an object is at `path` (a key may be an object and a prefix at once).

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            bool: True if the path is an object.
        """
        return self._ask("isfile", path)

    def isdir(self, path: str) -> bool:
        """Whether `path` is a directory (a prefix of other objects, or a bucket).

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            bool: True if the path is a directory.
        """
        return self._ask("isdir", path)

    def _ask(self, question: str, path: str) -> bool:
        fs, fspath = self.fs, self._path(path)
        fs.invalidate_cache(fspath)  # another process may have written since
        try:
            return bool(getattr(fs, question)(fspath))
        except Exception as exc:  # noqa: BLE001 (any back-end's error, reported naming the URL)
            raise self._error(exc, question, path) from None

    def listdir(self, path: str) -> List[str]:
        """The names (not paths) of the objects and prefixes directly under `path`.

        Args:
            path (str): A URI supported by the PathHandler.

        Returns:
            List[str]: sorted names, as `os.listdir` gives them.

        Raises:
            FileNotFoundError: nothing is under `path`.
        """
        fs, fspath = self.fs, self._path(path)
        fs.invalidate_cache(fspath)
        try:
            entries = fs.ls(fspath, detail=False)
        except Exception as exc:  # noqa: BLE001 (any back-end's error, reported naming the URL)
            raise self._error(exc, "list", path) from None
        base = fspath.rstrip("/")
        names = []
        for entry in entries:
            entry = entry.rstrip("/")
            if entry == base:
                continue  # some stores list an object under its own name
            names.append(entry.rsplit("/", 1)[-1])
        if not names and len(entries) == 1 and entries[0].rstrip("/") == base:
            # an object, not a prefix of any
            raise self._error(NotADirectoryError("an object, not a directory"), "list", path)
        return sorted(set(names))

    def makedirs(self, path: str) -> None:
        """Create a directory and its parents; nothing to do where directories are only
        prefixes (most object stores), except creating a missing bucket.

        Args:
            path (str): A URI supported by this PathHandler.
        """
        fs, fspath = self.fs, self._path(path)
        try:
            fs.makedirs(fspath, exist_ok=True)
        except Exception as exc:  # noqa: BLE001 (any back-end's error, reported naming the URL)
            raise self._error(exc, "makedirs", path) from None

    def remove(self, path: str) -> None:
        """Remove the object at `path` (never a directory), like `os.remove`.

        Args:
            path (str): A URI supported by this PathHandler.

        Raises:
            FileNotFoundError: no object is at `path`.
            IsADirectoryError: `path` is only a prefix.
        """
        fs, fspath = self.fs, self._path(path)
        fs.invalidate_cache(fspath)
        try:
            if not fs.isfile(fspath):
                why = (
                    IsADirectoryError("a directory")
                    if fs.isdir(fspath)
                    else FileNotFoundError("no such object")
                )
                raise why
            fs.rm_file(fspath)
        except Exception as exc:  # noqa: BLE001 (any back-end's error, reported naming the URL)
            raise self._error(exc, "remove", path) from None

    def removedirs(self, path: str) -> None:
        """Remove an empty directory, then its parents while they are empty, like
        `os.removedirs`; a bucket is never removed.

        Args:
            path (str): A URI supported by this PathHandler.

        Raises:
            OSError: the directory is not empty (`ENOTEMPTY`) or is missing.
        """
        fs, fspath = self.fs, self._path(path)
        top = _first_component(fspath) if not is_local(fs) else None
        current = fspath.rstrip("/")
        first = True
        while current and current != top and current not in ("/", "."):
            fs.invalidate_cache(current)
            try:
                if fs.isfile(current) or (fs.exists(current) and fs.ls(current, detail=False)):
                    if first:
                        raise OSError(errno.ENOTEMPTY, "directory not empty")
                    return
                if first and not fs.isdir(current) and not fs.exists(current):
                    if is_local(fs):
                        raise FileNotFoundError(errno.ENOENT, "no such directory")
                    return  # a prefix with nothing under it is gone already
                if fs.exists(current):
                    fs.rmdir(current)
            # Any back-end's error: for `path` itself it is reported; for a parent it
            # ends the climb (not empty, not ours), as `os.removedirs` does.
            except Exception as exc:  # noqa: BLE001
                if first:
                    raise self._error(exc, "removedirs", path) from None
                return
            first = False
            parent = fs._parent(current)
            if parent == current:
                return
            current = parent.rstrip("/")

    def mv(self, src_path: str, dst_path: str) -> bool:
        """Move an object, or a prefix with every object under it, within the store
        (`fs.mv`: a copy and a delete on most object stores, not atomic).

        Args:
            src_path (str): an object or a prefix of this store.
            dst_path (str): a free key of this store.

        Returns:
            bool: True once moved.

        Raises:
            FileExistsError: an object or prefix is at `dst_path` already.
            FileNotFoundError: no object or prefix at `src_path`.
        """
        fs = self.fs
        src, dst = self._path(src_path), self._path(dst_path)
        fs.invalidate_cache(src)
        fs.invalidate_cache(dst)
        try:
            if not fs.exists(src):
                raise FileNotFoundError("nothing to move")
            if fs.exists(dst):
                raise FileExistsError(f"{redact(dst_path)} exists")
            fs.mv(src, dst, recursive=fs.isdir(src))
        except Exception as exc:  # noqa: BLE001 (any back-end's error, reported naming the URL)
            raise self._error(exc, "move", src_path) from None
        return True

    def copy_from_local(self, local_path: str, dst_path: str, overwrite: bool = False) -> bool:
        """Upload a local file to `dst_path`; the object appears whole or not at all.

        Args:
            local_path (str): a local file path
            dst_path (str): A URI supported by this PathHandler.
            overwrite (bool): replace an existing object.

        Returns:
            bool: True on success.

        Raises:
            FileExistsError: `dst_path` exists and `overwrite` is False.
        """
        fs, fspath = self.fs, self._object_path(dst_path, "copy to")
        fs.invalidate_cache(fspath)
        if not overwrite and fs.exists(fspath):
            raise self._error(
                FileExistsError("the object exists (pass overwrite=True)"), "copy to", dst_path
            )
        with open(local_path, "rb") as src, self.open(dst_path, "wb") as dst:
            shutil.copyfileobj(src, dst, 8 << 20)
        return True


_TEXT_ARGS = ("encoding", "errors", "newline")
# What fsspec's open takes for every store (AbstractFileSystem.open, buffered files).
_GENERIC_OPEN_ARGS = frozenset({"block_size", "cache_type", "cache_options", "compression"})


def _check_open_arguments(
    fs: Any, url: str, mode: str, kwargs: Mapping[str, Any]
) -> Dict[str, Any]:
    """Refuse what `open` would otherwise pass on to be ignored (fsspec's `_open` takes
    `**kwargs` and drops what it does not know, so a typo (`encodng=`) went unnoticed);
    the arguments to pass on."""
    text = [name for name in _TEXT_ARGS if name in kwargs]
    if "b" in mode and text:
        raise ValueError(
            f"cannot open {redact(url)!r} with mode {mode!r}: binary mode doesn't take "
            f"an {text[0]} argument"
        )
    accepted = _open_parameters(fs.__class__) | set(_TEXT_ARGS)
    return check_keywords("open", url, dict(kwargs), accepted)


@cache
def _open_parameters(fs_class: Any) -> frozenset:
    """The keyword arguments `fs_class`'s files take: fsspec's generic ones and the named
    parameters of its `_open` (not `autocommit`: easycore sets it to stage writes)."""
    import inspect

    named = set(_GENERIC_OPEN_ARGS)
    for klass in fs_class.__mro__:
        method = vars(klass).get("_open")
        if method is None:
            continue
        try:
            parameters = inspect.signature(method).parameters.values()
        except (TypeError, ValueError):  # pragma: no cover - a C or odd callable
            continue
        named.update(
            p.name
            for p in parameters
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        )
    return frozenset(named - {"self", "path", "mode", "autocommit"})


def _credential_env() -> Tuple[Any, ...]:
    """The values of `_CREDENTIAL_ENV` (None where unset), cheaply: `os.environ.get` of
    an unset name raises and catches a KeyError inside, some microseconds each."""
    data = getattr(os.environ, "_data", None)  # CPython's own mapping behind os.environ
    if isinstance(data, dict):
        return tuple(map(data.get, _encoded_credential_env()))
    return tuple(map(os.environ.get, _CREDENTIAL_ENV))


@lru_cache(maxsize=1)
def _encoded_credential_env() -> Tuple[Any, ...]:
    encode = getattr(os.environ, "encodekey", lambda key: key)
    return tuple(map(encode, _CREDENTIAL_ENV))


def _first_component(fspath: str) -> str:
    return fspath.strip("/").split("/", 1)[0]


def _uid() -> str:
    getuid = getattr(os, "getuid", None)
    return str(getuid()) if getuid is not None else os.environ.get("USERNAME", "")


def handler_on_first_use(path: str) -> Tuple[Optional[PathHandler], str]:
    """A handler for `path`'s `scheme://` when fsspec serves the scheme through a package
    of its own (s3fs, gcsfs, adlfs, ...) that is installed, or the scheme is `memory` or
    `file`; registered with [`PathManager`][easycore.common.path.PathManager]. Else
    `(None, a hint)`.

    Protocols fsspec implements itself over the network or over other files (`ftp`,
    `sftp`, `smb`, `zip`, `github`, ...) are served only when registered explicitly:
    nobody should reach a server because a string happened to start with `ftp://`.

    Args:
        path (str): a path whose scheme no registered prefix serves (scheme lower-cased).

    Returns:
        tuple: `(handler, "")`, or `(None, a hint for the error message)`.
    """
    import importlib.util

    protocol = path.split("://", 1)[0]
    if protocol in _WRAPPERS or importlib.util.find_spec("fsspec") is None:
        return None, ""
    from fsspec.registry import get_filesystem_class, known_implementations

    known = known_implementations.get(protocol)
    if known is None:
        return None, ""
    explicit = (
        f"fsspec knows {protocol}://: serve it with "
        f"PathManager.register(FsspecPathHandler({protocol!r}, storage_options=...))"
    )
    if str(known.get("class", "")).startswith("fsspec.") and protocol not in _BUILT_IN_AUTO:
        return None, explicit
    try:
        get_filesystem_class(protocol)
    except ImportError as exc:
        return None, f"fsspec serves {protocol}:// once its package is installed ({exc})"
    from .manager import PathManager, _handlers

    prefix = f"{protocol}://"
    handler = _handlers.get(prefix)
    if handler is None:
        handler = FsspecPathHandler(protocol)
        try:
            PathManager.register(handler)
        except ValueError:  # another thread registered it meanwhile: use theirs
            handler = _handlers[prefix]
    return handler, ""
