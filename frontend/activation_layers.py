"""Fluid 1.8's activation and unary-math layers beyond :mod:`.math_layers`: the trigonometric
ones, log1p, erf, the shrinks, selu, brelu, soft_relu, stanh, mish. Each appends the op of the
same name (Fluid's ``layers/ops.py`` and ``layers/nn.py`` spellings and defaults).

>>> y = stanh(x)                        # 1.7159 * tanh(0.67 * x)
>>> y = softshrink(x, alpha=0.3)
"""

from __future__ import annotations

from ..ir.variable import Variable
from .layer_helper import LayerHelper

__all__ = ["log1p", "logsigmoid", "atan", "tanh_shrink", "cos", "acos", "asin", "sin", "erf", "softshrink",
           "hard_shrink", "thresholded_relu", "selu", "brelu", "soft_relu", "stanh", "mish"]


def _op(op_type: str, x: Variable, attrs: dict | None = None, name: str | None = None) -> Variable:
    return LayerHelper(op_type, name).simple_op(op_type, {"X": x}, attrs or {})


def _unary(op_type: str, doc: str, with_out: bool = False):
    if with_out:
        def layer(x: Variable, out: Variable | None = None, name: str | None = None) -> Variable:
            result = _op(op_type, x, name=name)
            if out is not None:
                LayerHelper("assign").append_op("assign", {"X": result}, {"Out": out})
                return out
            return result
    else:
        def layer(x: Variable, name: str | None = None) -> Variable:
            return _op(op_type, x, name=name)
    layer.__name__ = layer.__qualname__ = op_type
    layer.__doc__ = doc
    return layer


log1p = _unary("log1p", "log(1 + x), accurate near 0.", with_out=True)
logsigmoid = _unary("logsigmoid", "log(sigmoid(x)).")
atan = _unary("atan", "arctan(x).")
tanh_shrink = _unary("tanh_shrink", "x - tanh(x).")
cos = _unary("cos", "cos(x).")
acos = _unary("acos", "arccos(x).")
asin = _unary("asin", "arcsin(x).")
sin = _unary("sin", "sin(x).")


def erf(x: Variable) -> Variable:
    """The error function of x."""
    return _op("erf", x)


def softshrink(x: Variable, alpha: float | None = None) -> Variable:
    """x - alpha above alpha, x + alpha below -alpha, else 0 (alpha 0.5 when None)."""
    return _op("softshrink", x, {"lambda": 0.5 if alpha is None else float(alpha)})


def hard_shrink(x: Variable, threshold: float | None = None) -> Variable:
    """x where |x| > threshold, else 0 (threshold 0.5 when None)."""
    return _op("hard_shrink", x, {"threshold": 0.5 if threshold is None else float(threshold)})


def thresholded_relu(x: Variable, threshold: float | None = None) -> Variable:
    """x where x > threshold, else 0 (threshold 1.0 when None)."""
    return _op("thresholded_relu", x, {"threshold": 1.0 if threshold is None else float(threshold)})


def selu(x: Variable, scale: float | None = None, alpha: float | None = None, name: str | None = None) -> Variable:
    """scale * (x where x > 0, else alpha * (exp(x) - 1)); the SELU constants when None."""
    attrs = {}
    if scale is not None:
        attrs["scale"] = float(scale)
    if alpha is not None:
        attrs["alpha"] = float(alpha)
    return _op("selu", x, attrs, name)


def brelu(x: Variable, t_min: float = 0.0, t_max: float = 24.0, name: str | None = None) -> Variable:
    """x limited to [t_min, t_max]."""
    return _op("brelu", x, {"t_min": float(t_min), "t_max": float(t_max)}, name)


def soft_relu(x: Variable, threshold: float = 40.0, name: str | None = None) -> Variable:
    """log(1 + exp(x limited to [-threshold, threshold]))."""
    return _op("soft_relu", x, {"threshold": float(threshold)}, name)


def stanh(x: Variable, scale_a: float = 0.67, scale_b: float = 1.7159, name: str | None = None) -> Variable:
    """scale_b * tanh(scale_a * x)."""
    return _op("stanh", x, {"scale_a": float(scale_a), "scale_b": float(scale_b)}, name)


def mish(x: Variable, threshold: float = 20, name: str | None = None) -> Variable:
    """x * tanh(softplus(x)), softplus being x above ``threshold``."""
    return _op("mish", x, {"threshold": float(threshold)}, name)
