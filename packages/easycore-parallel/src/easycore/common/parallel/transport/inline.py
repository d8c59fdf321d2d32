"""Which chunks skip their own pickle and travel inside their message (issue 24).

A chunk's items (and its results) normally become a payload of their own: the
transport pickles the list, and the message that carries the payload is then
pickled again, both ways (4 pickles and 4 unpickles per chunk). For a small
chunk of plain values that is most of its cost, so such a list is its own
payload: the message's pickle carries it, once.

"Plain" is decided by exact type, never by trying: ``int``, ``float``,
``complex``, ``bool``, ``None``, ``str`` and ``bytes`` of at most `MAX_TEXT`
characters or bytes, and tuples, lists and dicts (``str`` keys) of at most
`MAX_ENTRIES` of those, nested at most `MAX_DEPTH` deep (``Pool.apply``'s item
``(args, kwds)`` is one), in a list of at most `MAX_ITEMS`, whose message
grows by at most `MAX_BYTES`. Such values always pickle, never refer to
``__main__`` (no class of the user's, no subclass of a built-in), and have no
out-of-band buffers, so no error moves and nothing would have gone through
shared memory: an item or result that fails to pickle, an instance of a class
of ``__main__`` (carried by value), an array, is never plain and takes the
transport's own way, with its own errors, as before. The bounds keep the
check cheap (a longer list pays nothing for it: its payload's own pickle is a
small part of its cost anyway) and the message small.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Optional

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_ENTRIES", "MAX_ITEMS", "MAX_TEXT", "inline_size"]

#: lists longer than this are never inline (the check is per item)
MAX_ITEMS = 32
#: the longest ``str`` or ``bytes`` that may travel inline
MAX_TEXT = 1024
#: the most entries of a tuple, list or dict inside an item
MAX_ENTRIES = 8
#: how deep tuples, lists and dicts may nest inside an item
MAX_DEPTH = 2
#: the most bytes (estimated) an inline list adds to its message
MAX_BYTES = 32 * 1024

# Exact types: a subclass (an IntEnum, a str subclass of __main__) may pickle
# by reference to a module the receiver lacks, or not at all.
_NUMBERS = frozenset((int, float, complex, bool, type(None)))
_TEXT = frozenset((str, bytes))
_NUMBER_BYTES = 9  # a pickled float; ints and None take fewer


def inline_size(values: Any) -> Optional[int]:
    """Whether ``values`` may travel inline, and the bytes it adds to its message, roughly.

    Args:
        values (Any): a chunk's items or results.

    Returns:
        int or None: None when the transport must pickle it; else an estimate
        of its pickle's size (9 bytes per number, a string's length plus 5),
        what the chunker and insights count.
    """
    if type(values) is not list or len(values) > MAX_ITEMS:
        return None
    size = _entries_size(values, 0)
    return size if size is not None and size <= MAX_BYTES else None


def _entries_size(entries: Any, depth: int) -> Optional[int]:
    """The estimated size of plain ``entries`` found ``depth`` containers deep, or None."""
    size = 0
    numbers, text = _NUMBERS, _TEXT  # locals: this loop runs per item
    for entry in entries:
        kind = type(entry)
        if kind in numbers:
            size += _NUMBER_BYTES
        elif kind in text and len(entry) <= MAX_TEXT:
            size += len(entry) + 5
        elif depth < MAX_DEPTH:
            nested = _nested_size(entry, depth + 1)
            if nested is None:
                return None
            size += nested
        else:
            return None
    return size


def _nested_size(value: Any, depth: int) -> Optional[int]:
    """The estimated size of one value that is not a scalar: a small container of plain values."""
    kind = type(value)
    if kind is dict:
        if len(value) > MAX_ENTRIES:
            return None
        size = 2
        for key in value:
            if type(key) is not str or len(key) > MAX_TEXT:
                return None
            size += len(key) + 5
        entries: Any = value.values()
    elif kind is tuple or kind is list:
        if len(value) > MAX_ENTRIES:
            return None
        size = 2
        entries = value
    else:
        return None  # anything else: the transport pickles it
    rest = _entries_size(entries, depth)
    return None if rest is None else size + rest
