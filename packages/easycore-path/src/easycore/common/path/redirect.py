"""``RedirectPathHandler``: serve a new prefix from an existing one, local or remote."""

from typing import IO, Any, List

from .manager import PathManager
from .path_handler import PathHandler

__all__ = ["RedirectPathHandler"]


class RedirectPathHandler(PathHandler):
    """Redirect a new prefix to existed prefix.

    Every operation rewrites the path with :meth:`redirect` and hands it back to
    :class:`PathManager`, so the target may be a local directory, a URL or another
    redirected prefix.

    Example:
    ::

        PathManager.register(RedirectPathHandler("easycore://", "http://xxx.com/download/"))
        PathManager.register(RedirectPathHandler("dataset://MNIST/", "/data/MNIST/"))

    Args:
        new_prefix (str): the prefix to serve, e.g. ``"dataset://"``.
        old_prefix (str): what it stands for, e.g. ``"/data/"`` or ``"https://host/dl/"``.
    """

    def __init__(self, new_prefix: str, old_prefix: str) -> None:
        if not new_prefix:
            raise ValueError("new_prefix must not be empty")
        if old_prefix.startswith(new_prefix):
            raise ValueError(f"redirecting {new_prefix!r} to {old_prefix!r} would loop forever")
        self.new_prefix = new_prefix
        self.old_prefix = old_prefix

    def __repr__(self) -> str:
        return f"RedirectPathHandler({self.new_prefix!r}, {self.old_prefix!r})"

    def get_supported_prefixes(self) -> List[str]:
        """
        Returns:
            List[str]: ``[new_prefix]``.
        """
        return [self.new_prefix]

    def redirect(self, path: str) -> str:
        """Redirect path from new_prefix to old_prefix path.

        Args:
            path (str): path of new_prefix.

        Returns:
            str: path of old_prefix.

        Raises:
            ValueError: ``path`` does not start with ``new_prefix``.
        """
        if not path.startswith(self.new_prefix):
            raise ValueError(f"{path!r} does not start with {self.new_prefix!r}")
        return self.old_prefix + path[len(self.new_prefix) :]

    def get_local_path(self, path: str) -> str:
        """Get a file path which is compatible with native Python I/O such as ``open`` and
        ``os.path``.

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            local_path (str): a file path which exists on the local file system.
        """
        return PathManager.get_local_path(self.redirect(path))

    def open(self, path: str, mode: str = "r", **kwargs: Any) -> IO:
        """Open a stream to a URI, similar to the built-in ``open``.

        Args:
            path (str): A URI supported by this PathHandler.
            mode (str): Specifies the mode in which the file is opened. It defaults to 'r'.
            kwargs: other arguments of the built-in ``open``, such as ``encoding``.

        Returns:
            IO: a file-like object.
        """
        return PathManager.open(self.redirect(path), mode, **kwargs)

    def exists(self, path: str) -> bool:
        """Checks if there is a resource at the given URI.

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            bool: True if the path exists.
        """
        return PathManager.exists(self.redirect(path))

    def isfile(self, path: str) -> bool:
        """Checks if the resource at the given URI is a file.

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            bool: True if the path is a file.
        """
        return PathManager.isfile(self.redirect(path))

    def isdir(self, path: str) -> bool:
        """Checks if the resource at the given URI is a directory.

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            bool: True if the path is a directory.
        """
        return PathManager.isdir(self.redirect(path))

    def listdir(self, path: str) -> List[str]:
        """List the contents of the directory at the given URI.

        Args:
            path (str): A URI supported by the PathHandler.

        Returns:
            List[str]: list of contents in given path.
        """
        return PathManager.listdir(self.redirect(path))

    def makedirs(self, path: str) -> None:
        """Recursive directory creation function. Similar to ``os.makedirs``.

        Args:
            path (str): A URI supported by this PathHandler.
        """
        PathManager.makedirs(self.redirect(path))

    def remove(self, path: str) -> None:
        """Remove the file (not directory) at the given URI.

        Args:
            path (str): A URI supported by this PathHandler.
        """
        PathManager.remove(self.redirect(path))

    def removedirs(self, path: str) -> None:
        """Remove directories recursively.

        Args:
            path (str): A URI supported by this PathHandler.
        """
        PathManager.removedirs(self.redirect(path))

    def copy_from_local(self, local_path: str, dst_path: str, overwrite: bool = False) -> bool:
        """Copy a local file to the given URI.

        Args:
            local_path (str): a local file path
            dst_path (str): A URI supported by this PathHandler.
            overwrite (bool): forcing overwrite of existing URI.

        Returns:
            bool: True on success.
        """
        return PathManager.copy_from_local(local_path, self.redirect(dst_path), overwrite)
