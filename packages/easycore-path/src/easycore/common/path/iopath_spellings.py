"""iopath's spellings on `PathManager`, where they mean what easycore already does.

Code written for iopath (and fvcore, detectron2, which use it) calls `ls`, `mkdirs`,
`rm`, `mv`, `symlink`, `set_cwd`, `register_handler`, and passes `force=` or
`cache_dir=` to `get_local_path`. They are `PathManager`'s too, through
`IopathSpellings`. As everywhere in easycore, a failure raises (iopath's `mv` and
`symlink` log it and return False) and a destination is never silently replaced.
"""

import os
from typing import TYPE_CHECKING, ClassVar, List, Optional, Set, Union

if TYPE_CHECKING:
    from .path_handler import PathHandler

__all__ = ["IopathSpellings"]

PathLike = Union[str, "os.PathLike[str]"]


class IopathSpellings:
    """iopath's methods of `PathManager` (see the module's doc)."""

    # iopath's names for the native handler and its pending asynchronous writes, which
    # code written for iopath (its own tests among it) reaches into. easycore writes
    # synchronously: nothing is ever pending.
    @property
    def _native_path_handler(self) -> "PathHandler":
        from .manager import _native

        return _native

    _async_handlers: ClassVar[Set["PathHandler"]] = set()

    @staticmethod
    def ls(path: PathLike) -> List[str]:
        """List the contents of a directory (iopath's name for `listdir`).

        Args:
            path (str): A URI supported by registered PathHandler.

        Returns:
            List[str]: the names in the directory.
        """
        from .manager import PathManager

        return PathManager.listdir(path)

    @staticmethod
    def mkdirs(path: PathLike) -> None:
        """Create a directory and its parents (iopath's name for `makedirs`).

        Args:
            path (str): A URI supported by registered PathHandler.
        """
        from .manager import PathManager

        PathManager.makedirs(path)

    @staticmethod
    def rm(path: PathLike) -> None:
        """Remove a file (iopath's name for `remove`).

        Args:
            path (str): A URI supported by registered PathHandler.
        """
        from .manager import PathManager

        PathManager.remove(path)

    @staticmethod
    def mv(src_path: PathLike, dst_path: PathLike) -> bool:
        """Move a file or directory to a new path of the same handler.

        Args:
            src_path (str): what to move.
            dst_path (str): where; nothing may be there yet.

        Returns:
            bool: True.

        Raises:
            FileExistsError: something is at `dst_path`.
            FileNotFoundError: nothing is at `src_path`.
            NotImplementedError: the two paths belong to different handlers (copy, then
                remove), or the handler cannot move.
        """
        from .manager import _handler_for

        handler, src = _handler_for(os.fspath(src_path))
        dst_handler, dst = _handler_for(os.fspath(dst_path))
        if dst_handler is not handler:
            raise NotImplementedError(
                f"cannot move {src!r} to {dst!r}: they belong to different handlers "
                f"({type(handler).__name__}, {type(dst_handler).__name__}); copy, then remove"
            )
        return handler.mv(src, dst)

    @staticmethod
    def symlink(src_path: PathLike, dst_path: PathLike) -> bool:
        """Make `dst_path` a symbolic link to `src_path` (local paths).

        Args:
            src_path (str): what the link points to.
            dst_path (str): the link to create.

        Returns:
            bool: True.

        Raises:
            FileExistsError: something is at `dst_path`.
            NotImplementedError: a path of a handler without links (a URL).
        """
        from .manager import _handler_for

        handler, src = _handler_for(os.fspath(src_path))
        dst_handler, dst = _handler_for(os.fspath(dst_path))
        if dst_handler is not handler:
            raise NotImplementedError(f"cannot link {dst!r} to {src!r} across handlers")
        return handler.symlink(src, dst)

    @staticmethod
    def set_cwd(path: Optional[PathLike]) -> bool:
        """Resolve relative local paths against `path` from now on; None goes back to
        the process's working directory (which `os.chdir` changes, this does not).

        Args:
            path (str or None): an existing local directory, or None.

        Returns:
            bool: True.

        Raises:
            ValueError: `path` is not an existing directory.
            NotImplementedError: `path` is a URL.
        """
        from .manager import _handler_for, _native

        if path is None:
            return _native.set_cwd(None)
        handler, path = _handler_for(os.fspath(path))
        return handler.set_cwd(path)

    @staticmethod
    def set_strict_kwargs_checking(enable: bool) -> None:
        """iopath's switch for refusing unknown keyword arguments: easycore always
        refuses them (Python's `TypeError`), so only `True` is accepted.

        Args:
            enable (bool): must be True.

        Raises:
            ValueError: `enable` is False: easycore never drops an argument it does not
                know (a typo such as `encodng=` would go unnoticed).
        """
        if not enable:
            raise ValueError(
                "easycore always refuses unknown keyword arguments; fix the call instead"
            )

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
