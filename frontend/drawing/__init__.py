"""Drawing programs: ``draw`` (a dataflow graph as SVG or PNG) and the graph beside the tables in
a notebook's view of a program, which this package attaches to :class:`~fluidjax.ir.Program`.

The analysis behind the pictures (the graph of a block, layer names, the summary table) is IR
work and lives in :mod:`fluidjax.ir.graph` and :mod:`fluidjax.ir.summary`; this package only
lays out and renders. Pure Python: nothing here needs JAX or a system package (matplotlib only
for PNG).
"""

from ...ir.program import attach
from ...ir.summary import Summary, summarize
from .draw import Drawing, draw
from .notebook import with_graph

attach("graph_html", with_graph)

__all__ = ["Drawing", "Summary", "draw", "summarize"]
