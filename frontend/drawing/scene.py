"""Sizes, positions and shapes of a drawn graph: a flat list of primitives that the SVG writer and
the PNG painter both read, so the two outputs are the same picture.

Primitives (tuples, cheap to make by the ten thousand):

- ``("begin", attrs)`` / ``("end",)`` — a node's group (its data attributes) and ``("title", text)``;
- ``("rect", x, y, w, h, style, rx)`` — a box; ``style`` names an entry of :data:`STYLES`;
- ``("curve", points, style)`` — an edge through ``points``, arrow at the end;
- ``("text", x, y, text, size, bold, anchor, color)``.
"""

from __future__ import annotations

from ...ir.graph import Graph
from .layout import layout

FONT = 12.0
SMALL = 10.0
PAD_X = 10.0
LINE_1 = 22.0
LINE_2 = 34.0
CLUSTER_HEADER = 22.0
CLUSTER_PAD = 10.0
CLUSTER_GAP = 16.0

# fill, stroke, stroke width, dashed
STYLES = {
    "op": ("#e8f0fe", "#4a6fa5", 1.0, False),
    "group": ("#d6e4fb", "#2f4f8a", 2.0, False),
    "param": ("#fff1d6", "#c48a1a", 1.0, False),
    "data": ("#e3f5e1", "#3d8b37", 1.2, False),
    "var": ("#f4f4f4", "#888888", 1.0, True),
    "output": ("#f3e8fd", "#7b4fa8", 1.2, False),
    "hidden": ("#fafafa", "#aaaaaa", 1.0, True),
    "cluster": ("#f7f9fd", "#4a6fa5", 1.0, True),
    "edge": (None, "#6b7280", 1.0, False),
    "lod_edge": (None, "#c0392b", 2.0, False),
}
_SOURCE_KINDS = frozenset({"param", "data", "var"})
ROUNDED = {"data": 1.0, "output": 1.0}     # pill-shaped (radius = half the height)


def text_width(text: str, size: float, bold: bool = False) -> float:
    """An estimate of the width of ``text`` in a sans-serif font (no font files needed)."""
    return len(text) * size * (0.64 if bold else 0.58)


class Placed:
    """A graph with its layout: node sizes and centers (recursively for clusters)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.sizes: list[tuple[float, float]] = []
        self.inner: list[list["Placed"]] = []
        for node in graph.nodes:
            bold = node.kind in ("op", "group")
            w = max(text_width(node.label, FONT, bold), text_width(node.sub, SMALL)) + 2 * PAD_X
            h = LINE_2 if node.sub else LINE_1
            placed = [Placed(g) for g in node.clusters]
            if placed:
                inner_w = sum(p.width for p in placed) + CLUSTER_GAP * (len(placed) - 1)
                w = max(w, inner_w + 2 * CLUSTER_PAD)
                h = CLUSTER_HEADER + max(p.height for p in placed) + CLUSTER_PAD
            self.sizes.append((w, h))
            self.inner.append(placed)
        # the dataflow between ops pulls harder than a parameter's edge: chains stay straight
        weights = [0.05 if graph.nodes[e.src].kind in _SOURCE_KINDS else 1.0 for e in graph.edges]
        self.layout = layout(self.sizes, [(e.src, e.dst) for e in graph.edges], weights)
        self.width = max(self.layout.width, 40.0)
        self.height = max(self.layout.height, 30.0)


def scene(placed: Placed, ox: float = 0.0, oy: float = 0.0, out: list | None = None) -> list:
    """The primitives of ``placed`` drawn with its top-left corner at ``(ox, oy)``."""
    out = [] if out is None else out
    graph, lay = placed.graph, placed.layout
    for edge, pts in zip(graph.edges, lay.points):
        pts = [(x + ox, y + oy) for x, y in pts]
        out.append(("curve", pts, "lod_edge" if edge.lod_level else "edge"))
        if edge.label and graph.nodes[edge.src].kind not in _SOURCE_KINDS:  # a source shows its shape
            (x0, y0), (x1, y1) = pts[-2], pts[-1]
            out.append(("text", (x0 + x1) / 2 + 4, (y0 + y1) / 2 + 3, edge.label, SMALL - 1, False, "start",
                        "#c0392b" if edge.lod_level else "#555555"))
    for i, node in enumerate(graph.nodes):
        w, h = placed.sizes[i]
        cx, cy = lay.x[i] + ox, lay.y[i] + oy
        x, y = cx - w / 2, cy - h / 2
        attrs = {"class": f"fj-node fj-{node.kind}", "data-kind": node.kind, "data-label": node.label}
        if node.op_type is not None:
            attrs["data-op"] = node.op_type
            attrs["data-block"] = str(graph.block_idx)
            attrs["data-index"] = str(node.op_index)
        if node.ops and node.kind != "op":
            attrs["data-ops"] = " ".join(map(str, node.ops))
        if node.var is not None:
            attrs["data-var"] = node.var
        out.append(("begin", attrs))
        if node.tip:
            out.append(("title", node.tip))
        inner = placed.inner[i]
        if inner:
            out.append(("rect", x, y, w, h, "cluster", 6.0))
            out.append(("text", x + 8, y + 15, f"{node.label}" + (f"  {node.sub}" if node.sub else ""),
                        FONT, True, "start", "#2f4f8a"))
            total = sum(p.width for p in inner) + CLUSTER_GAP * (len(inner) - 1)
            ix = cx - total / 2
            for p in inner:
                scene(p, ix, y + CLUSTER_HEADER, out)
                ix += p.width + CLUSTER_GAP
        else:
            rx = h / 2 if node.kind in ROUNDED else 4.0
            out.append(("rect", x, y, w, h, node.kind, rx))
            bold = node.kind in ("op", "group")
            if node.sub:
                out.append(("text", cx, y + 14, node.label, FONT, bold, "middle", "#1f2937"))
                out.append(("text", cx, y + 27, node.sub, SMALL, False, "middle", "#4b5563"))
            else:
                out.append(("text", cx, cy + 4, node.label, FONT, bold, "middle", "#1f2937"))
        out.append(("end",))
    return out
