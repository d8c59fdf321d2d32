"""Safe YAML in and out, with PyYAML imported only when YAML is first read or written.

A program that builds its config from a dict, or imports the package only to
type-check, never pays for PyYAML: this module is the light front, and
`yaml_dialect` (which imports PyYAML) is loaded by the first call.

What the dialect guarantees: PyYAML's *safe* loader (libyaml's C parser when
present), so tags such as `!!python/object/apply` are refused instead of running
code; aliases checked before construction (a few lines of nested aliases can
otherwise expand into billions of nodes, or a few aliases of a long string into
gigabytes); nesting deeper than `MAX_DEPTH` refused with easycore's own message,
whatever libyaml's version; duplicate keys refused; unquoted Python literals
decoded, quoted strings (and `!!str` ones) kept as strings.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs import time; only the type checker needs it
    from typing import Any

__all__ = ["MAX_DEPTH", "MAX_EXPANDED_BYTES", "MAX_EXPANDED_NODES", "safe_dump", "safe_load"]

#: Largest number of nodes a document may expand to once aliases are followed.
MAX_EXPANDED_NODES = 1_000_000

#: Most bytes (UTF-8) of scalar text a document may expand to once aliases are
#: followed: the cap on a config file's size, so that no alias makes a config
#: larger than a file could be.
MAX_EXPANDED_BYTES = 64 * 2**20

#: Deepest nesting of mappings and lists a config may have. Real configs stay
#: under ten; libyaml's composer recurses in C and crashes the interpreter at
#: about 30,000, and every recursive walk of a tree needs a bound.
MAX_DEPTH = 100


def safe_load(text: str, source: str = "<string>") -> Any:
    """Parse one YAML document without running code.

    Args:
        text (str): the YAML text.
        source (str): the file name used in error messages.

    Returns:
        Any: plain Python data (dicts, lists, scalars), or None for an empty document.

    Raises:
        ConfigError: for a syntax error, a refused tag, an alias bomb, excessive
            nesting, a duplicate key or an unreadable value, naming `source` and
            the line.
    """
    from . import yaml_dialect

    return yaml_dialect.load(text, source)


def safe_dump(data: Any, stream: Any = None, encoding: str | None = None, **kwargs: Any) -> Any:
    """Write plain data as YAML with the safe dumper (block style, keys in order).

    Args:
        data (Any): dicts, lists, YAML scalars and `PlainScalar` literals.
        stream (io.IOBase or None): where to write; None returns a string.
        encoding (str or None): passed to `yaml.dump`.
        **kwargs: other options of the YAML dumper, such as `allow_unicode`.

    Returns:
        None or str: the YAML text when `stream` is None.
    """
    from . import yaml_dialect

    return yaml_dialect.dump(data, stream, encoding, **kwargs)
