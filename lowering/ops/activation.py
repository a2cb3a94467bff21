"""Activations: relu and its variants (relu6, leaky_relu, elu, selu, celu, brelu,
thresholded_relu, rrelu), gelu, sigmoid, tanh, swish/silu/mish, hard_swish, hard_sigmoid,
softplus, softsign, stanh, soft_relu, logsigmoid, the shrinks (softshrink, hard_shrink, tanh_shrink) and maxout.

Every op here but maxout maps X to an Out of the same shape and dtype. Kinks follow Paddle's
gradient conventions (written with ``jnp.where`` rather than ``jnp.maximum``/``jnp.clip``, whose
gradient splits ties): relu6, hard_sigmoid and brelu pass the gradient only strictly inside
their linear range. Elementwise math that is not an activation (exp, log, abs, pow, clip,
rounding, trigonometry, …) lives in ``unary_math.py``.

Attributes Paddle 1.x had and Paddle 2.6 dropped or ignores — ``relu6``'s ``threshold``,
``swish``'s ``beta``, and ``hard_swish``'s ``threshold``/``scale``/``offset`` (declared, but its 2.6
kernel uses the defaults) — are honoured here when a program carries them; with their default
values, the only values Paddle 2.6 writes, the results agree with Paddle 2.6.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ...ir.registry import op
from ...ir.shape import InferShapeContext, same_as
from ._errors import _fail
from .unary_math import _clamp, _const


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


def _mish(x, ctx):
    # Paddle's softplus with a threshold: x above it, exp(x) below -threshold, log1p(exp(x)) between.
    t = _const(ctx, "threshold", x)
    sp = jnp.where(x > t, x, jnp.where(x < -t, jnp.exp(jnp.minimum(x, t)), jnp.log1p(jnp.exp(jnp.minimum(x, t)))))
    return x * jnp.tanh(sp)


def _selu(x, ctx):
    scale, alpha = _const(ctx, "scale", x), _const(ctx, "alpha", x)
    return scale * jnp.where(x > 0, x, alpha * jnp.expm1(jnp.minimum(x, 0)))


def _celu(x, ctx):
    alpha = _const(ctx, "alpha", x)
    return jnp.where(x > 0, x, alpha * jnp.expm1(jnp.minimum(x, 0) / alpha))


def _softshrink(x, ctx):
    lam = _const(ctx, "lambda", x)
    return jnp.where(x > lam, x - lam, jnp.where(x < -lam, x + lam, jnp.zeros((), x.dtype)))


def _hard_shrink(x, ctx):
    t = _const(ctx, "threshold", x)
    return jnp.where((x > t) | (x < -t), x, jnp.zeros((), x.dtype))


# -- the relu family -------------------------------------------------------------------------------
@op("relu", inputs="X", outputs="Out", infer_shape=same_as("X"))
def relu(ctx):
    """max(X, 0)."""
    return {"Out": jax.nn.relu(ctx.input("X"))}


@op("relu6", inputs="X", outputs="Out", infer_shape=same_as("X"))
def relu6(ctx):
    """min(max(X, 0), threshold), threshold 6 (the attribute is Paddle 1.x's; 2.6 fixes 6)."""
    return {"Out": _relu6(ctx.input("X"), ctx)}


@op("leaky_relu", inputs="X", outputs="Out", attrs={"alpha": 0.02}, infer_shape=same_as("X"))
def leaky_relu(ctx):
    """X where X > 0, else alpha * X."""
    return {"Out": _leaky_relu(ctx.input("X"), ctx)}


@op("elu", inputs="X", outputs="Out", attrs={"alpha": 1.0}, infer_shape=same_as("X"))
def elu(ctx):
    """X where X > 0, else alpha * (exp(X) - 1)."""
    return {"Out": _elu(ctx.input("X"), ctx)}


@op("selu", inputs="X", outputs="Out", attrs={"scale": 1.0507009873554805, "alpha": 1.6732632423543772},
    infer_shape=same_as("X"))
def selu(ctx):
    """scale * (X where X > 0, else alpha * (exp(X) - 1))."""
    return {"Out": _selu(ctx.input("X"), ctx)}


@op("celu", inputs="X", outputs="Out", attrs={"alpha": 1.0}, infer_shape=same_as("X"))
def celu(ctx):
    """X where X > 0, else alpha * (exp(X / alpha) - 1)."""
    return {"Out": _celu(ctx.input("X"), ctx)}


@op("brelu", inputs="X", outputs="Out", attrs={"t_min": 0.0, "t_max": 24.0}, infer_shape=same_as("X"))
def brelu(ctx):
    """X limited to [t_min, t_max] (Hardtanh); the gradient is 1 strictly inside."""
    x = ctx.input("X")
    t_min, t_max = _const(ctx, "t_min", x), _const(ctx, "t_max", x)
    return {"Out": jnp.where(x < t_min, t_min, jnp.where(x > t_max, t_max, x))}


@op("thresholded_relu", inputs="X", outputs="Out", attrs={"threshold": 1.0}, infer_shape=same_as("X"))
def thresholded_relu(ctx):
    """X where X > threshold, else 0."""
    x = ctx.input("X")
    return {"Out": jnp.where(x > _const(ctx, "threshold", x), x, jnp.zeros((), x.dtype))}


@op("rrelu", inputs="X", outputs="Out Noise", attrs={"is_test": False, "lower": 0.125, "upper": 0.3333333432674408},
    infer_shape=same_as("X"), no_grad_outputs=["Noise"])
def rrelu(ctx):
    """Randomised leaky ReLU at inference (``is_test``): X where X >= 0, else X · (lower + upper) / 2.
    Training mode draws a slope per element; it is not supported here (saved models run is_test).
    Noise (the slope of each element) is required, as Paddle's gradient kernel reads it."""
    x = ctx.input("X")
    if not ctx.attr("is_test"):
        _fail(ctx, "the training form (random slopes) is not supported; run the program with is_test=True")
    slope = jnp.asarray((float(ctx.attr("lower")) + float(ctx.attr("upper"))) / 2, x.dtype)
    return {"Out": jnp.where(x >= 0, x, x * slope), "Noise": jnp.where(x >= 0, jnp.ones((), x.dtype), slope)}


# -- sigmoid, tanh and their relatives -------------------------------------------------------------
@op("gelu", inputs="X", outputs="Out", attrs={"approximate": False}, infer_shape=same_as("X"))
def gelu(ctx):
    """X * Phi(X) (erf form), or its tanh approximation when ``approximate``."""
    return {"Out": _gelu(ctx.input("X"), ctx)}


@op("sigmoid", inputs="X", outputs="Out", infer_shape=same_as("X"))
def sigmoid(ctx):
    """1 / (1 + exp(-X))."""
    return {"Out": jax.nn.sigmoid(ctx.input("X"))}


@op("logsigmoid", inputs="X", outputs="Out", infer_shape=same_as("X"))
def logsigmoid(ctx):
    """log(sigmoid(X)), computed stably."""
    return {"Out": jax.nn.log_sigmoid(ctx.input("X"))}


@op("tanh", inputs="X", outputs="Out", infer_shape=same_as("X"))
def tanh(ctx):
    """tanh(X)."""
    return {"Out": jnp.tanh(ctx.input("X"))}


@op("swish", inputs="X", outputs="Out", infer_shape=same_as("X"))
def swish(ctx):
    """X * sigmoid(beta * X), beta 1 (Paddle 2.6 has no beta attribute and uses 1)."""
    return {"Out": _swish(ctx.input("X"), ctx)}


@op("silu", inputs="X", outputs="Out", infer_shape=same_as("X"))
def silu(ctx):
    """X * sigmoid(X)."""
    x = ctx.input("X")
    return {"Out": x * jax.nn.sigmoid(x)}


@op("mish", inputs="X", outputs="Out", attrs={"threshold": 20.0}, infer_shape=same_as("X"))
def mish(ctx):
    """X * tanh(softplus(X)), softplus being X above ``threshold`` (and exp(X) below
    -threshold), as Paddle computes it."""
    return {"Out": _mish(ctx.input("X"), ctx)}


@op("hard_swish", inputs="X", outputs="Out", attrs={"threshold": 6.0, "scale": 6.0, "offset": 3.0},
    infer_shape=same_as("X"))
def hard_swish(ctx):
    """X * min(max(X + offset, 0), threshold) / scale."""
    return {"Out": _hard_swish(ctx.input("X"), ctx)}


@op("hard_sigmoid", inputs="X", outputs="Out", attrs={"slope": 0.2, "offset": 0.5}, infer_shape=same_as("X"))
def hard_sigmoid(ctx):
    """min(max(slope * X + offset, 0), 1)."""
    return {"Out": _hard_sigmoid(ctx.input("X"), ctx)}


@op("softplus", inputs="X", outputs="Out", attrs={"beta": 1.0, "threshold": 20.0}, infer_shape=same_as("X"))
def softplus(ctx):
    """log(1 + exp(beta * X)) / beta, or X where beta * X > threshold."""
    return {"Out": _softplus(ctx.input("X"), ctx)}


@op("stanh", inputs="X", outputs="Out", attrs={"scale_a": 0.67, "scale_b": 1.7159}, infer_shape=same_as("X"))
def stanh(ctx):
    """scale_b * tanh(scale_a * X), the scaled tanh of LeCun's "Efficient BackProp"."""
    x = ctx.input("X")
    return {"Out": _const(ctx, "scale_b", x) * jnp.tanh(_const(ctx, "scale_a", x) * x)}


@op("soft_relu", inputs="X", outputs="Out", attrs={"threshold": 40.0}, infer_shape=same_as("X"))
def soft_relu(ctx):
    """log(1 + exp(X limited to [-threshold, threshold])). Paddle's gradient, sigmoid of the limited
    X, is kept below -threshold and is 0 only where the result reaches threshold."""
    x = ctx.input("X")
    t = _const(ctx, "threshold", x)
    z = jnp.where(x > t, t, x + lax.stop_gradient(jnp.maximum(x, -t) - x))
    out = jnp.log1p(jnp.exp(z))
    return {"Out": jnp.where(out < t, out, lax.stop_gradient(out))}


@op("softsign", inputs="X", outputs="Out", infer_shape=same_as("X"))
def softsign(ctx):
    """X / (1 + |X|)."""
    x = ctx.input("X")
    return {"Out": x / (1 + jnp.abs(x))}


# -- shrinks ---------------------------------------------------------------------------------------
@op("softshrink", inputs="X", outputs="Out", attrs={"lambda": 0.5}, infer_shape=same_as("X"))
def softshrink(ctx):
    """X - lambda above lambda, X + lambda below -lambda, else 0."""
    return {"Out": _softshrink(ctx.input("X"), ctx)}


@op("hard_shrink", inputs="X", outputs="Out", attrs={"threshold": 0.5}, infer_shape=same_as("X"))
def hard_shrink(ctx):
    """X where |X| > threshold, else 0 (Paddle's name for hardshrink)."""
    return {"Out": _hard_shrink(ctx.input("X"), ctx)}


@op("tanh_shrink", inputs="X", outputs="Out", infer_shape=same_as("X"))
def tanh_shrink(ctx):
    """X - tanh(X)."""
    x = ctx.input("X")
    return {"Out": x - jnp.tanh(x)}


# -- maxout ----------------------------------------------------------------------------------------
def _maxout_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    g, axis = ctx.attr("groups"), ctx.attr("axis")
    ctx.check(x.ndim == 4 and axis in (1, 3, -1), f"X must be 4-D with axis 1 or 3, got {x.shape}, axis {axis}")
    axis %= 4
    ctx.check(g > 0 and (x.shape[axis] < 0 or x.shape[axis] % g == 0),
              f"X's {x.shape[axis]} channels do not split into groups={g}")
    shape = list(x.shape)
    shape[axis] = shape[axis] // g if shape[axis] >= 0 else -1
    ctx.set_output("Out", shape, x.dtype, 0)


@op("maxout", inputs="X", outputs="Out", attrs={"groups": 1, "axis": 1}, infer_shape=_maxout_shape)
def maxout(ctx):
    """The maximum of each run of ``groups`` consecutive channels (along ``axis``)."""
    x = ctx.input("X")
    g, axis = int(ctx.attr("groups")), int(ctx.attr("axis")) % 4
    shape = x.shape[:axis] + (x.shape[axis] // g, g) + x.shape[axis + 1:]
    return {"Out": jnp.max(x.reshape(shape), axis=axis + 1)}
