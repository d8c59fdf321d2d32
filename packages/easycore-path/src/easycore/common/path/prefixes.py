"""How a registered prefix matches a path: the scheme ignores case, the rest matches whole
path components.

`dataset://a` leads `dataset://a` and `dataset://a/train.npz`, never `dataset://ab/...`;
a prefix ending in `/` or `:` leads whatever follows it. `HTTP://` and `Https://` are the
same schemes as `http://` and `https://` (RFC 3986: schemes are case-insensitive).
"""

import re
from typing import Optional

__all__ = ["has_scheme", "leads", "normalise_scheme", "split_prefix"]

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]+://")  # 2+ letters: "c://" is a drive


def has_scheme(path: str) -> bool:
    """Whether `path` starts with `scheme://` (a one-letter scheme is a drive)."""
    return _SCHEME.match(path) is not None


def normalise_scheme(path: str) -> str:
    """`path` with its `scheme://` lower-cased (same length; the rest is untouched)."""
    match = _SCHEME.match(path)
    if match is None:
        return path
    return path[: match.end()].lower() + path[match.end() :]


def leads(prefix: str, path: str) -> bool:
    """Whether the (normalised) `prefix` leads the (normalised) `path`, by components."""
    if not path.startswith(prefix):
        return False
    return len(path) == len(prefix) or prefix[-1:] in ("/", ":") or path[len(prefix)] == "/"


def split_prefix(prefix: str, path: str) -> Optional[str]:
    """What follows `prefix` in `path`, or None if `prefix` does not lead `path`.

    Args:
        prefix (str): a registered prefix such as `dataset://MNIST`.
        path (str): a path such as `DATASET://MNIST/train.npz`.

    Returns:
        str or None: e.g. `/train.npz`.
    """
    if not leads(normalise_scheme(prefix), normalise_scheme(path)):
        return None
    return path[len(prefix) :]
