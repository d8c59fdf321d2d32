"""Names of the files easycore keeps next to a download: its lock and its temporary files.

A download of `<dst>` locks `<dst>@.lock` and writes into `<dst>@<8 hex>.part` before the
rename. Those names must never be a download's own name: `<dst>.lock` was, and locking
`Gemfile` then took (and, with old filelock, truncated) a downloaded `Gemfile.lock`. In the
HTTP cache no URL maps to a name like these (`@` is escaped in real names, see
`easycore.common.path.cache`); `download_file` refuses them as file names.
"""

import hashlib
import os
import re

__all__ = ["PART_SUFFIX", "is_own_file_name", "lock_target", "own_prefix"]

# File systems allow 255 bytes in a name; "@<8 hex>.part" adds 14. A longer name gets a
# shorter prefix for its lock and temporary files, so any name that fits can be downloaded.
_MAX_PREFIX = 240

#: Temporary files are "<dst>@<8 hex>.part".
PART_SUFFIX = re.compile(r"@[0-9a-f]{8}\.part")
_OWN_NAME = re.compile(r".*(@\.lock|@[0-9a-f]{8}\.part)", re.DOTALL)


def own_prefix(dst: str) -> str:
    """The path our files for `dst` start with: `dst`, or for a name too long to take a
    suffix, `<first bytes of it>@<16 hex of the whole>` in the same directory.

    Args:
        dst (str): the file a download creates.

    Returns:
        str: a path in the directory of `dst`.
    """
    directory, name = os.path.split(dst)
    data = name.encode("utf-8", "surrogateescape")
    if len(data) <= _MAX_PREFIX:
        return dst
    head = data[:200].decode("utf-8", "ignore")
    digest = hashlib.sha256(data).hexdigest()[:16]
    return os.path.join(directory, f"{head}@{digest}")


def lock_target(dst: str) -> str:
    """What to pass to `file_lock` for a download of `dst`: it locks `<dst>@.lock`
    (`own_prefix(dst)` rather than `dst` for a very long name).

    Args:
        dst (str): the file a download creates.

    Returns:
        str: `own_prefix(dst) + "@"`.
    """
    return own_prefix(dst) + "@"


def is_own_file_name(name: str) -> bool:
    """Whether `name` is shaped like one of our lock or temporary files.

    Args:
        name (str): a file name (no directory).

    Returns:
        bool: True for `...@.lock` and `...@<8 hex>.part`.
    """
    return _OWN_NAME.fullmatch(name) is not None
