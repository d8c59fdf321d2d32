"""`NativePathHandler`: local paths, straight onto `open`, `os` and `shutil`.

Errors are the operating system's own (`FileNotFoundError`, `FileExistsError` ...),
carrying the path they are about.
"""

import errno
import os
import shutil
from typing import IO, AbstractSet, Any, List, Optional

from . import local_write
from .keywords import BUILTIN_OPEN_KEYWORDS
from .path_handler import PathHandler

__all__ = ["NativePathHandler"]


class NativePathHandler(PathHandler):
    """PathHandler for local path.

    It is the fallback of [`PathManager`][easycore.common.path.PathManager]: paths no
    other handler claims are local. Relative paths are taken from the working
    directory, or from the directory given to
    [`set_cwd`][easycore.common.path.NativePathHandler.set_cwd].
    """

    #: The directory relative paths are taken from (`set_cwd`); None: the process's.
    _cwd: Optional[str] = None

    def _get_path_with_cwd(self, path: str) -> str:
        """`path`, relative to the directory `set_cwd` gave if there is one."""
        path = os.fspath(path)
        if not path or self._cwd is None:
            return path
        return os.path.normpath(os.path.join(self._cwd, path))

    def set_cwd(self, path: Optional[str]) -> bool:
        """Take relative paths from `path` from now on (iopath's `set_cwd`); None goes
        back to the process's working directory.

        Args:
            path (str or None): an existing directory.

        Returns:
            bool: True.

        Raises:
            ValueError: `path` is not an existing directory.
        """
        if path is None:
            self._cwd = None
            return True
        resolved = self._get_path_with_cwd(os.fspath(path))
        if not os.path.isdir(resolved):
            raise ValueError(f"set_cwd: {path!r} is not an existing directory")
        self._cwd = os.path.abspath(resolved)
        return True

    def mv(self, src_path: str, dst_path: str) -> bool:
        """Move a local file or folder (`shutil.move`: a rename, or a copy across
        file systems); whatever is at `dst_path` stays, and the move is refused.

        Args:
            src_path (str): the file or folder.
            dst_path (str): its new path.

        Returns:
            bool: True once moved.

        Raises:
            FileExistsError: `dst_path` is taken.
            FileNotFoundError: `src_path` does not exist.
        """
        src, dst = self._get_path_with_cwd(src_path), self._get_path_with_cwd(dst_path)
        if not os.path.lexists(src):
            raise _os_error(errno.ENOENT, src_path)
        if os.path.lexists(dst):
            raise _os_error(errno.EEXIST, dst_path)
        shutil.move(src, dst)
        return True

    def symlink(self, src_path: str, dst_path: str) -> bool:
        """Make `dst_path` a symbolic link to `src_path`, like `os.symlink`.

        Args:
            src_path (str): what the link points to (kept as given when relative to
                the process's directory, as `os.symlink` keeps it).
            dst_path (str): the link to create.

        Returns:
            bool: True.

        Raises:
            FileExistsError: something is at `dst_path`.
        """
        os.symlink(self._get_path_with_cwd(src_path), self._get_path_with_cwd(dst_path))
        return True

    def get_supported_prefixes(self) -> List[str]:
        """
        Returns:
            List[str]: `[]`; local paths have no prefix, this handler is the fallback.
        """
        return []

    def get_local_path(
        self, path: str, force: bool = False, cache_dir: Optional[str] = None
    ) -> str:
        """Get a file path which is compatible with native Python I/O such as `open` and
        `os.path`.

        Args:
            path (str): A URI supported by this PathHandler.
            force (bool): nothing to download: ignored.
            cache_dir (str or None): nothing to cache: ignored.

        Returns:
            str: the path itself (taken from `set_cwd`'s directory if relative).
        """
        return self._get_path_with_cwd(path)

    def open(self, path: str, mode: str = "r", **kwargs: Any) -> IO:
        """Open a stream to a URI, similar to the built-in `open`.

        Args:
            path (str): A URI supported by this PathHandler.
            mode (str): Specifies the mode in which the file is opened. It defaults to 'r'.
            kwargs: other arguments of the built-in `open`, such as `encoding`.

        Returns:
            IO: a file-like object.
        """
        return open(self._get_path_with_cwd(path), mode, **kwargs)

    def open_keywords(self, path: str) -> Optional[AbstractSet[str]]:
        """
        Returns:
            set or None: the built-in `open`'s keyword arguments (None for a subclass
            with an `open` of its own, which decides).
        """
        return BUILTIN_OPEN_KEYWORDS if type(self).open is NativePathHandler.open else None

    def exists(self, path: str) -> bool:
        """Checks if there is a resource at the given URI.

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            bool: True if the path exists.
        """
        return os.path.exists(self._get_path_with_cwd(path))

    def isfile(self, path: str) -> bool:
        """Checks if the resource at the given URI is a file.

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            bool: True if the path is a file.
        """
        return os.path.isfile(self._get_path_with_cwd(path))

    def isdir(self, path: str) -> bool:
        """Checks if the resource at the given URI is a directory.

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            bool: True if the path is a directory.
        """
        return os.path.isdir(self._get_path_with_cwd(path))

    def listdir(self, path: str) -> List[str]:
        """List the contents of the directory at the given URI, like `os.listdir`.

        Args:
            path (str): A URI supported by the PathHandler.

        Returns:
            List[str]: list of contents in given path.
        """
        return os.listdir(self._get_path_with_cwd(path))

    def makedirs(self, path: str) -> None:
        """Recursive directory creation function. Similar to `os.makedirs(path,
        exist_ok=True)`.

        Args:
            path (str): A URI supported by this PathHandler.
        """
        os.makedirs(self._get_path_with_cwd(path), exist_ok=True)

    def remove(self, path: str) -> None:
        """Remove the file (not directory) at the given URI, like `os.remove`.

        Args:
            path (str): A URI supported by this PathHandler.
        """
        os.remove(self._get_path_with_cwd(path))

    def removedirs(self, path: str) -> None:
        """Remove directories recursively, like `os.removedirs`: the leaf directory must
        be empty, and parents left empty are removed too.

        Args:
            path (str): A URI supported by this PathHandler.
        """
        os.removedirs(self._get_path_with_cwd(path))

    def copy_from_local(self, local_path: str, dst_path: str, overwrite: bool = False) -> bool:
        """Copy a local file to the given URI, atomically.

        The copy is written to a temporary file beside `dst_path` and renamed into place,
        so readers never see a partial file. Without `overwrite` the final step is a
        hard link, which fails rather than replace a file that appeared meanwhile. A
        symbolic link at `dst_path` is followed (with `overwrite`): its target gets the
        copy, as `open(dst_path, "w")` would write it.

        Args:
            local_path (str): a local file path
            dst_path (str): A URI supported by this PathHandler.
            overwrite (bool): forcing overwrite of existing URI.

        Returns:
            bool: True on success.

        Raises:
            FileExistsError: `dst_path` exists and `overwrite` is False.
            IsADirectoryError: `dst_path` is a directory.
            FileNotFoundError: `local_path` or the directory of `dst_path` is missing.
        """
        local_path = self._get_path_with_cwd(local_path)
        dst_path = self._get_path_with_cwd(dst_path)
        if os.path.isdir(dst_path):
            raise _os_error(errno.EISDIR, dst_path)
        if not overwrite and os.path.lexists(dst_path):
            raise _os_error(errno.EEXIST, dst_path)
        if not os.path.isdir(os.path.dirname(local_write.resolve_links(dst_path))):
            raise _os_error(errno.ENOENT, dst_path)
        fd, tmp, target = local_write.stage(dst_path)
        try:
            with open(fd, "wb") as out, open(local_path, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 20)
            shutil.copymode(local_path, tmp)
        except BaseException:
            local_write.discard(tmp)
            raise
        try:
            local_write.commit(tmp, target, exclusive=not overwrite)
        except FileExistsError:
            raise _os_error(errno.EEXIST, dst_path) from None
        return True


def _os_error(code: int, path: str) -> OSError:
    # OSError(errno, ...) builds the matching subclass, e.g. FileExistsError for EEXIST.
    return OSError(code, os.strerror(code), path)
