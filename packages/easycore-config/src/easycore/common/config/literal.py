"""Python literals in configs: an unquoted `(224, 224)` loads as a tuple.

The rule: a YAML value written as an unquoted (plain) scalar that spells a
Python literal is read with `ast.literal_eval` (never evaluated as code); a
value the file quotes is the string it spells. `merge_from_list` values are
parsed the same way.

Saving is the mirror image, so that `save` then `open` gives back the same
values without any YAML tag: values YAML cannot express (tuples, sets, complex,
bytes) are written as an unquoted literal, and strings that would read back as
something else are quoted (the dumper does that, see `yaml_dialect`).
"""

from __future__ import annotations

from collections.abc import Mapping

from .errors import ConfigError
from .yaml_io import MAX_DEPTH

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any, Callable

__all__ = ["PlainScalar", "decode_literal", "encode_literal", "encode_tree"]

# Only strings starting with one of these can be a non-trivial literal; checking
# the first character skips the (slow) parser for ordinary words like "res3".
_LITERAL_START = frozenset("0123456789+-.([{'\"TFN")
# Literals that start otherwise: the empty set is written "set()", bytes b'...'.
_BYTES_START = ("b'", 'b"')
_REPR_TYPES = (tuple, set, complex, bytes)
# Characters a YAML plain scalar may not start with, in block context.
_PLAIN_BAD_START = frozenset("-?:,[]{}#&*!|>'\"%@` ")


class PlainScalar(str):
    """A literal's text, to be written as an unquoted YAML scalar."""

    __slots__ = ()


def _first_eval(text: str) -> Any:
    # ast is imported on first use, not with the package: most programs that
    # import a config never parse a literal string at import time.
    global _literal_eval
    import ast

    _literal_eval = ast.literal_eval
    return _literal_eval(text)


_literal_eval: Callable[[str], Any] = _first_eval


def decode_literal(value: str) -> Any:
    """Return the Python literal a string spells, or the string itself.

    Args:
        value (str): an unquoted YAML scalar or a command-line value.

    Returns:
        Any: `ast.literal_eval(value)` when that succeeds, else `value`.
    """
    if not value or (
        value[0] not in _LITERAL_START and value != "set()" and value[:2] not in _BYTES_START
    ):
        return value
    try:
        result = _literal_eval(value)
    except ValueError:
        # `(1.0, inf, nan)`: the repr of a tuple or set holding non-finite floats.
        if "inf" not in value and "nan" not in value:
            return value
        try:
            result = _eval_with_non_finite(value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return value
    except (SyntaxError, TypeError, MemoryError, RecursionError):
        return value
    if "..." in value and _holds_ellipsis(result):
        # `...` would load as Ellipsis, which no config can save: it stays text.
        return value
    return result


def _holds_ellipsis(value: Any) -> bool:
    if value is Ellipsis:
        return True
    if isinstance(value, (tuple, list, set, frozenset)):
        return any(_holds_ellipsis(item) for item in value)
    if isinstance(value, dict):
        return any(_holds_ellipsis(item) for pair in value.items() for item in pair)
    return False


def _eval_with_non_finite(text: str) -> Any:
    """`ast.literal_eval`, where items of a tuple, list, set or dict may be `inf` or `nan`.

    Only items: a bare `inf` or `(nan)` stays the word, as before.
    """
    import ast

    tree = ast.parse(text.strip(" \t"), mode="eval")
    names = {"inf": float("inf"), "nan": float("nan")}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
            items = node.values if isinstance(node, ast.Dict) else node.elts
            for i, item in enumerate(items):
                target = item.operand if isinstance(item, ast.UnaryOp) else item
                if isinstance(target, ast.Name) and target.id in names:
                    constant = ast.copy_location(ast.Constant(names[target.id]), target)
                    if isinstance(item, ast.UnaryOp):
                        item.operand = constant
                    else:
                        items[i] = constant
    return _literal_eval(tree)  # type: ignore[arg-type]


def encode_literal(value: Any, ascii_only: bool = False) -> Any:
    """Return a YAML-safe stand-in for `value` that the loader turns back into it.

    Args:
        value (Any): a leaf value (not a mapping or list).
        ascii_only (bool): write non-ASCII characters of a literal as escapes
            (the dumper quotes any scalar with non-ASCII text otherwise).

    Returns:
        Any: `value` itself when YAML keeps it as is (strings included: the
            dumper quotes those that would read back as something else), else a
            `PlainScalar` holding its literal text.

    Raises:
        TypeError: when the value has no literal form (e.g. an arbitrary object).
    """
    import datetime  # here, not at the top: saving is rarer than importing

    value = _plain_python(value)
    kind = type(value)
    if value is None or kind in (str, bool, int, float, datetime.date, datetime.datetime):
        return value  # YAML scalars (a date or datetime is a YAML timestamp)
    if kind in _REPR_TYPES:
        try:
            text = _literal_text(value, ascii_only)
        except (TypeError, RecursionError):
            text = ""
        if text[:1] == "{":
            text = f"({text})"  # a plain scalar cannot start with "{"; "({1, 2})" is the set
        if _plain_ok(text, ascii_only) and _same(decode_literal(text), value):
            return PlainScalar(text)
    base = next((b for b in (bool, int, float, str, bytes) if isinstance(value, b)), None)
    if base is not None:
        # An IntEnum, a str subclass: the safe dumper has no form for them, and
        # saving the base value would reopen as something else silently.
        raise TypeError(
            f"value of type {kind.__name__} (a subclass of {base.__name__}) has no YAML form; "
            f"store {base.__name__}(value) instead"
        )
    raise TypeError(f"value of type {kind.__name__} has no YAML or Python-literal form")


def _plain_python(value: Any) -> Any:
    """A NumPy scalar as the Python number (or str, bytes, bool) it holds; tuples and sets too."""
    kind = type(value)
    if kind.__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        item = value.item()
        return item if type(item).__module__ != "numpy" else value
    if kind is tuple:
        return tuple(_plain_python(item) for item in value)
    if kind is set:
        return {_plain_python(item) for item in value}
    return value


def _literal_text(value: Any, ascii_only: bool) -> str:
    """`repr`, except that strings never hold ':' or '#', which end a plain scalar."""
    if isinstance(value, (str, bytes)):
        text = ascii(value) if ascii_only else repr(value)
        if not text.isascii() and max(text) > "\uffff":
            # libyaml writes no character beyond the BMP in a plain scalar (it
            # would quote the literal, which then reopens as a string): escape.
            text = "".join(c if c <= "\uffff" else f"\\U{ord(c):08x}" for c in text)
        # ':' and '#' are never part of an escape sequence in a repr, so these
        # replacements keep the literal equal to the value.
        return text.replace(":", "\\x3a").replace("#", "\\x23")
    if isinstance(value, tuple):
        items = [_literal_text(item, ascii_only) for item in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_literal_text(item, ascii_only) for item in value) + "]"
    if isinstance(value, set):
        if not value:
            return "set()"
        return "{" + ", ".join(_literal_text(item, ascii_only) for item in value) + "}"
    if isinstance(value, dict):
        pairs = (
            f"{_literal_text(k, ascii_only)}:{_literal_text(v, ascii_only)}"
            for k, v in value.items()
        )
        return "{" + ", ".join(pairs) + "}"
    if isinstance(value, float) and value != value:
        return "nan"  # read back by decode_literal, inside a tuple, list or set
    if value is None or isinstance(value, (bool, int, float, complex)):
        return repr(value)
    raise TypeError(type(value).__name__)


def _plain_ok(text: str, ascii_only: bool) -> bool:
    """Whether a YAML emitter can write `text` unquoted in block context."""
    return (
        bool(text)
        and text[0] not in _PLAIN_BAD_START
        and text[-1] not in " :"
        and ": " not in text
        and " #" not in text
        and text.isprintable()
        and (text.isascii() or not ascii_only)
    )


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (1 == 1.0 == True is not enough)."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        # nan equals nan here, and -0.0 is not 0.0.
        return (a == b and str(a) == str(b)) or (a != a and b != b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def encode_tree(value: Any, path: str, ascii_only: bool, depth: int) -> Any:
    """A config's values as YAML-safe data (`encode_literal` on each leaf), naming the key at fault.

    Raises:
        ConfigError: a value with no YAML or literal form, or nesting deeper than `MAX_DEPTH`.
    """
    if isinstance(value, (Mapping, list)):
        if depth >= MAX_DEPTH:
            limit = MAX_DEPTH
            raise ConfigError(f"cannot save {path or 'config'!r}: nested more than {limit} levels")
        if isinstance(value, list):
            return [
                encode_tree(v, f"{path}[{i}]", ascii_only, depth + 1) for i, v in enumerate(value)
            ]
        return {
            # a str subclass as a key (a StrEnum) is written as the text it holds
            (k if type(k) is str else str.__str__(k)): encode_tree(
                v, f"{path}.{k}" if path else str(k), ascii_only, depth + 1
            )
            for k, v in value.items()
        }
    if type(value) is str and not value.isascii():
        _check_encodable(value, path)
    if type(value) is int and value.bit_length() > 14_000:  # near the 4,300-digit str limit
        try:
            str(value)
        except ValueError as exc:
            raise ConfigError(f"cannot save {path or 'config'!r}: {exc}") from None
    try:
        return encode_literal(value, ascii_only)
    except TypeError as exc:
        raise ConfigError(f"cannot save {path or 'config'!r}: {exc}") from None


def _check_encodable(value: str, path: str) -> None:
    """Refuse a string no text file can hold: one with a lone surrogate.

    `os.listdir` and `sys.argv` give such strings for names that are not
    UTF-8 (`surrogateescape`); the YAML emitter would fail on them with a raw
    `UnicodeEncodeError` naming no key.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        char = value[exc.start]
        raise ConfigError(
            f"cannot save {path or 'config'!r}: the string holds a lone surrogate "
            f"({char!r} at index {exc.start}), which no text file can hold; it usually "
            "comes from a file name that is not UTF-8 (decode it with os.fsencode(name)"
            ".decode(..., 'replace'), or keep it as bytes)"
        ) from None
