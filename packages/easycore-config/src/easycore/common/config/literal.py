"""Python-literal strings in configs: ``"(224, 224)"`` loads as a tuple.

Decoding uses :func:`ast.literal_eval` only, never evaluation. Encoding is its
mirror image, so that ``save`` then ``open`` gives back the same values
without any unsafe YAML tag: values YAML cannot express (tuples, sets, complex,
bytes) are written as their literal ``repr``, and strings that *would* decode
into something else are written quoted as a Python string literal.
"""

from __future__ import annotations

import ast
import datetime
from typing import Any

__all__ = ["decode_literal", "encode_literal"]

# Only strings starting with one of these can be a non-trivial literal; checking
# the first character skips the (slow) parser for ordinary words like "res3".
_LITERAL_START = frozenset("0123456789+-.([{'\"TFN")
_REPR_TYPES = (tuple, set, complex, bytes)
# Literals that start otherwise: the empty set is written "set()", bytes b'...'.
_BYTES_START = ("b'", 'b"')


def decode_literal(value: str) -> Any:
    """Return the Python literal a string spells, or the string itself.

    Args:
        value (str): a string read from YAML or a command line.

    Returns:
        Any: ``ast.literal_eval(value)`` when that succeeds, else ``value``.
    """
    if not value or (
        value[0] not in _LITERAL_START and value != "set()" and value[:2] not in _BYTES_START
    ):
        return value
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value


def encode_literal(value: Any) -> Any:
    """Return a YAML-safe stand-in for ``value`` that :func:`decode_literal` inverts.

    Args:
        value (Any): a leaf value (not a mapping or list).

    Returns:
        Any: ``value`` itself when YAML keeps it as is, else a literal string.

    Raises:
        TypeError: when the value has no literal form (e.g. an arbitrary object).
    """
    if isinstance(value, str):
        return repr(value) if decode_literal(value) is not value else value
    if value is None or isinstance(value, (bool, int, float, datetime.date)):
        return value  # YAML scalars (a date or datetime is a YAML timestamp)
    if isinstance(value, _REPR_TYPES):
        text = repr(value)
        if decode_literal(text) == value:
            return text
    raise TypeError(f"value of type {type(value).__name__} has no YAML or Python-literal form")
