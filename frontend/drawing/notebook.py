"""How a program shows in a notebook: its graph beside the tables of variables and ops."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .draw import draw

if TYPE_CHECKING:
    from ...ir.program import Program

COLLAPSE_ABOVE = 300      # ops: a bigger program's graph is drawn with collapse=True


def with_graph(program: "Program", tables_html: str) -> str:
    """``tables_html`` with the program's graph beside it (scrollable; layers folded when big).
    A program the drawing code cannot handle still shows its tables."""
    n_ops = len(program.global_block().ops)
    try:
        svg = draw(program, collapse=n_ops > COLLAPSE_ABOVE).svg
    except Exception as exc:  # display must never fail: the tables still show
        svg = f"<pre>(graph not drawn: {type(exc).__name__}: {exc})</pre>"
    note = " (layers folded)" if n_ops > COLLAPSE_ABOVE else ""
    return ('<div class="fj-program" style="display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start">'
            f'<div class="fj-graph-view"><h4>graph{note}</h4>'
            f'<div style="max-height:640px;max-width:720px;overflow:auto;border:1px solid #ddd">{svg}</div></div>'
            f'<div class="fj-tables-view">{tables_html}</div></div>')
