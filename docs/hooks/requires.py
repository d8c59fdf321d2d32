"""MkDocs hook: hide the test markers (``# requires: torch``) from readers.

A fenced ``python`` example whose first line is ``# requires: NAME[, NAME...]`` runs in
the test suite only where the requirement is met (``tests/docs/docblocks.py`` reads the
marker from the Markdown source; see ``docs/about-examples.md``). The marker means
nothing to a reader, so the rendered page leaves that first line out; the Markdown
files and docstrings keep it.

It works on the rendered HTML, after highlighting, so it covers the pages and the
docstring examples that mkdocstrings renders into the API reference alike.
"""

from __future__ import annotations

import re
from typing import Any

# The first line of a code block, as Pygments (through pymdownx.highlight) renders it:
#   <code><a id="__codelineno-6-1" ...></a><span class="c1"># requires: torch</span>\n
# The line anchor is optional (no anchors without `anchor_linenums`), and so is the
# comment span (no spans without Pygments). Only a whole first line matches: inline
# code such as <code># requires: NAME</code> in the prose has no newline after it.
_MARKER_LINE = re.compile(
    r"(?P<open><code[^>]*>)"
    r"(?:<a [^>]*></a>)?"
    r"(?:<span class=\"c1?\">)?#\s*requires:[^<\n]*(?:</span>)?\n"
)


def strip_requires_markers(html: str) -> str:
    """The page's HTML without the ``# requires:`` first line of its code blocks."""
    return _MARKER_LINE.sub(r"\g<open>", html)


def on_page_content(html: str, **kwargs: Any) -> str:
    """MkDocs event: runs on every page's HTML body once it is rendered."""
    return strip_requires_markers(html)
