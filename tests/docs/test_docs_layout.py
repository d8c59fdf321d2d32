"""The documentation reads well in a browser: no sideways scrolling, no test markers, pictures.

What fits was measured in headless Chromium at 1280 px wide with the Material theme:
a code block's text area holds 80.2 characters of its 13.6 px monospace font (DejaVu Sans
Mono there, Roboto Mono for most readers: both 0.6 em per character).
"""

from __future__ import annotations

import importlib.util
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from docblocks import DOCS, ROOT, pages, parse_blocks

#: Columns a code block shows at 1280 px before it scrolls sideways.
MAX_COLUMNS = 80
#: The same for a block indented in the Markdown (in a list item, a tab or an admonition),
#: which the page draws narrower (a list item's indent takes about three columns).
MAX_COLUMNS_INDENTED = 76

PAGES = list(pages())


def _page_id(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("path", PAGES, ids=_page_id)
def test_code_blocks_fit_without_scrolling(path: Path) -> None:
    source = path.read_text(encoding="utf-8").splitlines()
    too_long = []
    for block in parse_blocks(path):
        fence = source[block.start - 2]
        indented = fence[: len(fence) - len(fence.lstrip())] != ""
        limit = MAX_COLUMNS_INDENTED if indented else MAX_COLUMNS
        for offset, line in enumerate(block.lines):
            width = len(line.expandtabs(4))
            if width > limit:
                too_long.append(f"{block.page}:{block.start + offset}: {width} > {limit}: {line}")
    listing = "\n".join(too_long)
    assert not too_long, f"code lines that scroll sideways at 1280 px (wrap them):\n{listing}"


def _load_hook(name: str = "requires"):
    spec = importlib.util.spec_from_file_location(f"{name}_hook", DOCS / "hooks" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _site_markdown():
    """A Markdown converter with the site's own extensions, as mkdocs.yml configures them."""
    markdown = pytest.importorskip("markdown")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    names, configs = [], {}
    for entry in config["markdown_extensions"]:
        if isinstance(entry, dict):
            ((name, options),) = entry.items()
            names.append(name)
            configs[name] = options or {}
        else:
            names.append(entry)
    return markdown.Markdown(extensions=names, extension_configs=configs)


def test_the_hooks_and_the_stylesheet_are_registered() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert "docs/hooks/requires.py" in config.get("hooks", [])
    assert "docs/hooks/inline_code.py" in config.get("hooks", [])
    assert "stylesheets/extra.css" in config.get("extra_css", [])
    assert (DOCS / "stylesheets" / "extra.css").is_file()


def test_inline_code_wraps_between_the_parts_of_a_name_only() -> None:
    hook = _load_hook("inline_code")
    page = (
        "`easycore.common.parallel.Pool` and `uv pip install --upgrade easycore`\n\n"
        "| Name | Call |\n|---|---|\n"
        '| `easycore.common.parallel.Pool` | `f(x, y=1)`, `start_method="spawn"` |\n'
        "| `easycore-config` | `error_callback`, `__main__` |\n\n"
        "```text\npip install easycore-config  # easycore.common.config\n```\n"
    )
    before = _site_markdown().convert(page)
    after = hook.on_page_content(before, page=None, config=None, files=None)
    codes = re.findall(r"<code>(.*?)</code>", after, re.S)
    # prose: no break opportunities, but a hyphenated word stays whole
    assert codes[0] == "easycore.common.parallel.Pool"
    assert codes[1] == 'uv pip install <span class="ec-nowrap">--upgrade</span> easycore'
    # tables: breaks after the separators of long names only
    assert codes[2] == "easycore.<wbr>common.<wbr>parallel.<wbr>Pool"
    assert codes[3] == "f(x, y=1)"  # short: fits any column as it is
    assert codes[4] == 'start_method=<wbr>"spawn"'
    assert codes[5] == '<span class="ec-nowrap">easycore-config</span>'
    assert codes[6:8] == ["error_callback", "__main__"]  # one word each
    # code blocks are left alone
    assert "pip install easycore-config  # easycore.common.config\n" in codes[8]
    # without the markup it is the same text: it reads and copies as written
    plain = re.sub(r'<wbr>|<span class="ec-nowrap">([^<]*)</span>', r"\1", after)
    assert plain == before


def test_requires_marker_becomes_a_badge_and_the_block_still_renders() -> None:
    hook = _load_hook()
    md = _site_markdown()
    page = (
        "Say `# requires: NAME` in the prose.\n\n"
        "```python\n# requires: torch, cuda\nimport torch\nx = torch.ones(2)  # a comment\n```\n\n"
        "```python\nimport os  # no marker here\n```\n\n"
        "!!! note\n\n    ```python\n    # requires: network\n    import requests\n    ```\n"
    )
    html = hook.on_page_content(md.convert(page), page=None, config=None, files=None)
    assert "requires: torch" not in html and "requires: network" not in html
    assert "<code># requires: NAME</code>" in html  # the prose keeps it
    blocks = re.findall(r"<pre[^>]*>(?:<span></span>)?<code[^>]*>(.*?)</code>", html, re.S)
    # each block is all there but the marker, and still highlighted by Pygments
    assert [re.sub(r"<[^>]+>", "", code) for code in blocks] == [
        "import torch\nx = torch.ones(2)  # a comment\n",
        "import os  # no marker here\n",
        "import requests\n",
    ]
    assert all('<span class="kn">import</span>' in code for code in blocks)
    # a reader sees what the marked examples need, just above each of them, and only there
    badges = re.findall(r'<p class="ec-requires">(.*?)</p>\s*<div class="[^"]*highlight', html)
    assert [re.sub(r"<[^>]+>", "", b) for b in badges] == [
        "Needs PyTorch, a CUDA GPU",
        "Needs internet access",
    ]
    assert html.count("ec-requires-label") == 2


def test_every_requires_name_has_a_reader_label() -> None:
    from docblocks import REQUIREMENTS

    assert set(REQUIREMENTS) <= set(_load_hook().LABELS)


@pytest.mark.parametrize(
    "path",
    [p for p in pages() if p.is_relative_to(DOCS) and "# requires:" in p.read_text("utf-8")],
    ids=_page_id,
)
def test_no_page_shows_a_requires_marker(path: Path) -> None:
    hook = _load_hook()
    html = hook.on_page_content(
        _site_markdown().convert(path.read_text(encoding="utf-8")),
        page=None,
        config=None,
        files=None,
    )
    shown = [
        re.sub(r"<[^>]+>", "", code).split("\n", 1)[0]
        for code in re.findall(r"<pre[^>]*>(?:<span></span>)?<code[^>]*>(.*?)</code>", html, re.S)
    ]
    assert not [line for line in shown if re.match(r"\s*#\s*requires:", line)]


# ![alt](src "caption"); the alt text may hold [balanced] brackets, as Markdown allows
def test_a_titled_picture_becomes_a_captioned_figure() -> None:
    hook = _load_hook("figures")
    page = (
        '![Three boxes in a row](a.svg "The caption."){ .ec-diagram }\n\n'
        "![No caption here](b.svg)\n\n"
        'Text with an inline ![icon](c.svg "a title") stays as it is.\n'
    )
    html = hook.on_page_content(_site_markdown().convert(page), page=None, config=None, files=None)
    figures = re.findall(r'<figure class="ec-figure">(.*?)</figure>', html)
    assert len(figures) == 1
    assert re.fullmatch(r"<img [^>]*><figcaption>The caption\.</figcaption>", figures[0])
    assert 'alt="Three boxes in a row"' in figures[0] and 'class="ec-diagram"' in figures[0]
    assert "title=" not in figures[0]  # the caption is not repeated as a tooltip
    assert '<img alt="No caption here" src="b.svg" />' in html
    assert 'title="a title"' in html


_IMAGE = re.compile(
    r"!\[(?P<alt>(?:[^\[\]]|\[[^\[\]]*\])*)\]\((?P<src>[^)\s]+)(?:\s+\"(?P<title>[^\"]*)\")?\)"
)
#: A caption is one line under the picture (about 85 characters at 1280 px).
MAX_CAPTION = 85
_SVG = "{http://www.w3.org/2000/svg}"


def _images() -> list[tuple[Path, str, str, str]]:
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        for match in _IMAGE.finditer(page.read_text(encoding="utf-8")):
            found.append((page, match["alt"], match["src"], match["title"] or ""))
    return found


def test_the_docs_have_pictures() -> None:
    assert len({src for _, _, src, _ in _images()}) >= 4


@pytest.mark.parametrize("image", _images(), ids=lambda i: f"{_page_id(i[0])}:{i[2]}")
def test_every_picture_exists_with_alt_text_and_a_caption(
    image: tuple[Path, str, str, str],
) -> None:
    page, alt, src, caption = image
    where = f"{_page_id(page)}: {src}"
    assert len(alt.split()) >= 3, f"{where}: alt text should say what the picture shows"
    assert caption, f'{where}: no caption: write ![alt]({src} "One line of caption.")'
    assert len(caption) <= MAX_CAPTION, f"{where}: the caption is longer than one line"
    target = (page.parent / src.split("#", 1)[0]).resolve()
    assert target.is_file(), f"{where}: no such file"
    if target.suffix == ".svg":
        root = ET.parse(target).getroot()  # well-formed XML
        assert root.tag == f"{_SVG}svg", f"{where}: not an SVG"
        assert root.get("viewBox"), f"{where}: no viewBox, so it cannot scale to the page"
        title = root.find(f"{_SVG}title")
        assert title is not None and title.text, f"{where}: no <title> for screen readers"
