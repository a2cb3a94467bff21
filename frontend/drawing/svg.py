"""The SVG text of a scene (see :mod:`fluidjax.frontend.drawing.scene`): plain SVG 1.1, no scripts, no ids but
the arrow marker, so several drawings can sit in one notebook page."""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from .scene import STYLES


def _css() -> str:
    rules = []
    for name, (fill, stroke, width, dashed) in STYLES.items():
        rule = f"fill:{fill or 'none'};stroke:{stroke};stroke-width:{width}"
        if dashed:
            rule += ";stroke-dasharray:4 3"
        rules.append(f".fj-s-{name}{{{rule}}}")
    return "".join(rules)


_CSS = _css()


def _f(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _path(pts) -> str:
    (x, y) = pts[0]
    d = [f"M{_f(x)},{_f(y)}"]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        my = (y1 - y0) / 2
        d.append(f"C{_f(x0)},{_f(y0 + my)} {_f(x1)},{_f(y1 - my)} {_f(x1)},{_f(y1)}")
    return "".join(d)


def to_svg(prims: list, width: float, height: float) -> str:
    """The SVG document of the primitives ``prims`` on a ``width`` × ``height`` canvas."""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_f(width)}" height="{_f(height)}" '
           f'viewBox="0 0 {_f(width)} {_f(height)}" font-family="Helvetica,Arial,sans-serif" class="fj-graph">'
           f'<style>{_CSS}</style>'
           '<defs><marker id="fj-arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0L8,4L0,8z" fill="#6b7280"/></marker></defs>'
           f'<rect width="100%" height="100%" fill="white"/>']
    append = out.append
    for p in prims:
        kind = p[0]
        if kind == "curve":
            append(f'<path class="fj-edge fj-s-{p[2]}" d="{_path(p[1])}" marker-end="url(#fj-arrow)"/>')
        elif kind == "text":
            _, x, y, text, size, bold, anchor, color = p
            weight = ' font-weight="bold"' if bold else ""
            anchor = "" if anchor == "start" else f' text-anchor="{anchor}"'
            append(f'<text x="{_f(x)}" y="{_f(y)}" font-size="{_f(size)}"{weight}{anchor} fill="{color}">'
                   f'{escape(text)}</text>')
        elif kind == "rect":
            _, x, y, w, h, style, rx = p
            append(f'<rect class="fj-s-{style}" x="{_f(x)}" y="{_f(y)}" width="{_f(w)}" height="{_f(h)}" '
                   f'rx="{_f(rx)}"/>')
        elif kind == "begin":
            append("<g " + " ".join(f"{k}={quoteattr(v)}" for k, v in p[1].items()) + ">")
        elif kind == "title":
            append(f"<title>{escape(p[1])}</title>")
        elif kind == "end":
            append("</g>")
    append("</svg>")
    return "".join(out)
