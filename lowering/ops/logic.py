"""Comparisons, logical ops, ``where`` and ``isfinite_v2``: none of them has a gradient
(``where`` passes gradients to X and Y).

Comparisons take Paddle's ``axis`` attribute like ``elementwise_*`` do: Paddle 2.6 itself only
accepts ``axis=-1`` (NumPy broadcasting) for them; other values follow Paddle 1.x's rule, which
programs saved by Paddle 1.x may rely on. Logical ops broadcast like NumPy and read non-bool
inputs as ``x != 0``.
"""

from __future__ import annotations

import jax.numpy as jnp

from ...ir.registry import op
from ...ir.shape import InferShapeContext
from ._shapes import dims_equal, paddle_broadcast
from .math import align_y, broadcast_shape


def _compare_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", broadcast_shape(ctx), "bool", x.lod_level)


def _compare(name: str, fn, symbol: str):
    def rule(ctx):
        x, y = ctx.input("X"), ctx.input("Y")
        return {"Out": fn(x, align_y(x, y, ctx.attr("axis")))}

    rule.__name__ = name
    rule.__doc__ = f"Out = X {symbol} Y elementwise (bool), with Paddle's axis broadcasting."
    op(name, inputs="X Y", outputs="Out", attrs={"axis": -1, "force_cpu": False},
       infer_shape=_compare_shape, grad=None)(rule)


_compare("equal", jnp.equal, "==")
_compare("not_equal", jnp.not_equal, "!=")
_compare("less_than", jnp.less, "<")
_compare("less_equal", jnp.less_equal, "<=")
_compare("greater_than", jnp.greater, ">")
_compare("greater_equal", jnp.greater_equal, ">=")


def _as_bool(x):
    return x if x.dtype == jnp.bool_ else x != 0


def _logical_shape(ctx: InferShapeContext) -> None:
    x, y = ctx.input("X"), ctx.input("Y")
    out = paddle_broadcast(x.shape, y.shape, -1)
    ctx.check(out is not None, f"X {x.shape} and Y {y.shape} do not broadcast")
    ctx.set_output("Out", out, "bool", x.lod_level)


def _logical(name: str, fn, doc: str):
    def rule(ctx):
        return {"Out": fn(_as_bool(ctx.input("X")), _as_bool(ctx.input("Y")))}

    rule.__name__ = name
    rule.__doc__ = doc
    op(name, inputs="X Y", outputs="Out", infer_shape=_logical_shape, grad=None)(rule)


_logical("logical_and", jnp.logical_and, "X and Y elementwise (bool), NumPy broadcasting.")
_logical("logical_or", jnp.logical_or, "X or Y elementwise (bool), NumPy broadcasting.")
_logical("logical_xor", jnp.logical_xor, "X xor Y elementwise (bool), NumPy broadcasting.")


def _bool_like_x(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", x.shape, "bool", x.lod_level)


@op("logical_not", inputs="X", outputs="Out", infer_shape=_bool_like_x, grad=None)
def logical_not(ctx):
    """not X elementwise (bool)."""
    return {"Out": jnp.logical_not(_as_bool(ctx.input("X")))}


@op("isfinite_v2", inputs="X", outputs="Out", infer_shape=_bool_like_x, grad=None)
def isfinite_v2(ctx):
    """Whether each element of X is finite (not inf, not NaN), as bool."""
    x = ctx.input("X")
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return {"Out": jnp.ones(x.shape, jnp.bool_)}
    return {"Out": jnp.isfinite(x)}


def _where_shape(ctx: InferShapeContext) -> None:
    cond, x, y = ctx.input("Condition"), ctx.input("X"), ctx.input("Y")
    ctx.check(cond.ndim == x.ndim == y.ndim and all(
        dims_equal(a, b) and dims_equal(b, c) and dims_equal(a, c) for a, b, c in zip(cond.shape, x.shape, y.shape)),
        f"Condition {cond.shape}, X {x.shape} and Y {y.shape} must have one shape")
    ctx.check(x.dtype == y.dtype, f"X is {x.dtype} but Y is {y.dtype}; cast one of them first")
    ctx.check(cond.dtype == "bool", f"Condition must be bool, got {cond.dtype}")
    shape = tuple(next((d for d in dims if d >= 0), -1) for dims in zip(cond.shape, x.shape, y.shape))
    ctx.set_output("Out", shape, x.dtype, x.lod_level)


@op("where", inputs="Condition X Y", outputs="Out", infer_shape=_where_shape, no_grad_inputs=["Condition"])
def where(ctx):
    """X where Condition is true, else Y (all three of one shape); gradients flow to X and Y."""
    return {"Out": jnp.where(ctx.input("Condition"), ctx.input("X"), ctx.input("Y"))}
