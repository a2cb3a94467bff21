"""``fj.draw(program)``: a program as a dataflow graph that notebooks show inline as SVG.

>>> import fluidjax as fj
>>> d = fj.draw(fj.default_main_program())
>>> d.svg.startswith("<svg")
True
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ...ir.graph import Graph, build
from .png import save_png
from .scene import Placed, scene
from .svg import to_svg

if TYPE_CHECKING:
    from ...ir.program import Program


class Drawing:
    """A drawn program. Jupyter shows it through ``_repr_svg_``; ``svg`` is the SVG text;
    ``save(path)`` writes ``.svg`` or ``.png``. ``graph`` holds the nodes and edges drawn."""

    def __init__(self, graph: Graph, placed: Placed) -> None:
        self.graph = graph
        self._placed = placed
        self._prims = scene(placed)
        self.width, self.height = placed.width, placed.height
        self._svg: str | None = None

    @property
    def svg(self) -> str:
        """The SVG document (text)."""
        if self._svg is None:
            self._svg = to_svg(self._prims, self.width, self.height)
        return self._svg

    def _repr_svg_(self) -> str:
        return self.svg

    def save(self, path: str | os.PathLike, dpi: float = 100.0) -> None:
        """Write the drawing to ``path``: SVG for ``.svg``, PNG for ``.png`` (PNG needs matplotlib)."""
        ext = os.path.splitext(os.fspath(path))[1].lower()
        if ext == ".svg":
            with open(path, "w", encoding="utf-8") as f:
                f.write(self.svg)
        elif ext == ".png":
            save_png(self._prims, self.width, self.height, path, dpi=dpi)
        else:
            raise ValueError(f"Drawing.save: cannot write {ext or 'a file without extension'!r}; "
                             "use a .svg or .png path")

    def __repr__(self) -> str:
        ops = sum(1 for n in self.graph.nodes if n.kind == "op")
        return (f"<fluidjax Drawing: {len(self.graph.nodes)} nodes ({ops} ops), {len(self.graph.edges)} edges, "
                f"{self.width:.0f}×{self.height:.0f} px>")


def draw(program: "Program", show_backward: bool = False, show_optimizer: bool = False,
         collapse: bool = False, block: int = 0) -> Drawing:
    """Draw ``program`` (its block ``block``, sub-blocks nested in the ops that own them).

    Data variables, parameters (orange boxes) and ops are nodes; every other variable is an edge
    labelled with its shape (``?`` for an unknown dim, ``LoD1`` for a level of LoD, red edges
    for LoD data). Backward and optimizer ops are folded into one node each unless
    ``show_backward`` / ``show_optimizer``; ``collapse=True`` folds each layer (``fc_0``,
    ``conv2d_3``) or top-level name scope into one node.
    """
    graph = build(program.block(block), show_backward=show_backward, show_optimizer=show_optimizer,
                  collapse=collapse)
    return Drawing(graph, Placed(graph))
