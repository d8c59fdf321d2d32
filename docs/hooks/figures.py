"""MkDocs hook: a picture with a title is a figure, and the title its caption.

Write ``![what it shows](../assets/picture.svg "One line of caption.")`` on a line of its
own: the page shows the picture with the caption under it (a ``<figure>`` with a
``<figcaption>``), and the alt text stays what a screen reader says. Plain Markdown, so
the same line still reads well where this hook does not run (GitHub shows the title as
a tooltip).
"""

from __future__ import annotations

import re
from typing import Any

# A paragraph that holds nothing but one image with a title (as Python-Markdown writes it).
_LONE_IMAGE = re.compile(
    r"<p>\s*(?P<img><img\b(?P<before>[^>]*?)\s+title=\"(?P<title>[^\"]*)\"(?P<after>[^>]*)>)\s*</p>"
)


def _figure(match: re.Match[str]) -> str:
    img = f"<img{match['before']}{match['after']}>"
    return f'<figure class="ec-figure">{img}<figcaption>{match["title"]}</figcaption></figure>'


def images_to_figures(html: str) -> str:
    """The HTML with each titled image that stands alone turned into a captioned figure."""
    return _LONE_IMAGE.sub(_figure, html)


def on_page_content(html: str, **kwargs: Any) -> str:
    """MkDocs event: runs on every page's HTML body once it is rendered."""
    return images_to_figures(html)
