"""Showing programs: ``draw`` (a dataflow graph as SVG) and ``summary`` (a Keras-style table).

Pure Python on top of :mod:`fluidjax.ir`: nothing here needs JAX or a system package.
"""

from .draw import Drawing, draw
from .summary import Summary, summarize

__all__ = ["Drawing", "Summary", "draw", "summarize"]
