"""MkDocs hook: inline code wraps between the parts of a name, never inside a word.

Material lets inline code break anywhere (``word-break: break-word``), and a table sizes
its columns by the narrowest its cells can be, so a column of dotted names ends up
``easycore.common.parallel.Poo`` / ``l``. ``stylesheets/extra.css`` forbids breaking inside
words in tables; this hook gives the browser the places it may break instead: a ``<wbr>``
after each ``.``, ``/``, ``,``, ``=`` and ``(`` that sits between two parts of a name
(not after ``_``: ``error_callback`` is one word to a reader).

Everywhere (tables and prose, not code blocks), a hyphenated run such as
``easycore-config`` or ``--upgrade`` is kept on one line, where a browser would break it
after the hyphen. ``<wbr>`` and the wrapping ``<span>`` are invisible and copy as
nothing, so the code reads and copies as written.
"""

from __future__ import annotations

import re
from typing import Any

_PRE = re.compile(r"(<pre\b.*?</pre>)", re.S)  # code blocks: left alone
_TABLE = re.compile(r"<table\b.*?</table>", re.S)
_CODE = re.compile(r"(<code\b[^>]*>)([^<]*)(</code>)")
# A separator with a letter, digit or closing bracket before it and the start of a name
# (or of an argument) after it: `a.b`, `a/b`, `f(x`, `a,b`, `k=v`; not a leading or
# trailing one (`.venv`, `f()`). What follows may be an HTML entity (`&lt;`).
_BREAK_AFTER = re.compile(r"(?<=[A-Za-z0-9)\]])([./,=(])(?=[A-Za-z0-9\"'\[(*.&])")
# Shorter code fits any column: it gets no break opportunities (no `?v=` / `1`).
_SHORT = 16
# A run without spaces or break opportunities that holds a hyphen: kept whole.
_HYPHENATED = re.compile(r"[^\s<>]*[\w-]-\w[^\s<>]*")


def _keep_hyphenated(match: re.Match[str]) -> str:
    opening, text, closing = match.groups()
    text = _HYPHENATED.sub(r'<span class="ec-nowrap">\g<0></span>', text)
    return opening + text + closing


def _break_names(match: re.Match[str]) -> str:
    opening, text, closing = match.groups()
    if len(text) > _SHORT:
        text = _BREAK_AFTER.sub(r"\1<wbr>", text)
    return opening + text + closing


def _break_table(match: re.Match[str]) -> str:
    return _CODE.sub(_break_names, match.group(0))


def wrap_inline_code(html: str) -> str:
    """The HTML with break opportunities in table code, and hyphenated code kept whole."""
    parts = _PRE.split(html)
    for i in range(0, len(parts), 2):  # the even parts are outside <pre>
        part = _TABLE.sub(_break_table, parts[i])
        parts[i] = _CODE.sub(_keep_hyphenated, part)
    return "".join(parts)


def on_page_content(html: str, **kwargs: Any) -> str:
    """MkDocs event: runs on every page's HTML body once it is rendered."""
    return wrap_inline_code(html)
