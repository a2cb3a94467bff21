"""A PNG of a scene, painted with matplotlib's Agg backend.

Why matplotlib and not an SVG rasterizer: cairosvg needs the system cairo library, and the other
rasterizers are extra binary packages; matplotlib installs from wheels with pip alone and is what
notebook users already have. It paints the same primitives the SVG is written from.
"""

from __future__ import annotations

from .scene import STYLES

MAX_PIXELS = 32000      # Agg's limit is 2**16 per side; far below it a PNG is unreadable anyway


def save_png(prims: list, width: float, height: float, path, dpi: float = 100.0) -> None:
    """Write the primitives as a PNG at ``path`` (one SVG unit = one pixel at ``dpi`` 100)."""
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import FancyBboxPatch, PathPatch, Polygon
        from matplotlib.path import Path
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("saving a drawing as PNG needs matplotlib (pip install matplotlib); "
                          "save as .svg to do without it") from exc
    scale = dpi / 100.0
    if max(width, height) * scale > MAX_PIXELS:
        raise ValueError(f"the drawing is {width:.0f}×{height:.0f} px, too large for a PNG (at most "
                         f"{MAX_PIXELS} px a side): draw with collapse=True, or save it as .svg")
    del matplotlib
    fig = Figure(figsize=(max(width, 1) / 100.0, max(height, 1) / 100.0), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.axis("off")
    px = 72.0 / 100.0       # font sizes are in SVG px; matplotlib's are points
    for p in prims:
        kind = p[0]
        if kind == "rect":
            _, x, y, w, h, style, rx = p
            fill, stroke, lw, dashed = STYLES[style]
            r = min(rx, h / 2, w / 2)
            ax.add_patch(FancyBboxPatch((x + r, y + r), max(w - 2 * r, 0), max(h - 2 * r, 0),
                                        boxstyle=f"round,pad={r}", facecolor=fill, edgecolor=stroke,
                                        linewidth=lw * px, linestyle="--" if dashed else "-"))
        elif kind == "curve":
            pts, style = p[1], p[2]
            _, stroke, lw, _ = STYLES[style]
            verts, codes = [pts[0]], [Path.MOVETO]
            for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
                my = (y1 - y0) / 2
                verts += [(x0, y0 + my), (x1, y1 - my), (x1, y1)]
                codes += [Path.CURVE4] * 3
            ax.add_patch(PathPatch(Path(verts, codes), facecolor="none", edgecolor=stroke,
                                   linewidth=lw * px))
            x1, y1 = pts[-1]
            ax.add_patch(Polygon([(x1 - 3.5, y1 - 7), (x1 + 3.5, y1 - 7), (x1, y1)], closed=True,
                                 facecolor="#6b7280", edgecolor="none"))
        elif kind == "text":
            _, x, y, text, size, bold, anchor, color = p
            ax.text(x, y, text, fontsize=size * px, fontweight="bold" if bold else "normal",
                    ha={"start": "left", "middle": "center"}.get(anchor, "right"), va="baseline", color=color)
    fig.savefig(path, format="png", dpi=dpi, facecolor="white")
