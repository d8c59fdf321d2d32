"""`RedirectPathHandler`: serve a new prefix from an existing one, local or remote."""

import contextlib
import os
import re
from contextvars import ContextVar
from typing import IO, Any, Iterator, List, Optional, Tuple
from urllib.parse import unquote

from easycore.common.network.urls import redact

from .manager import PathManager
from .path_handler import PathHandler
from .prefixes import has_scheme, split_prefix

__all__ = ["RedirectPathHandler"]

MAX_REDIRECTS = 32  # hops through redirected prefixes before a chain counts as a loop

# The paths being redirected in this thread (or task), outermost first.
_chain: ContextVar[Tuple[str, ...]] = ContextVar("easycore_redirect_chain", default=())


class RedirectPathHandler(PathHandler):
    """Redirect a new prefix to existed prefix.

    Every operation rewrites the path with
    [`redirect`][easycore.common.path.RedirectPathHandler.redirect] and hands it back to
    [`PathManager`][easycore.common.path.PathManager], so the target may be a local
    directory, a URL or another redirected prefix.

    The new prefix serves whole path components: `RedirectPathHandler("dataset://a", ...)`
    serves `dataset://a/train.npz` but not `dataset://ab/train.npz`. A path cannot leave
    the old prefix's root through `..` (a `ValueError` says so), and prefixes that
    redirect to each other raise a `ValueError` naming the chain instead of recursing.

    Examples:
        ```python
        handler = RedirectPathHandler("easycore://", "http://xxx.com/download/")
        PathManager.register(handler)
        handler = RedirectPathHandler("dataset://MNIST/", "/data/MNIST/")
        PathManager.register(handler)
        ```

    Args:
        new_prefix (str): the prefix to serve, e.g. `"dataset://"`.
        old_prefix (str): what it stands for, e.g. `"/data/"` or `"https://host/dl/"`.
    """

    def __init__(self, new_prefix: str, old_prefix: str) -> None:
        if not new_prefix:
            raise ValueError("new_prefix must not be empty")
        if split_prefix(new_prefix, old_prefix) is not None:
            raise ValueError(f"redirecting {new_prefix!r} to {old_prefix!r} would loop forever")
        self.new_prefix = new_prefix
        self.old_prefix = old_prefix

    def __repr__(self) -> str:
        return f"RedirectPathHandler({self.new_prefix!r}, {self.old_prefix!r})"

    def get_supported_prefixes(self) -> List[str]:
        """
        Returns:
            List[str]: `[new_prefix]`.
        """
        return [self.new_prefix]

    def redirect(self, path: str) -> str:
        """Redirect path from new_prefix to old_prefix path.

        Args:
            path (str): path of new_prefix.

        Returns:
            str: path of old_prefix.

        Raises:
            ValueError: `path` does not start with `new_prefix` (whole components; the
                scheme may differ in case), or climbs out of `old_prefix` through `..`.
        """
        rest = split_prefix(self.new_prefix, path)
        if rest is None:
            raise ValueError(f"{redact(path)!r} does not start with {self.new_prefix!r}")
        self._check_stays_inside(path, rest)
        return self.old_prefix + rest

    def _check_stays_inside(self, path: str, rest: str) -> None:
        if has_scheme(self.old_prefix):
            # A server may read %2e%2e as '..' and '\\' (or %5C) as '/': so do we. The
            # query and fragment are no part of the path.
            segments = re.split(r"[/\\]", unquote(re.split(r"[?#]", rest, maxsplit=1)[0]))
        else:
            segments = re.split(r"[/\\]" if os.name == "nt" else "/", rest)
        depth = 0
        for segment in segments:
            if segment == "..":
                depth -= 1
                if depth < 0:
                    raise ValueError(
                        f"refusing {redact(path)!r}: its '..' leaves {redact(self.old_prefix)!r}, "
                        f"the root {self.new_prefix!r} redirects to"
                    )
            elif segment not in ("", "."):
                depth += 1

    @contextlib.contextmanager
    def _redirected(self, path: str) -> Iterator[str]:
        """The redirected path, while this thread remembers it to catch loops."""
        chain = _chain.get()
        target = self.redirect(path)
        if path in chain or len(chain) >= MAX_REDIRECTS:
            hops = " -> ".join(
                redact(hop) for hop in [*chain[chain.index(path) if path in chain else 0 :], path]
            )
            raise ValueError(f"redirect loop: {hops} (after {len(chain)} redirects)")
        token = _chain.set((*chain, path))
        try:
            yield target
        finally:
            _chain.reset(token)

    def get_local_path(
        self, path: str, force: bool = False, cache_dir: Optional[str] = None
    ) -> str:
        """Get a file path which is compatible with native Python I/O such as `open` and
        `os.path`.

        Args:
            path (str): A URI supported by this PathHandler.
            force (bool): download again (see `PathManager.get_local_path`).
            cache_dir (str or None): the cache directory to use instead of the default.

        Returns:
            str: the path of a file that exists on the local file system.
        """
        with self._redirected(path) as target:
            return PathManager.get_local_path(target, force=force, cache_dir=cache_dir)

    def open(self, path: str, mode: str = "r", **kwargs: Any) -> IO:
        """Open a stream to a URI, similar to the built-in `open`.

        Args:
            path (str): A URI supported by this PathHandler.
            mode (str): Specifies the mode in which the file is opened. It defaults to 'r'.
            kwargs: other arguments of the built-in `open`, such as `encoding`.

        Returns:
            IO: a file-like object.
        """
        with self._redirected(path) as target:
            return PathManager.open(target, mode, **kwargs)

    def exists(self, path: str) -> bool:
        """Checks if there is a resource at the given URI.

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            bool: True if the path exists.
        """
        with self._redirected(path) as target:
            return PathManager.exists(target)

    def isfile(self, path: str) -> bool:
        """Checks if the resource at the given URI is a file.

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            bool: True if the path is a file.
        """
        with self._redirected(path) as target:
            return PathManager.isfile(target)

    def isdir(self, path: str) -> bool:
        """Checks if the resource at the given URI is a directory.

        Args:
            path (str): A URI supported by this PathHandler.

        Returns:
            bool: True if the path is a directory.
        """
        with self._redirected(path) as target:
            return PathManager.isdir(target)

    def listdir(self, path: str) -> List[str]:
        """List the contents of the directory at the given URI.

        Args:
            path (str): A URI supported by the PathHandler.

        Returns:
            List[str]: list of contents in given path.
        """
        with self._redirected(path) as target:
            return PathManager.listdir(target)

    def makedirs(self, path: str) -> None:
        """Recursive directory creation function. Similar to `os.makedirs`.

        Args:
            path (str): A URI supported by this PathHandler.
        """
        with self._redirected(path) as target:
            PathManager.makedirs(target)

    def remove(self, path: str) -> None:
        """Remove the file (not directory) at the given URI.

        Args:
            path (str): A URI supported by this PathHandler.
        """
        with self._redirected(path) as target:
            PathManager.remove(target)

    def removedirs(self, path: str) -> None:
        """Remove directories recursively.

        Args:
            path (str): A URI supported by this PathHandler.
        """
        with self._redirected(path) as target:
            PathManager.removedirs(target)

    def mv(self, src_path: str, dst_path: str) -> bool:
        """Move, as the handler of the redirected paths does: both are rewritten first.

        Args:
            src_path (str): a path of this prefix.
            dst_path (str): a path of this prefix.

        Returns:
            bool: what the target handler's `mv` returns.
        """
        with self._redirected(src_path) as src, self._redirected(dst_path) as dst:
            return PathManager.mv(src, dst)

    def symlink(self, src_path: str, dst_path: str) -> bool:
        """Link, as the handler of the redirected paths does: `src_path` and `dst_path`
        are both rewritten first.

        Args:
            src_path (str): a path of this prefix, the link's target.
            dst_path (str): a path of this prefix, for the link.

        Returns:
            bool: what the target handler's `symlink` returns.
        """
        with self._redirected(src_path) as src, self._redirected(dst_path) as dst:
            return PathManager.symlink(src, dst)

    def copy_from_local(self, local_path: str, dst_path: str, overwrite: bool = False) -> bool:
        """Copy a local file to the given URI.

        Args:
            local_path (str): a local file path
            dst_path (str): A URI supported by this PathHandler.
            overwrite (bool): forcing overwrite of existing URI.

        Returns:
            bool: True on success.
        """
        with self._redirected(dst_path) as target:
            return PathManager.copy_from_local(local_path, target, overwrite)
