"""Unary activations and elementwise math: relu … gelu, exp/log/sqrt, abs, pow, clip, rounding.

Every op here maps X to an Out of the same shape and dtype. Kinks follow Paddle's gradient
conventions (written with ``jnp.where`` rather than ``jnp.maximum``/``jnp.clip``, whose gradient
splits ties): relu6, clip and hard_sigmoid pass the gradient only strictly inside their linear
range; ``round`` rounds half away from zero, like C's ``round``.

Attributes Paddle 1.x had and Paddle 2.6 dropped or ignores — ``relu6``'s ``threshold``,
``swish``'s ``beta``, and ``hard_swish``'s ``threshold``/``scale``/``offset`` (declared, but its 2.6
kernel uses the defaults) — are honoured here when a program carries them; with their default
values, the only values Paddle 2.6 writes, the results agree with Paddle 2.6.
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


def _unary(name: str, fn, doc: str, attrs: dict | None = None, grad_maker=None):
    """Register op ``name``: Out = fn(X, attrs) with X's shape and dtype."""

    def rule(ctx):
        return {"Out": fn(ctx.input("X"), ctx)}

    rule.__doc__ = doc
    rule.__name__ = name
    op(name, inputs="X", outputs="Out", attrs=attrs or {}, infer_shape=same_as("X"), grad_maker=grad_maker)(rule)


def _zero_grad_maker(op, out_grads, in_grads):
    # Paddle has no sign_grad: the (zero) gradient is a `scale` by 0 of Out@GRAD.
    return scale_grad_ops(out_grads["Out"], in_grads["X"], 0.0)


def _const(ctx, name, x, default=None):
    """Attribute ``name`` as a scalar of x's dtype (keeps float32 programs float32)."""
    value = ctx.attr(name, default)
    return jnp.asarray(value, x.dtype)


def _relu6(x, ctx):
    return _clamp(x, jnp.zeros((), x.dtype), _const(ctx, "threshold", x, 6.0))


def _leaky_relu(x, ctx):
    return jnp.where(x > 0, x, _const(ctx, "alpha", x) * x)


def _elu(x, ctx):
    # expm1 of min(x, 0): the branch not taken must not overflow, or its NaN gradient leaks.
    return jnp.where(x > 0, x, _const(ctx, "alpha", x) * jnp.expm1(jnp.minimum(x, 0)))


def _gelu(x, ctx):
    return jax.nn.gelu(x, approximate=bool(ctx.attr("approximate")))


def _swish(x, ctx):
    return x * jax.nn.sigmoid(_const(ctx, "beta", x, 1.0) * x)


def _hard_swish(x, ctx):
    threshold, scale, offset = (_const(ctx, k, x) for k in ("threshold", "scale", "offset"))
    return x * _clamp(x + offset, jnp.zeros((), x.dtype), threshold) / scale


def _hard_sigmoid(x, ctx):
    y = _const(ctx, "slope", x) * x + _const(ctx, "offset", x)
    return _clamp(y, jnp.zeros((), x.dtype), jnp.ones((), x.dtype))


def _softplus(x, ctx):
    beta = _const(ctx, "beta", x)
    bx = beta * x
    # jax.nn.softplus is overflow-safe, so the branch not taken has a finite gradient.
    return jnp.where(bx > _const(ctx, "threshold", x), x, jax.nn.softplus(bx) / beta)


def _pow(ctx):
    x = ctx.input("X")
    factor = ctx.input("FactorTensor")
    factor = jnp.asarray(factor, x.dtype).reshape(()) if factor is not None else _const(ctx, "factor", x)
    return jnp.power(x, factor)


_unary("relu", lambda x, ctx: jax.nn.relu(x), "max(X, 0).")
_unary("relu6", _relu6, "min(max(X, 0), threshold), threshold 6 (the attribute is Paddle 1.x's; 2.6 fixes 6).")
_unary("leaky_relu", _leaky_relu, "X where X > 0, else alpha * X.", {"alpha": 0.02})
_unary("elu", _elu, "X where X > 0, else alpha * (exp(X) - 1).", {"alpha": 1.0})
_unary("gelu", _gelu, "X * Phi(X) (erf form), or its tanh approximation when ``approximate``.",
       {"approximate": False})
_unary("sigmoid", lambda x, ctx: jax.nn.sigmoid(x), "1 / (1 + exp(-X)).")
_unary("tanh", lambda x, ctx: jnp.tanh(x), "tanh(X).")
_unary("swish", _swish, "X * sigmoid(beta * X), beta 1 (Paddle 2.6 has no beta attribute and uses 1).")
_unary("silu", lambda x, ctx: x * jax.nn.sigmoid(x), "X * sigmoid(X).")
_unary("hard_swish", _hard_swish, "X * min(max(X + offset, 0), threshold) / scale.",
       {"threshold": 6.0, "scale": 6.0, "offset": 3.0})
_unary("hard_sigmoid", _hard_sigmoid, "min(max(slope * X + offset, 0), 1).", {"slope": 0.2, "offset": 0.5})
_unary("softplus", _softplus, "log(1 + exp(beta * X)) / beta, or X where beta * X > threshold.",
       {"beta": 1.0, "threshold": 20.0})
_unary("softsign", lambda x, ctx: x / (1 + jnp.abs(x)), "X / (1 + |X|).")
_unary("exp", lambda x, ctx: jnp.exp(x), "e ** X.")
_unary("log", lambda x, ctx: jnp.log(x), "Natural logarithm of X.")
_unary("sqrt", lambda x, ctx: jnp.sqrt(x), "Square root of X.")
_unary("rsqrt", lambda x, ctx: lax.rsqrt(x), "1 / sqrt(X).")
_unary("abs", lambda x, ctx: jnp.abs(x), "|X|.")
_unary("square", lambda x, ctx: jnp.square(x), "X * X.")
_unary("sign", lambda x, ctx: jnp.sign(x), "-1, 0 or 1 by the sign of X (gradient 0).",
       grad_maker=_zero_grad_maker)
_unary("floor", lambda x, ctx: jnp.floor(x), "Largest integer <= X (gradient 0).")
_unary("ceil", lambda x, ctx: jnp.ceil(x), "Smallest integer >= X (gradient 0).")
_unary("round", lambda x, ctx: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
       "X rounded to the nearest integer, halves away from zero (gradient 0).")
_unary("reciprocal", lambda x, ctx: 1 / x, "1 / X.")


@op("pow", inputs="X FactorTensor?", outputs="Out", attrs={"factor": 1.0}, infer_shape=same_as("X"),
    no_grad_inputs=["FactorTensor"])
def pow_(ctx):
    """X ** factor; a one-element ``FactorTensor``, when given, replaces the ``factor`` attribute."""
    return {"Out": _pow(ctx)}


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
