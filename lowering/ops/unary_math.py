"""Elementwise math of one tensor: exp and logarithms, roots, abs, square, sign, rounding,
reciprocal, trigonometric and hyperbolic functions, erf, pow and clip.

Every op here maps X to an Out of the same shape and dtype. Kinks follow Paddle's gradient
conventions (written with ``jnp.where`` rather than ``jnp.clip``, whose gradient splits ties):
clip passes the gradient only strictly inside its range; ``round`` rounds half away from zero,
like C's ``round``; sign and the rounding ops have gradient 0.

The activations (relu, sigmoid, tanh, gelu, …) live in ``activation.py``, binary arithmetic in
``math.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ...ir.registry import Attr, op
from ...ir.shape import same_as
from .math import scale_grad_ops

# Paddle's Python API fills clip's bounds with float32's range when one is not given.
FLOAT32_MAX = 3.4028234663852886e38


def _clamp(x, low, high):
    """low where x < low, high where x > high, else x: the gradient is 1 only strictly inside."""
    return jnp.where(x < low, low, jnp.where(x > high, high, x))


def _zero_grad_maker(op, out_grads, in_grads):
    # Paddle has no sign_grad: the (zero) gradient is a `scale` by 0 of Out@GRAD.
    return scale_grad_ops(out_grads["Out"], in_grads["X"], 0.0)


def _const(ctx, name, x, default=None):
    """Attribute ``name`` as a scalar of x's dtype (keeps float32 programs float32)."""
    value = ctx.attr(name, default)
    return jnp.asarray(value, x.dtype)


def _pow(ctx):
    x = ctx.input("X")
    factor = ctx.input("FactorTensor")
    factor = jnp.asarray(factor, x.dtype).reshape(()) if factor is not None else _const(ctx, "factor", x)
    return jnp.power(x, factor)


# -- exponentials, logarithms, roots ---------------------------------------------------------------
@op("exp", inputs="X", outputs="Out", infer_shape=same_as("X"))
def exp(ctx):
    """e ** X."""
    return {"Out": jnp.exp(ctx.input("X"))}


@op("expm1", inputs="X", outputs="Out", infer_shape=same_as("X"))
def expm1(ctx):
    """exp(X) - 1, accurate near 0."""
    return {"Out": jnp.expm1(ctx.input("X"))}


@op("log", inputs="X", outputs="Out", infer_shape=same_as("X"))
def log(ctx):
    """Natural logarithm of X."""
    return {"Out": jnp.log(ctx.input("X"))}


@op("log1p", inputs="X", outputs="Out", infer_shape=same_as("X"))
def log1p(ctx):
    """log(1 + X), accurate near 0."""
    return {"Out": jnp.log1p(ctx.input("X"))}


@op("log2", inputs="X", outputs="Out", infer_shape=same_as("X"))
def log2(ctx):
    """Base-2 logarithm of X."""
    return {"Out": jnp.log2(ctx.input("X"))}


@op("log10", inputs="X", outputs="Out", infer_shape=same_as("X"))
def log10(ctx):
    """Base-10 logarithm of X."""
    return {"Out": jnp.log10(ctx.input("X"))}


@op("sqrt", inputs="X", outputs="Out", infer_shape=same_as("X"))
def sqrt(ctx):
    """Square root of X."""
    return {"Out": jnp.sqrt(ctx.input("X"))}


@op("rsqrt", inputs="X", outputs="Out", infer_shape=same_as("X"))
def rsqrt(ctx):
    """1 / sqrt(X)."""
    return {"Out": lax.rsqrt(ctx.input("X"))}


@op("square", inputs="X", outputs="Out", infer_shape=same_as("X"))
def square(ctx):
    """X * X."""
    return {"Out": jnp.square(ctx.input("X"))}


@op("reciprocal", inputs="X", outputs="Out", infer_shape=same_as("X"))
def reciprocal(ctx):
    """1 / X."""
    return {"Out": 1 / ctx.input("X")}


@op("pow", inputs="X FactorTensor?", outputs="Out", attrs={"factor": 1.0}, infer_shape=same_as("X"),
    no_grad_inputs=["FactorTensor"])
def pow_(ctx):
    """X ** factor; a one-element ``FactorTensor``, when given, replaces the ``factor`` attribute."""
    return {"Out": _pow(ctx)}


@op("erf", inputs="X", outputs="Out", infer_shape=same_as("X"))
def erf(ctx):
    """The error function of X."""
    return {"Out": jax.scipy.special.erf(ctx.input("X"))}


# -- sign, magnitude, rounding ---------------------------------------------------------------------
@op("abs", inputs="X", outputs="Out", infer_shape=same_as("X"))
def abs_(ctx):
    """|X|."""
    return {"Out": jnp.abs(ctx.input("X"))}


@op("sign", inputs="X", outputs="Out", infer_shape=same_as("X"), grad_maker=_zero_grad_maker)
def sign(ctx):
    """-1, 0 or 1 by the sign of X (gradient 0)."""
    return {"Out": jnp.sign(ctx.input("X"))}


@op("floor", inputs="X", outputs="Out", infer_shape=same_as("X"))
def floor(ctx):
    """Largest integer <= X (gradient 0)."""
    return {"Out": jnp.floor(ctx.input("X"))}


@op("ceil", inputs="X", outputs="Out", infer_shape=same_as("X"))
def ceil(ctx):
    """Smallest integer >= X (gradient 0)."""
    return {"Out": jnp.ceil(ctx.input("X"))}


@op("round", inputs="X", outputs="Out", infer_shape=same_as("X"))
def round_(ctx):
    """X rounded to the nearest integer, halves away from zero (gradient 0)."""
    return {"Out": lax.round(ctx.input("X"), lax.RoundingMethod.AWAY_FROM_ZERO)}


@op("trunc", inputs="X", outputs="Out", infer_shape=same_as("X"))
def trunc(ctx):
    """X rounded toward zero (gradient 0)."""
    return {"Out": jnp.trunc(ctx.input("X"))}


@op("clip", inputs="X Min? Max?", outputs="Out",
    attrs={"min": Attr("float", -FLOAT32_MAX), "max": Attr("float", FLOAT32_MAX)},
    infer_shape=same_as("X"), no_grad_inputs=["Min", "Max"])
def clip(ctx):
    """X limited to [min, max]; one-element ``Min``/``Max`` tensors replace the attributes.

    The gradient is 1 strictly inside (min, max) and 0 elsewhere, as in Paddle.
    """
    x = ctx.input("X")
    bounds = []
    for slot, attr in (("Min", "min"), ("Max", "max")):
        t = ctx.input(slot)
        bounds.append(jnp.asarray(t, x.dtype).reshape(()) if t is not None else _const(ctx, attr, x))
    return {"Out": _clamp(x, *bounds)}


# -- trigonometric and hyperbolic ------------------------------------------------------------------
@op("sin", inputs="X", outputs="Out", infer_shape=same_as("X"))
def sin(ctx):
    """sin(X)."""
    return {"Out": jnp.sin(ctx.input("X"))}


@op("cos", inputs="X", outputs="Out", infer_shape=same_as("X"))
def cos(ctx):
    """cos(X)."""
    return {"Out": jnp.cos(ctx.input("X"))}


@op("tan", inputs="X", outputs="Out", infer_shape=same_as("X"))
def tan(ctx):
    """tan(X)."""
    return {"Out": jnp.tan(ctx.input("X"))}


@op("asin", inputs="X", outputs="Out", infer_shape=same_as("X"))
def asin(ctx):
    """arcsin(X)."""
    return {"Out": jnp.arcsin(ctx.input("X"))}


@op("acos", inputs="X", outputs="Out", infer_shape=same_as("X"))
def acos(ctx):
    """arccos(X)."""
    return {"Out": jnp.arccos(ctx.input("X"))}


@op("atan", inputs="X", outputs="Out", infer_shape=same_as("X"))
def atan(ctx):
    """arctan(X)."""
    return {"Out": jnp.arctan(ctx.input("X"))}


@op("sinh", inputs="X", outputs="Out", infer_shape=same_as("X"))
def sinh(ctx):
    """sinh(X)."""
    return {"Out": jnp.sinh(ctx.input("X"))}


@op("cosh", inputs="X", outputs="Out", infer_shape=same_as("X"))
def cosh(ctx):
    """cosh(X)."""
    return {"Out": jnp.cosh(ctx.input("X"))}
