"""`PathHandler`: the contract every URI back-end of `PathManager` fulfils."""

import os
from typing import IO, AbstractSet, Any, List, Optional

__all__ = ["PathHandler"]

#: Where easycore cached before it followed the platform: still used if it exists.
DEFAULT_CACHE_DIR = "~/.easycore/cache"


def _default_cache_dir() -> str:
    legacy = os.path.expanduser(DEFAULT_CACHE_DIR)
    if os.path.isdir(legacy):
        return legacy
    from platformdirs import user_cache_dir  # only when no variable says where

    return user_cache_dir("easycore", appauthor=False)


class PathHandler:
    """Base Path handler class for a URI.

    It routes I/O for a generic URI which may look like "protocol://path/to/file". A
    handler declares the prefixes it serves with
    [`get_supported_prefixes`][easycore.common.path.PathHandler.get_supported_prefixes] and
    mirrors `open` and `os` for them; [`PathManager`][easycore.common.path.PathManager]
    sends each path to the handler with the longest matching prefix. Operations a handler
    does not support raise `NotImplementedError` naming the handler and the path.
    """

    def get_cache_dir(self, protocol: Optional[str] = None) -> str:
        """Return a cache directory like `<base-cache-dir>/protocol`.

        The `<base-cache-dir>` is

        1) `$EASYCORE_CACHE`, if set
        2) otherwise `~/.easycore/cache`, if that directory exists (earlier versions'
           default: an existing cache keeps being used)
        3) otherwise the platform's cache directory for easycore,
           `platformdirs.user_cache_dir("easycore")`: `$XDG_CACHE_HOME/easycore` or
           `~/.cache/easycore` on Linux, `~/Library/Caches/easycore` on macOS,
           `%LOCALAPPDATA%\\easycore\\Cache` on Windows

        A relative `$EASYCORE_CACHE` is taken relative to the working directory when it
        is read, and made absolute then: the paths `get_local_path` returns stay valid
        after an `os.chdir`.

        Args:
            protocol (str or None): protocol such as 'http', 'https'. If None, returns
                the base cache dir.

        Returns:
            str: the cache directory, an absolute path (not created here).
        """
        base = os.environ.get("EASYCORE_CACHE") or _default_cache_dir()
        base = os.path.abspath(os.path.expanduser(base))
        return os.path.join(base, protocol) if protocol else base

    def get_supported_prefixes(self) -> List[str]:
        """
        Returns:
            List[str]: the list of URI prefixes the PathHandler can support.
        """
        raise NotImplementedError(f"{type(self).__name__} must define get_supported_prefixes()")

    def get_support_prefixes(self) -> List[str]:
        """Alias of
        [`get_supported_prefixes`][easycore.common.path.PathHandler.get_supported_prefixes],
        as spelt in the easycore tutorial.

        A subclass may override either name;
        [`PathManager`][easycore.common.path.PathManager] uses the one defined by the most
        derived class.
        """
        return self.get_supported_prefixes()

    def get_local_path(self, path: str) -> str:
        """Get a file path which is compatible with native Python I/O such as `open` and
        `os.path`.

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            str: the path of a file that exists on the local file system.
        """
        raise self._unsupported("get_local_path", path)

    def open(self, path: str, mode: str = "r", **kwargs: Any) -> IO:
        """Open a stream to a URI, similar to the built-in `open`.

        Args:
            path (str): A URI supported by this PathHandler.
            mode (str): Specifies the mode in which the file is opened. It defaults to 'r'.
            kwargs: other arguments of the built-in `open`, such as `encoding`.

        Returns:
            IO: a file-like object.
        """
        raise self._unsupported("open", path)

    def open_keywords(self, path: str) -> Optional[AbstractSet[str]]:
        """The keyword arguments `open` takes for `path`, besides the mode.

        [`PathManager.open`][easycore.common.path.PathManager.open] refuses others
        before opening anything (or drops them with a warning, after
        `set_strict_kwargs_checking(False)`).

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            set or None: the names; None (the default) when `open` decides alone, as a
            handler of your own does.
        """
        return None

    def opent(self, path: str, mode: str = "r", buffering: int = 32, **kwargs: Any) -> Any:
        """Open a tabular data source: an iterable of rows (iopath's `opent`).

        None of easycore's handlers serves tables (nor do iopath's own local, HTTP and
        S3 handlers): a handler of yours for a table store may.

        Args:
            path (str): A URI supported by this PathHandler.
            mode (str): 'r'.
            buffering (int): how many rows to fetch at a time.
            kwargs: the handler's own options.

        Returns:
            Iterable: the rows; a context manager.
        """
        raise self._unsupported("opent", path)

    def exists(self, path: str) -> bool:
        """Checks if there is a resource at the given URI.

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            bool: True if the path exists.
        """
        raise self._unsupported("exists", path)

    def isfile(self, path: str) -> bool:
        """Checks if the resource at the given URI is a file.

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            bool: True if the path is a file.
        """
        raise self._unsupported("isfile", path)

    def isdir(self, path: str) -> bool:
        """Checks if the resource at the given URI is a directory.

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            bool: True if the path is a directory.
        """
        raise self._unsupported("isdir", path)

    def listdir(self, path: str) -> List[str]:
        """List the contents of the directory at the given URI.

        Args:
            path (str): A URI supported by the PathHandler.

        Returns:
            List[str]: list of contents in given path.
        """
        raise self._unsupported("listdir", path)

    def makedirs(self, path: str) -> None:
        """Recursive directory creation function. Similar to `os.makedirs`.

        Args:
            path (str): A URI supported by this PathHandler.
        """
        raise self._unsupported("makedirs", path)

    def remove(self, path: str) -> None:
        """Remove the file (not directory) at the given URI.

        Args:
            path (str): A URI supported by this PathHandler.
        """
        raise self._unsupported("remove", path)

    def removedirs(self, path: str) -> None:
        """Remove directories recursively.

        Args:
            path (str): A URI supported by this PathHandler.
        """
        raise self._unsupported("removedirs", path)

    def copy_from_local(self, local_path: str, dst_path: str, overwrite: bool = False) -> bool:
        """Copy a local file to the given URI.

        Args:
            local_path (str): a local file path
            dst_path (str): A URI supported by this PathHandler.
            overwrite (bool): forcing overwrite of existing URI.

        Returns:
            bool: True on success.
        """
        raise self._unsupported("copy_from_local", dst_path)

    def mv(self, src_path: str, dst_path: str) -> bool:
        """Move a file or directory to a new path of this handler.

        Args:
            src_path (str): what to move.
            dst_path (str): where; nothing may be there yet.

        Returns:
            bool: True on success.
        """
        raise self._unsupported("mv", src_path)

    def symlink(self, src_path: str, dst_path: str) -> bool:
        """Make `dst_path` a symbolic link to `src_path`.

        Args:
            src_path (str): what the link points to.
            dst_path (str): the link to create.

        Returns:
            bool: True on success.
        """
        raise self._unsupported("symlink", dst_path)

    def set_cwd(self, path: Optional[str]) -> bool:
        """Resolve this handler's relative paths against `path` (None: stop doing so).

        Args:
            path (str or None): a directory of this handler.

        Returns:
            bool: True on success.
        """
        raise self._unsupported("set_cwd", str(path))

    def _prefixes(self) -> List[str]:
        # The tutorial's custom handler overrides `get_support_prefixes`; the API docs
        # name `get_supported_prefixes`. Honour whichever the most derived class defines.
        for klass in type(self).__mro__:
            if "get_supported_prefixes" in vars(klass):
                return list(self.get_supported_prefixes())
            if "get_support_prefixes" in vars(klass):
                return list(self.get_support_prefixes())
        raise AssertionError("unreachable: PathHandler defines get_supported_prefixes")

    def _unsupported(self, operation: str, path: str) -> NotImplementedError:
        return NotImplementedError(f"{type(self).__name__} does not support {operation}: {path!r}")
