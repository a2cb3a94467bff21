"""A LoD drawn as SVG: which rows of a ``LoDTensor`` belong to which sequence, level by level.

The rows are a strip of boxes at the bottom; above them each LoD level is a band of boxes, one
per sequence, spanning the rows (through the levels below) it holds, labelled with its index and
length; the offsets are written at the boxes' edges. The outermost level is on top — for a LoD
of paragraphs of sentences of words: paragraphs, then sentences, then the word rows.

A big tensor is drawn up to ``MAX_ROWS`` rows, then an ellipsis says how many more there are;
sequences starting after the drawn rows are left out (at most ``MAX_ROWS`` boxes a level).

Every box carries data attributes so a tool or a test can read the drawing back:
``<rect class="fj-lod-row" data-row="3">`` and ``<rect class="fj-lod-seq" data-level="1"
data-index="0" data-start="0" data-end="3">`` (``start``/``end``: the rows it spans).
"""

from __future__ import annotations

import html
from typing import Sequence

MAX_ROWS = 32               # rows drawn before the ellipsis
CELL, GAP, BAND = 30, 4, 30  # px: a row's width, the gap between boxes, a band's height
LEFT = 74                    # px: room for the level names
COLORS = ("#f6c89f", "#a9cdf0", "#c3e6a5", "#e3b7e8")


def _row_spans(lod: Sequence[Sequence[int]]) -> list[list[int]]:
    """Each level's offsets mapped down to row positions."""
    spans: list[list[int]] = [[] for _ in lod]
    to_rows = None
    for level in reversed(range(len(lod))):
        spans[level] = list(lod[level]) if to_rows is None else [to_rows[o] for o in lod[level]]
        to_rows = spans[level]
    return spans


def lod_svg(lod: Sequence[Sequence[int]], rows: int, max_rows: int = MAX_ROWS) -> str:
    """The SVG text of ``lod`` (offsets, Paddle's ``lod()``) over ``rows`` rows; ``""`` for a
    tensor without a LoD. The LoD must be valid (``lod_tensor.lod_problem`` is None)."""
    if not lod:
        return ""
    shown = min(rows, max_rows)
    more = rows - shown
    spans = _row_spans(lod)
    levels = len(lod)
    x_of = lambda r: LEFT + r * CELL              # noqa: E731  (a row boundary's x)
    width = x_of(shown) + (140 if more else 10)
    height = (levels + 1) * (BAND + 16) + 8
    esc = html.escape
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="fj-lod" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
             f"<title>LoD {esc(str([list(level) for level in lod]))} over {rows} rows</title>"]

    def y_of(band):                                # band 0: the outer level; band `levels`: the rows
        return 14 + band * (BAND + 16)

    for level in range(levels):
        y = y_of(level)
        name = "sequences" if level == levels - 1 else "of sequences"
        parts.append(f'<text x="4" y="{y + BAND / 2 + 4}" fill="#333">level {level}</text>'
                     f'<text x="4" y="{y + BAND / 2 + 16}" fill="#777" font-size="9">{name}</text>')
        edges, offsets = spans[level], lod[level]
        below = "rows" if level == levels - 1 else "seqs"
        drawn = 0
        for i in range(len(offsets) - 1):
            start, end = edges[i], edges[i + 1]
            if (start >= shown and not (start == end == shown == rows)) or drawn >= max_rows:
                continue
            drawn += 1
            clipped = end > shown
            x0, x1 = x_of(start), x_of(min(end, shown))
            w = max(x1 - x0 - GAP, 4)
            length = offsets[i + 1] - offsets[i]
            color = COLORS[level % len(COLORS)]
            dash = ' stroke-dasharray="4 3"' if clipped else ""
            parts.append(f'<rect class="fj-lod-seq" data-level="{level}" data-index="{i}" data-start="{start}" '
                         f'data-end="{end}" x="{x0}" y="{y}" width="{w}" height="{BAND}" rx="4" fill="{color}" '
                         f'stroke="#555"{dash}><title>level {level}, sequence {i}: {length} {below} '
                         f'(offsets {offsets[i]}..{offsets[i + 1]})</title></rect>')
            label = f"#{i}: {length}" if w < 70 else f"#{i}: {length} {below}"
            if w >= 22:
                parts.append(f'<text x="{x0 + w / 2}" y="{y + BAND / 2 + 4}" text-anchor="middle">{label}</text>')
        for k, e in enumerate(edges):
            if e <= shown and (k < max_rows + 1):
                parts.append(f'<text x="{x_of(e) - GAP / 2}" y="{y - 2}" text-anchor="middle" '
                             f'fill="#a33" font-size="9">{offsets[k]}</text>')
    y = y_of(levels)
    parts.append(f'<text x="4" y="{y + BAND / 2 + 4}" fill="#333">rows</text>')
    for r in range(shown):
        parts.append(f'<rect class="fj-lod-row" data-row="{r}" x="{x_of(r)}" y="{y}" width="{CELL - GAP}" '
                     f'height="{BAND}" fill="#e4e4ee" stroke="#99a"/>'
                     f'<text x="{x_of(r) + (CELL - GAP) / 2}" y="{y + BAND / 2 + 4}" text-anchor="middle" '
                     f'font-size="10">{r}</text>')
    if more:
        parts.append(f'<text class="fj-lod-more" x="{x_of(shown) + 6}" y="{y + BAND / 2 + 4}">'
                     f'… {more} more row{"s" if more > 1 else ""}</text>')
    parts.append("</svg>")
    return "".join(parts)


def with_lod_drawing(tensor_html: str, lod: Sequence[Sequence[int]], rows: int) -> str:
    """A tensor's HTML view (``display.tensor_html``) with the drawing of its LoD added below
    its table (unchanged when there is no LoD)."""
    svg = lod_svg(lod, rows)
    if not svg or not tensor_html.endswith("</div>"):
        return tensor_html
    return tensor_html[: -len("</div>")] + f"<div class='fj-lod-drawing'>{svg}</div></div>"
