"""Elementwise arithmetic of two tensors with Paddle's ``axis`` broadcasting (``elementwise_*``),
``elementwise_heaviside`` and ``atan2`` (NumPy broadcasting), ``scale``, ``sum`` and ``mean``.

Elementwise math of one tensor (exp, log, abs, pow, clip, …) lives in ``unary_math.py``, the
activations in ``activation.py``; comparisons and bitwise ops (``logic.py``) reuse
:func:`align_y`, :func:`broadcast_shape` and the NumPy-broadcasting shape rule from here.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ...ir.program import EMPTY_VAR_NAME
from ...ir.registry import op
from ...ir.shape import InferShapeContext, same_as
from ..lod_value import LoDValue
from ._shapes import dims_equal, paddle_broadcast


def align_y(x, y, axis: int):
    """Reshape ``y`` for Paddle's ``axis`` broadcasting against ``x``.

    With ``axis == -1`` (or equal ranks) NumPy's trailing alignment applies as is. Otherwise
    ``y``'s dims line up with ``x``'s starting at ``axis`` (trailing 1s of ``y`` that would run
    past ``x``'s rank are dropped first, as Paddle does), e.g. x (2, 3, 4), y (3,), axis=1 → y
    is viewed as (1, 3, 1).
    """
    if axis == -1 or x.ndim == y.ndim:
        return y
    if axis < 0:
        axis += x.ndim
    shape = tuple(y.shape)
    while shape and axis + len(shape) > x.ndim and shape[-1] == 1:
        shape = shape[:-1]
    return y.reshape((1,) * axis + shape + (1,) * (x.ndim - axis - len(shape)))


def broadcast_shape(ctx: InferShapeContext) -> tuple[int, ...]:
    """Check X and Y of a binary op (shapes broadcast with ``axis``, same dtype); their result shape."""
    x, y = ctx.input("X"), ctx.input("Y")
    axis = ctx.attr("axis")
    axis = -1 if axis is None else axis
    out = paddle_broadcast(x.shape, y.shape, axis)
    ctx.check(out is not None, f"X {x.shape} and Y {y.shape} do not broadcast (axis={axis})")
    ctx.check(x.dtype == y.dtype, f"X is {x.dtype} but Y is {y.dtype}; cast one of them first")
    return out


def elementwise_shape(ctx: InferShapeContext) -> None:
    """Shape rule of ``elementwise_*``: the broadcast shape, X's dtype and LoD."""
    x = ctx.input("X")
    ctx.set_output("Out", broadcast_shape(ctx), x.dtype, x.lod_level)


def _elementwise(ctx, fn):
    """Out = fn(X, Y), Y aligned to X by Paddle's ``axis`` rule."""
    x, y = ctx.input("X"), ctx.input("Y")
    return {"Out": fn(x, align_y(x, y, ctx.attr("axis")))}


def _maximum(x, y):
    # Paddle's max picks X only where X > Y (ties and NaN in X go to Y), and its gradient follows
    # that choice: dX = dOut * (X > Y), dY = dOut * (X <= Y). jnp.maximum would split ties.
    return jnp.where(x > y, x, y)


def _minimum(x, y):
    return jnp.where(x < y, x, y)


def _floordiv(x, y):
    if jnp.issubdtype(x.dtype, jnp.integer):
        return jnp.floor_divide(x, y)
    return jnp.floor(x / y)


@op("elementwise_add", inputs="X Y", outputs="Out", attrs={"axis": -1}, infer_shape=elementwise_shape)
def elementwise_add(ctx):
    """Out = X + Y, with Paddle's axis broadcasting."""
    return _elementwise(ctx, jnp.add)


@op("elementwise_sub", inputs="X Y", outputs="Out", attrs={"axis": -1}, infer_shape=elementwise_shape)
def elementwise_sub(ctx):
    """Out = X - Y, with Paddle's axis broadcasting."""
    return _elementwise(ctx, jnp.subtract)


@op("elementwise_mul", inputs="X Y", outputs="Out", attrs={"axis": -1}, infer_shape=elementwise_shape)
def elementwise_mul(ctx):
    """Out = X * Y, with Paddle's axis broadcasting."""
    return _elementwise(ctx, jnp.multiply)


@op("elementwise_div", inputs="X Y", outputs="Out", attrs={"axis": -1}, infer_shape=elementwise_shape)
def elementwise_div(ctx):
    """Out = X / Y, with Paddle's axis broadcasting."""
    return _elementwise(ctx, jnp.divide)


@op("elementwise_max", inputs="X Y", outputs="Out", attrs={"axis": -1}, infer_shape=elementwise_shape)
def elementwise_max(ctx):
    """Out = max(X, Y) (X where X > Y, else Y); the gradient goes to Y on ties, as in Paddle."""
    return _elementwise(ctx, _maximum)


@op("elementwise_min", inputs="X Y", outputs="Out", attrs={"axis": -1}, infer_shape=elementwise_shape)
def elementwise_min(ctx):
    """Out = min(X, Y) (X where X < Y, else Y); the gradient goes to Y on ties, as in Paddle."""
    return _elementwise(ctx, _minimum)


@op("elementwise_pow", inputs="X Y", outputs="Out", attrs={"axis": -1}, infer_shape=elementwise_shape)
def elementwise_pow(ctx):
    """Out = X ** Y, with Paddle's axis broadcasting."""
    return _elementwise(ctx, jnp.power)


# Paddle 2.6 defines no gradient for mod and floordiv: backward stops there, here too.
@op("elementwise_mod", inputs="X Y", outputs="Out", attrs={"axis": -1}, infer_shape=elementwise_shape, grad=None)
def elementwise_mod(ctx):
    """Out = X mod Y with the sign of Y (Python's %), integer or float. No gradient."""
    return _elementwise(ctx, jnp.mod)


@op("elementwise_floordiv", inputs="X Y", outputs="Out", attrs={"axis": -1}, infer_shape=elementwise_shape,
    grad=None)
def elementwise_floordiv(ctx):
    """Out = floor(X / Y) (Python's //). No gradient."""
    return _elementwise(ctx, _floordiv)


# -- NumPy broadcasting: heaviside, atan2 ----------------------------------------------------------
def _numpy_broadcast_shape(ctx: InferShapeContext, same_dtype: bool = True):
    x, y = ctx.input("X"), ctx.input("Y")
    out = paddle_broadcast(x.shape, y.shape, -1)
    ctx.check(out is not None, f"X {x.shape} and Y {y.shape} do not broadcast")
    if same_dtype:
        ctx.check(x.dtype == y.dtype, f"X is {x.dtype} but Y is {y.dtype}; cast one of them first")
    return out


def _binary_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", _numpy_broadcast_shape(ctx), x.dtype, x.lod_level)


@op("elementwise_heaviside", inputs="X Y", outputs="Out", infer_shape=_binary_shape)
def elementwise_heaviside(ctx):
    """Heaviside step of X: 0 where X < 0, 1 where X > 0 and Y where X == 0 (NumPy broadcasting).

    The gradient is 0 for X and Out@GRAD where X == 0 for Y, as in Paddle."""
    x, y = ctx.input("X"), ctx.input("Y")
    return {"Out": jnp.where(x == 0, y, (x > 0).astype(x.dtype))}


def _atan2_shape(ctx: InferShapeContext) -> None:
    x1, x2 = ctx.input("X1"), ctx.input("X2")
    out = paddle_broadcast(x1.shape, x2.shape, -1)
    ctx.check(out is not None, f"X1 {x1.shape} and X2 {x2.shape} do not broadcast")
    ctx.check(x1.dtype == x2.dtype, f"X1 is {x1.dtype} but X2 is {x2.dtype}")
    dtype = x1.dtype if x1.dtype in ("float16", "bfloat16", "float32", "float64") else "float64"
    ctx.set_output("Out", out, dtype, 0)


@op("atan2", inputs="X1 X2", outputs="Out", infer_shape=_atan2_shape)
def atan2(ctx):
    """The angle of the point (X2, X1): arctan(X1 / X2) in the right quadrant (integers give float64)."""
    x1, x2 = ctx.input("X1"), ctx.input("X2")
    if not jnp.issubdtype(x1.dtype, jnp.floating):
        x1, x2 = x1.astype(jnp.float64), x2.astype(jnp.float64)
    return {"Out": jnp.arctan2(x1, x2)}


# -- scale, sum, mean ------------------------------------------------------------------------------
def scale_grad_ops(out_grad: list[str], x_grad: list[str], factor: float, scale_tensor=None) -> list[tuple]:
    """``scale`` ops writing ``factor * out_grad`` into ``x_grad`` (Paddle builds these gradients
    from forward ops: it has no ``scale_grad``, ``sum_grad`` or ``sign_grad``)."""
    inputs = {"X": out_grad}
    if scale_tensor:
        inputs["ScaleTensor"] = scale_tensor
    return [("scale", inputs, {"Out": x_grad}, {"scale": float(factor), "bias": 0.0, "bias_after_scale": True})]


def _scale_grad_maker(op, out_grads, in_grads):
    # d(s * x + b)/dx = d((x + b) * s)/dx = s.
    return scale_grad_ops(out_grads["Out"], in_grads["X"], op.attrs.get("scale", 1.0), op.inputs.get("ScaleTensor"))


@op("scale", inputs="X ScaleTensor?", outputs="Out",
    attrs={"scale": 1.0, "bias": 0.0, "bias_after_scale": True}, infer_shape=same_as("X"),
    no_grad_inputs=["ScaleTensor"], grad_maker=_scale_grad_maker)
def scale(ctx):
    """Out = scale * X + bias (or scale * (X + bias) when ``bias_after_scale`` is False)."""
    x = ctx.input("X")
    s = ctx.input("ScaleTensor")
    s = jnp.asarray(s, x.dtype).reshape(()) if s is not None else jnp.asarray(ctx.attr("scale"), x.dtype)
    b = jnp.asarray(ctx.attr("bias"), x.dtype)
    return {"Out": x * s + b if ctx.attr("bias_after_scale") else (x + b) * s}


def _sum_shape(ctx: InferShapeContext) -> None:
    xs = ctx.inputs("X")
    ctx.check(len(xs) > 0, "sum needs at least one input")
    first = xs[0]
    shape = list(first.shape)
    for x in xs[1:]:
        ctx.check(x.ndim == first.ndim, f"inputs have ranks {[v.ndim for v in xs]}; sum needs equal shapes")
        ctx.check(x.dtype == first.dtype, f"inputs have dtypes {[v.dtype for v in xs]}; sum needs one dtype")
        for i, d in enumerate(x.shape):
            ctx.check(dims_equal(shape[i], d), f"inputs have shapes {[v.shape for v in xs]}; sum needs equal shapes")
            shape[i] = d if shape[i] < 0 else shape[i]
    ctx.set_output("Out", shape, first.dtype, first.lod_level)


def _sum_grad_maker(op, out_grads, in_grads):
    # Each input's gradient is Out@GRAD itself: one `scale` by 1 per input, as Paddle does.
    return [spec for name in in_grads["X"] if name != EMPTY_VAR_NAME
            for spec in scale_grad_ops(out_grads["Out"], [name], 1.0)]


@op("sum", inputs="X*", outputs="Out", attrs={"use_mkldnn": False, "mkldnn_data_type": "float32"},
    infer_shape=_sum_shape, grad_maker=_sum_grad_maker)
def sum_(ctx):
    """Out = X[0] + X[1] + … (Paddle's ``sum``/``add_n``; also adds up gradient contributions)."""
    xs = ctx.inputs("X")
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return {"Out": out}


def _scalar_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", (), x.dtype, 0)


@op("mean", inputs="X", outputs="Out", infer_shape=_scalar_shape)
def mean(ctx):
    """The mean of all elements of X, as a 0-d tensor (of a LoD input: of its real rows only)."""
    x = ctx.input("X")
    if x.__class__ is LoDValue:
        mask = x.row_mask().reshape((-1,) + (1,) * (x.data.ndim - 1))
        total = jnp.sum(jnp.where(mask, x.data, jnp.zeros((), x.data.dtype)))
        per_row = max(1, int(np.prod(x.data.shape[1:])))
        return {"Out": total / (x.row_count() * per_row).astype(x.data.dtype)}
    return {"Out": jnp.mean(x)}
