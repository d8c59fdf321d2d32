"""iopath's spellings on `PathManager`, where they mean what easycore already does.

Code written for iopath (and fvcore, detectron2, which use it) calls `ls`, `mkdirs`,
`rm`, `mv`, `symlink`, `set_cwd`, `register_handler`, `opena` and `async_join`,
`set_strict_kwargs_checking`, and passes `force=` or `cache_dir=` to
`get_local_path`. They are `PathManager`'s too, through `IopathSpellings`; and
`PathManagerFactory` hands out named managers. As everywhere in easycore, a failure
raises (iopath's `mv` and `symlink` log it and return False) and a destination is
never silently replaced.
"""

import os
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    ClassVar,
    Dict,
    List,
    NoReturn,
    Optional,
    Set,
    Union,
)

from .keywords import checked_path, set_strict

if TYPE_CHECKING:
    from .async_writes import AsyncWriter
    from .manager import PathManager
    from .path_handler import PathHandler

__all__ = ["IopathSpellings", "PathManagerFactory"]

PathLike = Union[str, "os.PathLike[str]"]


def _lane_key(path: PathLike) -> str:
    """The path as `opena`'s writes are queued by: one queue per file, however spelt."""
    from .manager import _handler_for, _native

    handler, key = _handler_for(os.fspath(path))
    return os.path.abspath(_native._get_path_with_cwd(key)) if handler is _native else key


class IopathSpellings:
    """iopath's methods of `PathManager` (see the module's doc)."""

    # iopath's names for the native handler and the handlers with asynchronous writes,
    # which code written for iopath (its own tests among it) reaches into. easycore
    # keeps its writes' queues by path (.async_writes): this set stays empty.
    @property
    def _native_path_handler(self) -> "PathHandler":
        from .manager import _native

        return _native

    _async_handlers: ClassVar[Set["PathHandler"]] = set()

    @staticmethod
    def ls(path: PathLike, **kwargs: NoReturn) -> List[str]:
        """List the contents of a directory (iopath's name for `listdir`).

        Args:
            path (str): A URI supported by registered PathHandler.
            kwargs: none taken; see `set_strict_kwargs_checking`.

        Returns:
            List[str]: the names in the directory.
        """
        from .manager import PathManager

        return PathManager.listdir(checked_path("ls", path, kwargs))

    @staticmethod
    def mkdirs(path: PathLike, **kwargs: NoReturn) -> None:
        """Create a directory and its parents (iopath's name for `makedirs`).

        Args:
            path (str): A URI supported by registered PathHandler.
            kwargs: none taken; see `set_strict_kwargs_checking`.
        """
        from .manager import PathManager

        PathManager.makedirs(checked_path("mkdirs", path, kwargs))

    @staticmethod
    def rm(path: PathLike, **kwargs: NoReturn) -> None:
        """Remove a file (iopath's name for `remove`).

        Args:
            path (str): A URI supported by registered PathHandler.
            kwargs: none taken; see `set_strict_kwargs_checking`.
        """
        from .manager import PathManager

        PathManager.remove(checked_path("rm", path, kwargs))

    @staticmethod
    def mv(src_path: PathLike, dst_path: PathLike, **kwargs: NoReturn) -> bool:
        """Move a file or directory to a new path of the same handler.

        Args:
            src_path (str): what to move.
            dst_path (str): where; nothing may be there yet.
            kwargs: none taken; see `set_strict_kwargs_checking`.

        Returns:
            bool: True.

        Raises:
            FileExistsError: something is at `dst_path`.
            FileNotFoundError: nothing is at `src_path`.
            NotImplementedError: the two paths belong to different handlers (copy, then
                remove), or the handler cannot move.
        """
        from .manager import _handler_for

        handler, src = _handler_for(checked_path("mv", src_path, kwargs))
        dst_handler, dst = _handler_for(os.fspath(dst_path))
        if dst_handler is not handler:
            raise NotImplementedError(
                f"cannot move {src!r} to {dst!r}: they belong to different handlers "
                f"({type(handler).__name__}, {type(dst_handler).__name__}); copy, then remove"
            )
        return handler.mv(src, dst)

    @staticmethod
    def symlink(src_path: PathLike, dst_path: PathLike, **kwargs: NoReturn) -> bool:
        """Make `dst_path` a symbolic link to `src_path` (local paths).

        Args:
            src_path (str): what the link points to.
            dst_path (str): the link to create.
            kwargs: none taken; see `set_strict_kwargs_checking`.

        Returns:
            bool: True.

        Raises:
            FileExistsError: something is at `dst_path`.
            NotImplementedError: a path of a handler without links (a URL).
        """
        from .manager import _handler_for

        handler, src = _handler_for(checked_path("symlink", src_path, kwargs))
        dst_handler, dst = _handler_for(os.fspath(dst_path))
        if dst_handler is not handler:
            raise NotImplementedError(f"cannot link {dst!r} to {src!r} across handlers")
        return handler.symlink(src, dst)

    @staticmethod
    def set_cwd(path: Optional[PathLike], **kwargs: NoReturn) -> bool:
        """Resolve relative local paths against `path` from now on; None goes back to
        the process's working directory (which `os.chdir` changes, this does not).

        Args:
            path (str or None): an existing local directory, or None.
            kwargs: none taken; see `set_strict_kwargs_checking`.

        Returns:
            bool: True.

        Raises:
            ValueError: `path` is not an existing directory.
            NotImplementedError: `path` is a URL.
        """
        from .manager import _handler_for, _native

        if path is None:
            checked_path("set_cwd", "None", kwargs)
            return _native.set_cwd(None)
        handler, path = _handler_for(checked_path("set_cwd", path, kwargs))
        return handler.set_cwd(path)

    @staticmethod
    def set_strict_kwargs_checking(enable: bool) -> None:
        """Refuse keyword arguments an operation does not take (True, the default), or
        drop them with a warning (False), as iopath's switch does.

        Code written for iopath may pass options of iopath's own handlers (say
        `PathManager.open(url, cache_timeout=60)`); with checking off they are dropped
        and logged on the `easycore.common.path` logger. Refused, they raise
        [`UnknownArgumentError`][easycore.common.path.UnknownArgumentError], a
        `TypeError` as Python raises and a `ValueError` as iopath raises. The setting is
        the process's, as the registered handlers are.

        Args:
            enable (bool): refuse unknown keyword arguments.
        """
        set_strict(enable)

    @staticmethod
    def opena(
        path: PathLike,
        mode: str = "r",
        buffering: int = -1,
        callback_after_file_close: Optional[Callable[[], Any]] = None,
        **kwargs: Any,
    ) -> "AsyncWriter":
        """Open a file whose writes run in the background (iopath's `opena`).

        The file is opened now; `write`, `flush` and `close` return at once and run in
        a thread of the path, in order (see
        [`async_writes`][easycore.common.path.async_writes]). Call
        [`async_join`][easycore.common.path.PathManager.async_join] to wait for them and
        learn whether they succeeded.

        Examples:
            ```python
            for epoch in range(epochs):
                with PathManager.opena("metrics.jsonl", "a") as f:
                    f.write(json.dumps(train_one_epoch()) + "\\n")  # training goes on
            PathManager.async_close()  # waits; raises if a write failed
            ```

        Args:
            path (str): A URI supported by registered PathHandler.
            mode (str): `"w"`, `"a"` or `"x"`, with `"b"` for bytes. iopath's default,
                `"r"`, is refused, as there: reads are not asynchronous.
            buffering (int): as for `open`.
            callback_after_file_close (callable or None): called without arguments in
                the background once the file is closed, unless a write failed (say, to
                upload the file).
            kwargs: other arguments of `open`, such as `encoding`.

        Returns:
            AsyncWriter: a file-like object
            ([`AsyncWriter`][easycore.common.path.async_writes.AsyncWriter]); a context
            manager.

        Raises:
            ValueError: a mode that reads.
            UnknownArgumentError: a keyword argument `open` does not take.
        """
        from .async_writes import AsyncWriter
        from .manager import PathManager

        if not mode or not set(mode) <= set("waxb") or len(set(mode) & set("wax")) != 1:
            raise ValueError(
                f"opena({os.fspath(path)!r}, {mode!r}): asynchronous files are written "
                "('w', 'a' or 'x', with 'b' for bytes), not read"
            )
        if buffering != -1:
            kwargs["buffering"] = buffering
        stream = PathManager.open(path, mode, **kwargs)
        return AsyncWriter(_lane_key(path), stream, "b" in mode, callback_after_file_close)

    @staticmethod
    def async_join(*paths: PathLike) -> bool:
        """Wait until the writes of `opena` files to `paths` (to every path, if none is
        given) are done (iopath's `async_join`).

        Args:
            paths (str): the paths given to `opena`.

        Returns:
            bool: True.

        Raises:
            Exception: the first error a write, close or callback of those paths met
                since they were last joined (reported once; an `OSError` names the path).
        """
        from . import async_writes  # threads: imported on first use

        return async_writes.join([_lane_key(path) for path in paths] if paths else None)

    @staticmethod
    def async_close() -> bool:
        """Wait until every `opena` file's writes are done (iopath's `async_close`;
        there is no thread pool to shut: a path's thread ends with its writes).

        Returns:
            bool: True.

        Raises:
            Exception: the first error a write met (see `async_join`).
        """
        from . import async_writes

        return async_writes.join()

    @staticmethod
    def opent(path: PathLike, mode: str = "r", buffering: int = 32, **kwargs: Any) -> Any:
        """Open a tabular data source, an iterable of rows (iopath's `opent`): for the
        handlers of table stores that implement
        [`PathHandler.opent`][easycore.common.path.PathHandler.opent].

        Args:
            path (str): A URI supported by registered PathHandler.
            mode (str): 'r'.
            buffering (int): how many rows to fetch at a time.
            kwargs: the handler's options.

        Returns:
            Iterable: the rows.

        Raises:
            NotImplementedError: the handler serves no tables (none of easycore's does,
                nor iopath's local, HTTP and S3 handlers).
        """
        from .manager import _handler_for

        handler, path = _handler_for(os.fspath(path))
        return handler.opent(path, mode, buffering, **kwargs)

    @staticmethod
    def register_handler(handler: "PathHandler", allow_override: bool = True) -> None:
        """Register a path handler (iopath's name for `register`, which replaces an
        existing handler by default, as iopath does).

        Args:
            handler (PathHandler): the handler.
            allow_override (bool): replace the handler of a prefix already registered.
        """
        from .manager import PathManager

        PathManager.register(handler, override=allow_override)


class PathManagerFactory:
    """Named `PathManager`s, as iopath hands them out (`PathManagerFactory.get("mine")`).

    easycore has one registry of handlers per process: every manager the factory
    returns serves the same handlers (a handler registered through one serves all),
    and `remove` only forgets the name. Code written for iopath runs unchanged; a
    library that needs a prefix of its own registers a handler for it.
    """

    #: The name `get` uses when given none (iopath's).
    GLOBAL_PATH_MANAGER = "global_path_manager"
    pm_list: ClassVar[Dict[str, "PathManager"]] = {}

    @staticmethod
    def get(key: str = GLOBAL_PATH_MANAGER, defaults_setup: bool = False) -> "PathManager":
        """The manager named `key`, made on first use.

        Args:
            key (str): its name.
            defaults_setup (bool): iopath's switch for registering its default handlers;
                easycore's are registered already.

        Returns:
            PathManager: the same object for the same name until it is removed.
        """
        from .manager import PathManager

        del defaults_setup
        return PathManagerFactory.pm_list.setdefault(key, PathManager())

    @staticmethod
    def remove(key: str) -> None:
        """Forget the manager named `key` (nothing happens if there is none).

        Args:
            key (str): its name.
        """
        PathManagerFactory.pm_list.pop(key, None)
