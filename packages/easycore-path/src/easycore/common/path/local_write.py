"""Local files that appear whole or not at all: staged beside their target, then renamed.

The one way easycore-path writes a local file atomically (`NativePathHandler.copy_from_local`
and `file://` writes through [`FsspecPathHandler`][easycore.common.path.FsspecPathHandler]):

- a symbolic link at the path is followed, and its target written, as `open(path, "w")`
  does; the link stays a link;
- the bytes go to a temporary file in the target's own directory (so the final step is a
  rename on one file system), created with the mode a plain `open()` would give (the
  umask applies), or, when it replaces a file, that file's mode;
- `commit` renames it into place (`os.replace`), or for an exclusive write (`x` modes, no
  overwrite) hard-links it, which fails rather than replace a file that appeared
  meanwhile: of writers racing to create one file, exactly one wins;
- `discard` removes it; nothing else was touched.
"""

import errno
import os
import stat
from typing import Optional, Tuple

from easycore.common.network.transfer import _create_temporary_file, _unlink_quietly

__all__ = ["commit", "discard", "resolve_links", "stage"]

_MAX_LINKS = 40  # the kernel's own limit on nested symbolic links


def resolve_links(path: str) -> str:
    """The absolute path `path` names once every symbolic link at its end is followed.

    A dangling link gives the path its target would have: writing there creates the
    target, as `open(path, "w")` does.

    Raises:
        OSError: `ELOOP`, too many levels of links.
    """
    path = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        if not os.path.islink(path):
            return path
        directory = os.path.dirname(path)
        path = os.path.normpath(os.path.join(directory, os.readlink(path)))
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)


def stage(path: str) -> Tuple[int, str, str]:
    """A new temporary file for the bytes of `path`: `(descriptor, its path, the target)`.

    Args:
        path (str): the file to write (a link is followed).

    Returns:
        tuple: an open descriptor (the caller closes it), the temporary file, and the
        real path the commit will write.
    """
    target = resolve_links(path)
    try:
        existing: Optional[os.stat_result] = os.stat(target)
    except FileNotFoundError:
        existing = None
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    fd, tmp = _create_temporary_file(target, 0o666)
    if existing is not None and hasattr(os, "fchmod"):
        try:
            os.fchmod(fd, stat.S_IMODE(existing.st_mode))  # the mode of the file it replaces
        except BaseException:
            os.close(fd)
            discard(tmp)
            raise
    return fd, tmp, target


def commit(tmp: str, target: str, exclusive: bool) -> None:
    """Put the staged file `tmp` at `target`: replace it, or (`exclusive`) only create it.

    Raises:
        FileExistsError: `exclusive` and `target` exists; `tmp` is removed.
    """
    try:
        if exclusive:
            _link_without_clobbering(tmp, target)
        else:
            os.replace(tmp, target)
    finally:
        discard(tmp)


def discard(tmp: str) -> None:
    """Remove a staged file that is not to be committed (or was linked into place)."""
    _unlink_quietly(tmp)


def _link_without_clobbering(tmp: str, target: str) -> None:
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise OSError(errno.EEXIST, os.strerror(errno.EEXIST), target) from None
    except OSError:
        # No hard links here (FAT, some network shares): check, then rename.
        if os.path.lexists(target):
            raise OSError(errno.EEXIST, os.strerror(errno.EEXIST), target) from None
        os.replace(tmp, target)
