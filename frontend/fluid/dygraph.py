"""``fluid.dygraph``: not offered. fluidjax runs static programs. The names a static script reads
here work (``enabled()`` is ``False``; ``no_grad`` changes nothing in a static program, as in
Fluid); Fluid 1.8's other dygraph names (``Layer``, ``Linear``, ``guard``, ``to_variable``, ...)
are importable stand-ins that raise :class:`~fluidjax.ir.errors.NotOfferedError` when used
(``frontend/fluid/paths.py``)."""

from ..fluid_helpers import no_grad  # noqa: F401
from ..framework import in_dygraph_mode as enabled  # noqa: F401

__all__ = ["enabled", "no_grad"]
