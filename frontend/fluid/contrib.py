"""``fluid.contrib``: of Fluid 1.x's contributed modules, ``mixed_precision``
(``fluid.contrib.mixed_precision.decorate``, :mod:`fluidjax.frontend.amp`), ``memory_usage`` and the
recurrent units of ``fluid.contrib.layers`` (``basic_lstm``, ``BasicLSTMUnit``, ``basic_gru``,
``BasicGRUUnit``: :mod:`fluidjax.frontend.contrib_rnn`) are offered; Fluid 1.8's other names (slim, quantization, the contrib layers and decoder, ...) are
importable stand-ins that raise :class:`~fluidjax.ir.errors.NotOfferedError` when used
(``frontend/fluid/paths.py``)."""

from ..contrib_rnn import BasicGRUUnit, BasicLSTMUnit, basic_gru, basic_lstm  # noqa: F401
from ..fluid_helpers import memory_usage  # noqa: F401
from . import mixed_precision  # noqa: F401

__all__ = ["memory_usage", "mixed_precision", "BasicGRUUnit", "BasicLSTMUnit", "basic_gru", "basic_lstm"]
