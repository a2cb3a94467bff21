"""Elementwise arithmetic, scaling, means and activations."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...ir.registry import op
from ...ir.shape import InferShapeContext, same_as
from ._shapes import paddle_broadcast


def _align_y(x, y, axis: int):
    """Reshape ``y`` for Paddle's ``axis`` broadcasting against ``x``."""
    if axis == -1 or x.ndim == y.ndim:
        return y
    if axis < 0:
        axis += x.ndim
    shape = tuple(y.shape)
    while shape and axis + len(shape) > x.ndim and shape[-1] == 1:
        shape = shape[:-1]
    return y.reshape((1,) * axis + shape + (1,) * (x.ndim - axis - len(shape)))


def _elementwise_shape(ctx: InferShapeContext) -> None:
    x, y = ctx.input("X"), ctx.input("Y")
    out = paddle_broadcast(x.shape, y.shape, ctx.attr("axis"))
    ctx.check(out is not None, f"X {x.shape} and Y {y.shape} do not broadcast (axis={ctx.attr('axis')})")
    ctx.check(x.dtype == y.dtype, f"X is {x.dtype} but Y is {y.dtype}; cast one of them first")
    ctx.set_output("Out", out, x.dtype, x.lod_level)


def _elementwise(name: str, fn, doc: str):
    def rule(ctx):
        x, y = ctx.input("X"), ctx.input("Y")
        return {"Out": fn(x, _align_y(x, y, ctx.attr("axis")))}

    rule.__doc__ = doc
    rule.__name__ = name
    op(name, inputs="X Y", outputs="Out", attrs={"axis": -1}, infer_shape=_elementwise_shape)(rule)


_elementwise("elementwise_add", jnp.add, "Out = X + Y, with Paddle's axis broadcasting.")
_elementwise("elementwise_sub", jnp.subtract, "Out = X - Y, with Paddle's axis broadcasting.")
_elementwise("elementwise_mul", jnp.multiply, "Out = X * Y, with Paddle's axis broadcasting.")
_elementwise("elementwise_div", jnp.divide, "Out = X / Y, with Paddle's axis broadcasting.")


@op("scale", inputs="X ScaleTensor?", outputs="Out",
    attrs={"scale": 1.0, "bias": 0.0, "bias_after_scale": True}, infer_shape=same_as("X"),
    no_grad_inputs=["ScaleTensor"])
def scale(ctx):
    """Out = scale * X + bias (or scale * (X + bias) when ``bias_after_scale`` is False)."""
    x = ctx.input("X")
    s = ctx.input("ScaleTensor")
    s = jnp.asarray(s, x.dtype).reshape(()) if s is not None else jnp.asarray(ctx.attr("scale"), x.dtype)
    b = jnp.asarray(ctx.attr("bias"), x.dtype)
    return {"Out": x * s + b if ctx.attr("bias_after_scale") else (x + b) * s}


def _scalar_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", (), x.dtype, 0)


@op("mean", inputs="X", outputs="Out", infer_shape=_scalar_shape)
def mean(ctx):
    """The mean of all elements of X, as a 0-d tensor."""
    return {"Out": jnp.mean(ctx.input("X"))}


def _activation(name: str, fn, doc: str):
    def rule(ctx):
        return {"Out": fn(ctx.input("X"))}

    rule.__doc__ = doc
    rule.__name__ = name
    op(name, inputs="X", outputs="Out", infer_shape=same_as("X"))(rule)


_activation("relu", jax.nn.relu, "max(X, 0).")
_activation("sigmoid", jax.nn.sigmoid, "1 / (1 + exp(-X)).")
_activation("tanh", jnp.tanh, "tanh(X).")
_activation("square", jnp.square, "X * X.")
