"""`PathManager`: one API for every registered kind of path."""

import os
from typing import IO, Any, Dict, List, NoReturn, Optional, Tuple, Union

from easycore.common.network.urls import redact

from .http import HTTPURLHandler
from .iopath_spellings import IopathSpellings
from .keywords import check_keywords, checked_path
from .native import NativePathHandler
from .path_handler import PathHandler
from .prefixes import has_scheme, leads, normalise_scheme

__all__ = ["PathManager"]

PathLike = Union[str, "os.PathLike[str]"]

# Keyed by prefix with its scheme lower-cased (see .prefixes): "HTTP://x" finds "http://".
_handlers: Dict[str, PathHandler] = {}
_prefixes: Tuple[str, ...] = ()  # longest first, so the longest match wins
_native = NativePathHandler()


def _handler_for(path: str) -> Tuple[PathHandler, str]:
    """The handler of `path`, and `path` as every handler gets it: its scheme lower-cased.

    Schemes ignore case (RFC 3986): `MEMORY://b/x` is `memory://b/x` for whichever
    handler serves it, normalised here once rather than by each handler.
    """
    # Hot path (every cache hit goes through here): plain prefix tests first; the scheme
    # is lower-cased only for paths that no prefix leads as they are spelt.
    for prefix in _prefixes:
        # leads(prefix, path), inlined: a prefix ending in "/" (as "http://") leads all
        if path.startswith(prefix) and (
            prefix[-1] in "/:" or len(path) == len(prefix) or path[len(prefix)] == "/"
        ):
            # A registered prefix is normalised: its scheme, as spelt here, is lower-case.
            return _handlers[prefix], path
    if not has_scheme(path):
        return _native, path
    key = normalise_scheme(path)
    if key != path:
        for prefix in _prefixes:
            if leads(prefix, key):
                return _handlers[prefix], key
    # A scheme fsspec knows gets an FsspecPathHandler on first use (imports fsspec only now).
    from .fsspec_handler import handler_on_first_use

    handler, hint = handler_on_first_use(key)
    if handler is not None:
        return handler, key
    known = ", ".join(sorted(_handlers)) or "none"
    raise ValueError(
        f"no PathHandler registered for {redact(path)!r} (registered prefixes: {known}); "
        f"register one with PathManager.register(){'; ' + hint if hint else ''}"
    )


class PathManager(IopathSpellings):
    """A general path manager for URI.

    Each path goes to the registered [`PathHandler`][easycore.common.path.PathHandler]
    with the longest prefix that leads it (`http://` and `https://` are registered by
    default); paths matching no prefix are local. A `scheme://` that fsspec knows (`s3://`,
    `gs://`, `memory://`, ...) gets a
    [`FsspecPathHandler`][easycore.common.path.FsspecPathHandler] on first use when fsspec
    and the store's package are installed. A prefix matches whole path components
    (`dataset://a` serves `dataset://a/x`, not `dataset://ab/x`) and its scheme ignores
    case (`HTTP://` is `http://`). An unregistered `scheme://` is an error rather than a
    local path.

    Examples:
        ```python
        with PathManager.open("http://xxx.com/yyy.txt", "r", encoding="utf-8") as f:
            print(f.read())
        PathManager.register(RedirectPathHandler("dataset://", "/data/"))
        PathManager.exists("dataset://MNIST/train.npz")
        ```

    iopath's spellings work too (`ls`, `mkdirs`, `rm`, `mv`, `symlink`, `set_cwd`,
    `register_handler`, `get_local_path(force=, cache_dir=)`, `opena` with `async_join`
    and `async_close`, `opent`, `set_strict_kwargs_checking`), with iopath's meaning
    (see "Coming from iopath" in the documentation).
    """

    @staticmethod
    def register(handler: PathHandler, override: bool = False) -> None:
        """Register a path handler.

        Args:
            handler (PathHandler):
            override (bool): allow overriding existing handler for prefix.

        Raises:
            TypeError: `handler` is not a [`PathHandler`][easycore.common.path.PathHandler].
            ValueError: a prefix is already registered and `override` is False; nothing
                is registered then.
        """
        global _prefixes
        if not isinstance(handler, PathHandler):
            raise TypeError(f"expected a PathHandler, got {type(handler).__name__}")
        prefixes = [normalise_scheme(prefix) for prefix in handler._prefixes()]
        if not override:
            for prefix in prefixes:
                if prefix in _handlers:
                    raise ValueError(
                        f"prefix {prefix!r} is already registered to "
                        f"{type(_handlers[prefix]).__name__}; pass override=True to replace it"
                    )
        for prefix in prefixes:
            _handlers[prefix] = handler
        _prefixes = tuple(sorted(_handlers, key=len, reverse=True))

    @staticmethod
    def open(path: PathLike, mode: str = "r", **kwargs: Any) -> IO:
        """Open a stream to a URI, similar to the built-in `open`.

        Args:
            path (str): A URI supported by registered `PathHandler`.
            mode (str): Specifies the mode in which the file is opened. It defaults to 'r'.
            kwargs: other arguments of the built-in `open`, such as `encoding`, or of the
                handler's `open` (its
                [`open_keywords`][easycore.common.path.PathHandler.open_keywords]).

        Returns:
            IO: a file-like object.

        Raises:
            UnknownArgumentError: a keyword argument the handler does not take (see
                `set_strict_kwargs_checking`); nothing is opened.
        """
        handler, path = _handler_for(os.fspath(path))
        if kwargs:
            kwargs = check_keywords("open", path, kwargs, handler.open_keywords(path))
        return handler.open(path, mode, **kwargs)

    @staticmethod
    def copy(
        src_path: PathLike, dst_path: PathLike, overwrite: bool = False, **kwargs: NoReturn
    ) -> bool:
        """Copy a source path to a destination path.

        The source is made local first (a URL is downloaded into the cache), then copied
        with the destination handler's `copy_from_local`, which for
        local paths writes a temporary file and renames it into place.

        Args:
            src_path (str): A URI or local path supported by registered PathHandler.
            dst_path (str): A URI or local path supported by registered PathHandler.
            overwrite (bool): forcing overwrite of existing URI.
            kwargs: none taken; see `set_strict_kwargs_checking`.

        Returns:
            bool: True on success.

        Raises:
            FileExistsError: `dst_path` exists and `overwrite` is False.
        """
        checked_path("copy", src_path, kwargs)
        local_path = PathManager.get_local_path(src_path)
        return PathManager.copy_from_local(local_path, dst_path, overwrite)

    @staticmethod
    def copy_from_local(
        local_path: PathLike, dst_path: PathLike, overwrite: bool = False, **kwargs: NoReturn
    ) -> bool:
        """Copy a resource from local path to destination path.

        Note:
            This interface is for custom PathHandler, it is preferred to use `copy()`
            instead.

        Args:
            local_path (str): a local path.
            dst_path (str): A URI supported by registered PathHandler.
            overwrite (bool): forcing overwrite of existing URI.
            kwargs: none taken; see `set_strict_kwargs_checking`.

        Returns:
            bool: True on success.
        """
        handler, dst_path = _handler_for(checked_path("copy_from_local", dst_path, kwargs))
        local = _native._get_path_with_cwd(os.fspath(local_path))  # relative: as set_cwd says
        return handler.copy_from_local(local, dst_path, overwrite)

    @staticmethod
    def get_local_path(
        path: PathLike,
        force: bool = False,
        cache_dir: Optional[PathLike] = None,
        **kwargs: NoReturn,
    ) -> str:
        """Get a file path which is compatible with native Python I/O such as `open` and
        `os.path`.

        Note:
            If URI points to a remote resource, this function may download and cache the
            resource to local disk.

        Args:
            path (str): A URI supported by registered PathHandler.
            force (bool): download again even when a cached copy is there (iopath's
                argument); a local path is returned as it is.
            cache_dir (str or None): the cache directory to use instead of
                `get_cache_dir()` (iopath's argument; the protocol's folder is made
                inside it).
            kwargs: none taken; see `set_strict_kwargs_checking`.

        Returns:
            str: a file path which exists on the local file system.
        """
        handler, path = _handler_for(checked_path("get_local_path", path, kwargs))
        # Passed on only when given: a handler of the user's may take the path alone.
        options: Dict[str, Any] = {}
        if force:
            options["force"] = True
        if cache_dir is not None:
            options["cache_dir"] = os.fspath(cache_dir)
        return handler.get_local_path(path, **options)

    @staticmethod
    def exists(path: PathLike, **kwargs: NoReturn) -> bool:
        """Checks if there is a resource at the given URI.

        Args:
            path (str): A URI supported by registered PathHandler.
            kwargs: none taken; see `set_strict_kwargs_checking`.

        Returns:
            bool: True if the path exists.
        """
        handler, path = _handler_for(checked_path("exists", path, kwargs))
        return handler.exists(path)

    @staticmethod
    def isfile(path: PathLike, **kwargs: NoReturn) -> bool:
        """Checks if the resource at the given URI is a file.

        Args:
            path (str): A URI supported by registered PathHandler.
            kwargs: none taken; see `set_strict_kwargs_checking`.

        Returns:
            bool: True if the path is a file.
        """
        handler, path = _handler_for(checked_path("isfile", path, kwargs))
        return handler.isfile(path)

    @staticmethod
    def isdir(path: PathLike, **kwargs: NoReturn) -> bool:
        """Checks if the resource at the given URI is a directory.

        Args:
            path (str): A URI supported by registered PathHandler.
            kwargs: none taken; see `set_strict_kwargs_checking`.

        Returns:
            bool: True if the path is a directory.
        """
        handler, path = _handler_for(checked_path("isdir", path, kwargs))
        return handler.isdir(path)

    @staticmethod
    def listdir(path: PathLike, **kwargs: NoReturn) -> List[str]:
        """List the contents of the directory at the given URI.

        Args:
            path (str): A URI supported by registered PathHandler.
            kwargs: none taken; see `set_strict_kwargs_checking`.

        Returns:
            List[str]: list of contents in the given path.
        """
        handler, path = _handler_for(checked_path("listdir", path, kwargs))
        return handler.listdir(path)

    @staticmethod
    def makedirs(path: PathLike, **kwargs: NoReturn) -> None:
        """Recursive directory creation function. Similar to `os.makedirs(path,
        exist_ok=True)`.

        Args:
            path (str): A URI supported by registered PathHandler.
            kwargs: none taken; see `set_strict_kwargs_checking`.
        """
        handler, path = _handler_for(checked_path("makedirs", path, kwargs))
        handler.makedirs(path)

    @staticmethod
    def remove(path: PathLike, **kwargs: NoReturn) -> None:
        """Remove the file (not directory) at the given URI.

        Args:
            path (str): A URI supported by registered PathHandler.
            kwargs: none taken; see `set_strict_kwargs_checking`.
        """
        handler, path = _handler_for(checked_path("remove", path, kwargs))
        handler.remove(path)

    @staticmethod
    def removedirs(path: PathLike, **kwargs: NoReturn) -> None:
        """Remove directories recursively, similar to `os.removedirs`.

        Args:
            path (str): A URI supported by registered PathHandler.
            kwargs: none taken; see `set_strict_kwargs_checking`.
        """
        handler, path = _handler_for(checked_path("removedirs", path, kwargs))
        handler.removedirs(path)


PathManager.register(HTTPURLHandler())
