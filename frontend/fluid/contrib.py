"""``fluid.contrib``: of Fluid 1.x's contributed modules, ``mixed_precision``
(``fluid.contrib.mixed_precision.decorate``, :mod:`fluidjax.frontend.amp`) and ``memory_usage``
are offered; Fluid 1.8's other names (slim, quantization, the contrib layers and decoder, ...) are
importable stand-ins that raise :class:`~fluidjax.ir.errors.NotOfferedError` when used
(``frontend/fluid/paths.py``)."""

from ..fluid_helpers import memory_usage  # noqa: F401
from . import mixed_precision  # noqa: F401

__all__ = ["memory_usage", "mixed_precision"]
