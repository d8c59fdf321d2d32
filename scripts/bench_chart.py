#!/usr/bin/env python3
"""Draw the Benchmarks page's chart: each benchmark's headline ratio against its peer.

Reads a CSV of ``benchmark,case,peer,ratio`` rows (the ratios ``scripts/bench`` printed,
"vs peer": the peer's time over easycore's, above 1 easycore is faster) and writes an SVG
bar chart on a log scale, 1x (the peer) marked, no dependency beyond the standard library:

    python3 scripts/bench_chart.py benchmarks/results/2026-12-03/ratios.csv \\
        docs/assets/bench-ratios.svg
"""

from __future__ import annotations

import csv
import math
import sys
from html import escape
from pathlib import Path

BAR_W, RIGHT, ROW_H, TOP, BOTTOM = 330, 60, 24, 40, 46
CHAR_W = 6.7  # a 12 px sans-serif character, wide enough for the widest labels
LOW, HIGH = 1 / 16, 64.0  # the axis, log scale; a ratio beyond it is drawn at its end


def label_of(row: dict[str, str]) -> str:
    return f"{row['benchmark']}: {row['case']} (vs {row['peer']})"


def svg(rows: list[dict[str, str]], title: str) -> str:
    label_w = 12 + CHAR_W * max(len(label_of(row)) for row in rows)

    def x_of(ratio: float) -> float:
        clipped = min(max(ratio, LOW), HIGH)
        return label_w + BAR_W * math.log(clipped / LOW) / math.log(HIGH / LOW)

    height = TOP + ROW_H * len(rows) + BOTTOM
    width = round(label_w + BAR_W + RIGHT)
    one = x_of(1.0)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        '<text x="8" y="20" font-weight="bold">'
        "the peer's time (or memory) over easycore's; right of 1x: easycore wins</text>",
    ]
    for i, row in enumerate(rows):
        ratio = float(row["ratio"])
        y = TOP + i * ROW_H
        colour = "#3f51b5" if ratio >= 1.0 else "#e08a00"
        left, right = sorted((one, x_of(ratio)))
        label = label_of(row)
        out += [
            f'<text x="{label_w - 8:.0f}" y="{y + 16}" text-anchor="end">{escape(label)}</text>',
            f'<rect x="{left:.1f}" y="{y + 5}" width="{max(right - left, 1):.1f}" '
            f'height="{ROW_H - 9}" fill="{colour}"/>',
            f'<text x="{right + 4:.1f}" y="{y + 16}">{ratio:.2f}x</text>',
        ]
    axis_y = TOP + ROW_H * len(rows) + 4
    out.append(f'<line x1="{one:.1f}" y1="{TOP}" x2="{one:.1f}" y2="{axis_y}" stroke="#333"/>')
    tick = LOW
    while tick <= HIGH:
        x = x_of(tick)
        text = f"{tick:g}x"
        out += [
            f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 5}" stroke="#333"/>',
            f'<text x="{x:.1f}" y="{axis_y + 18}" text-anchor="middle">{text}</text>',
        ]
        tick *= 4
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    source, target = Path(argv[0]), Path(argv[1])
    with source.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    missing = {"benchmark", "case", "peer", "ratio"} - set(rows[0] if rows else {})
    if missing:
        print(f"{source}: no column(s) {sorted(missing)}", file=sys.stderr)
        return 1
    title = f"scripts/bench ratios against each peer, from {source.as_posix()}"
    target.write_text(svg(rows, title), encoding="utf-8")
    print(f"wrote {target} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
