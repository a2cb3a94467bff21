"""Operators on symbolic Variables: ``a + b`` appends ``elementwise_add``, ``a * 2`` a ``scale`` op.

Installed onto :class:`fluidjax.ir.Variable` at import (the IR stays free of layer code).
"""

from __future__ import annotations

import numbers

from ..ir.variable import Variable
from . import layers


def _scale(x: Variable, scale: float = 1.0, bias: float = 0.0) -> Variable:
    return layers.scale(x, scale=scale, bias=bias)


def _constant_like(x: Variable, value: float) -> Variable:
    return layers.fill_constant([1], x.dtype, value)


def _binary(op_type: str, scalar_forward, scalar_reverse):
    layer = getattr(layers, op_type)

    def forward(self: Variable, other):
        if isinstance(other, Variable):
            return layer(self, other)
        if isinstance(other, numbers.Number):
            return scalar_forward(self, float(other))
        return NotImplemented

    def reverse(self: Variable, other):
        if isinstance(other, numbers.Number):
            return scalar_reverse(self, float(other))
        return NotImplemented

    return forward, reverse


_OPERATORS = {
    "add": _binary("elementwise_add", lambda x, c: _scale(x, 1.0, c), lambda x, c: _scale(x, 1.0, c)),
    "sub": _binary("elementwise_sub", lambda x, c: _scale(x, 1.0, -c), lambda x, c: _scale(x, -1.0, c)),
    "mul": _binary("elementwise_mul", lambda x, c: _scale(x, c), lambda x, c: _scale(x, c)),
    "truediv": _binary("elementwise_div", lambda x, c: _scale(x, 1.0 / c),
                       lambda x, c: layers.elementwise_div(_constant_like(x, c), x)),
}


def install() -> None:
    """Give :class:`Variable` its arithmetic operators."""
    for name, (forward, reverse) in _OPERATORS.items():
        forward.__name__, reverse.__name__ = f"__{name}__", f"__r{name}__"
        setattr(Variable, f"__{name}__", forward)
        setattr(Variable, f"__r{name}__", reverse)
    Variable.__neg__ = lambda self: _scale(self, -1.0)


install()
