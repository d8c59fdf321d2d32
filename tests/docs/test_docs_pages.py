"""The pages that gather others' output: Benchmarks (and its chart), the Changelog, the nav."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml
from docblocks import DOCS, ROOT

RESULTS = sorted((ROOT / "benchmarks" / "results").glob("*/ratios.csv"))


def _chart_script():
    path = ROOT / "scripts" / "bench_chart.py"
    spec = importlib.util.spec_from_file_location("bench_chart", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_benchmark_has_a_section_on_the_benchmarks_page() -> None:
    page = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    names = sorted(p.stem for p in (ROOT / "benchmarks").glob("bench_*.py"))
    assert names, "no benchmarks found"
    missing = [name for name in names if f"`benchmarks/{name}.py`" not in page]
    assert not missing, f"docs/benchmarks.md has no table for {missing}"


def test_the_page_shows_the_newest_results_and_their_raw_output() -> None:
    page = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    newest = RESULTS[-1].parent
    assert f"`benchmarks/results/{newest.name}/`" in page
    assert f"| date | {newest.name} |" in page
    for name in (p.stem for p in (ROOT / "benchmarks").glob("bench_*.py")):
        assert (newest / f"{name}.txt").is_file(), f"no raw output of {name} in {newest}"


def test_the_chart_is_what_the_script_draws_from_the_newest_ratios(tmp_path: Path) -> None:
    script = _chart_script()
    target = tmp_path / "chart.svg"
    source = RESULTS[-1].relative_to(ROOT)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)  # the script names its source as given, relative to the root
        assert script.main([source.as_posix(), str(target)]) == 0
    committed = (DOCS / "assets" / "bench-ratios.svg").read_text(encoding="utf-8")
    assert target.read_text(encoding="utf-8") == committed, (
        "docs/assets/bench-ratios.svg is stale: run "
        f"python3 scripts/bench_chart.py {source.as_posix()} docs/assets/bench-ratios.svg"
    )
    bars = re.findall(r"<rect ", committed)
    assert len(bars) == len(RESULTS[-1].read_text(encoding="utf-8").splitlines()) - 1


def test_the_chart_script_refuses_a_file_without_its_columns(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("benchmark,ratio\npool,1.5\n", encoding="utf-8")
    assert _chart_script().main([str(bad), str(tmp_path / "out.svg")]) == 1
    assert "bad.csv: no column(s) ['case', 'peer']" in capsys.readouterr().err
    assert not (tmp_path / "out.svg").exists()


def test_the_changelog_page_includes_the_changelog_when_the_site_is_built() -> None:
    markdown = pytest.importorskip("markdown")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    (snippets,) = [
        e["pymdownx.snippets"]
        for e in config["markdown_extensions"]
        if isinstance(e, dict) and "pymdownx.snippets" in e
    ]
    assert snippets.get("check_paths"), "a missing included file must fail the build"
    options = dict(snippets, base_path=[str(ROOT / p) for p in snippets["base_path"]])
    md = markdown.Markdown(
        extensions=["pymdownx.snippets"], extension_configs={"pymdownx.snippets": options}
    )
    html = md.convert((DOCS / "changelog.md").read_text(encoding="utf-8"))
    first = next(
        line.removeprefix("## ")
        for line in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("## ")
    )
    assert f"<h2>{first}</h2>" in html
    assert "--8&lt;--" not in html and "--8<--" not in html


def _nav_pages(nav) -> list[str]:
    found = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        found += _nav_pages(value) if isinstance(value, list) else [value]
    return found


def test_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = set(_nav_pages(config["nav"]))
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    pages = {p for p in pages if not p.startswith("hooks/")}
    assert pages - nav == set(), "pages no menu leads to"
    assert nav - pages == set(), "menu entries without a page"
