"""MkDocs hook: show the test markers (``# requires: torch``) as a badge above the example.

A fenced ``python`` example whose first line is ``# requires: NAME[, NAME...]`` runs in
the test suite only where the requirement is met (``tests/docs/docblocks.py`` reads the
marker from the Markdown source; see ``docs/about-examples.md``). A reader needs to know
it too (an example that needs a GPU, the internet or a cluster does not run on any
laptop), but not as a comment in the code they copy: the rendered page drops that first
line from the block and puts a small "Needs: ..." badge above it. The Markdown files and
docstrings keep the marker.

It works on the rendered HTML, after highlighting, so it covers the pages and the
docstring examples that mkdocstrings renders into the API reference alike.
"""

from __future__ import annotations

import html as _html
import re
from typing import Any

#: What each marker name means to a reader.
LABELS = {
    "torch": "PyTorch",
    "cuda": "a CUDA GPU",
    "ray": "Ray",
    "ray-nodes": "Ray",
    "joblib": "joblib",
    "mpire": "mpire",
    "cluster": "a Ray cluster",
    "network": "internet access",
}

# The first line of a code block, as Pygments (through pymdownx.highlight) renders it:
#   <code><a id="__codelineno-6-1" ...></a><span class="c1"># requires: torch</span>\n
# The line anchor is optional (no anchors without `anchor_linenums`), and so is the
# comment span (no spans without Pygments). Only a whole first line matches: inline
# code such as <code># requires: NAME</code> in the prose has no newline after it.
_MARKER = (
    r"(?P<open><code[^>]*>)"
    r"(?:<a [^>]*></a>)?"
    r"(?:<span class=\"c1?\">)?#\s*requires:(?P<names>[^<\n]*)(?:</span>)?\n"
)
# The same line with the block's wrapper before it, where the badge goes.
_BLOCK_WITH_MARKER = re.compile(
    r"(?P<block><div class=\"[^\"]*highlight[^\"]*\">(?:<span [^>]*>[^<]*</span>)?"
    r"<pre[^>]*>(?:<span></span>)?)" + _MARKER
)
_MARKER_LINE = re.compile(_MARKER)


def badge(names: str) -> str:
    """The badge's HTML for the names of a marker (``"torch, cuda"``)."""
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    text = ", ".join(LABELS.get(n.lower(), n) for n in wanted)
    return (
        f'<p class="ec-requires"><span class="ec-requires-label">Needs</span> '
        f"{_html.escape(text)}</p>"
    )


def badge_requires_markers(html: str) -> str:
    """The page's HTML with each ``# requires:`` first line turned into a badge."""
    html = _BLOCK_WITH_MARKER.sub(
        lambda m: badge(_html.unescape(m["names"])) + m["block"] + m["open"], html
    )
    # a block without the wrapper (no highlighting): drop the line all the same
    return _MARKER_LINE.sub(r"\g<open>", html)


def on_page_content(html: str, **kwargs: Any) -> str:
    """MkDocs event: runs on every page's HTML body once it is rendered."""
    return badge_requires_markers(html)
