"""Names of the files easycore keeps next to a download: its lock and its temporary files.

A download of `<dst>` locks `<dst>@.lock` and writes into `<dst>@<8 hex>.part` before the
rename. Those names must never be a download's own name: `<dst>.lock` was, and locking
`Gemfile` then took (and, with old filelock, truncated) a downloaded `Gemfile.lock`. In the
HTTP cache no URL maps to a name like these (`@` is escaped in real names, see
`easycore.common.path.cache`); `download_file` refuses them as file names.
"""

import re

__all__ = ["is_own_file_name", "lock_target", "PART_SUFFIX"]

#: Temporary files are "<dst>@<8 hex>.part".
PART_SUFFIX = re.compile(r"@[0-9a-f]{8}\.part")
_OWN_NAME = re.compile(r".*(@\.lock|@[0-9a-f]{8}\.part)", re.DOTALL)


def lock_target(dst: str) -> str:
    """What to pass to `file_lock` for a download of `dst`: it locks `<dst>@.lock`.

    Args:
        dst (str): the file a download creates.

    Returns:
        str: `dst + "@"`.
    """
    return dst + "@"


def is_own_file_name(name: str) -> bool:
    """Whether `name` is shaped like one of our lock or temporary files.

    Args:
        name (str): a file name (no directory).

    Returns:
        bool: True for `...@.lock` and `...@<8 hex>.part`.
    """
    return _OWN_NAME.fullmatch(name) is not None
