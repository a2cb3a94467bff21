"""Comparisons, logical and bitwise ops, tests (isfinite_v2, isnan_v2, isinf_v2, isclose) and
``where``: none of them has a gradient (``where`` passes gradients to X and Y).

Comparisons take Paddle's ``axis`` attribute like ``elementwise_*`` do: Paddle 2.6 itself only
accepts ``axis=-1`` (NumPy broadcasting) for them; other values follow Paddle 1.x's rule, which
programs saved by Paddle 1.x may rely on. Logical ops broadcast like NumPy and read non-bool
inputs as ``x != 0``; bitwise ops take integers (or bools) and broadcast like NumPy.
"""

from __future__ import annotations

import jax.numpy as jnp

from ...ir.registry import op
from ...ir.shape import InferShapeContext, same_as
from ._errors import _fail
from ._shapes import dims_equal, paddle_broadcast
from .math import _binary_shape, align_y, broadcast_shape


# -- comparisons -----------------------------------------------------------------------------------
def _compare_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", broadcast_shape(ctx), "bool", x.lod_level)


_COMPARE_ATTRS = {"axis": -1, "force_cpu": False}


def _compare(ctx, fn):
    """Out = fn(X, Y) (bool), Y aligned to X by Paddle's ``axis`` rule."""
    x, y = ctx.input("X"), ctx.input("Y")
    return {"Out": fn(x, align_y(x, y, ctx.attr("axis")))}


@op("equal", inputs="X Y", outputs="Out", attrs=_COMPARE_ATTRS, infer_shape=_compare_shape, grad=None)
def equal(ctx):
    """Out = X == Y elementwise (bool), with Paddle's axis broadcasting."""
    return _compare(ctx, jnp.equal)


@op("not_equal", inputs="X Y", outputs="Out", attrs=_COMPARE_ATTRS, infer_shape=_compare_shape, grad=None)
def not_equal(ctx):
    """Out = X != Y elementwise (bool), with Paddle's axis broadcasting."""
    return _compare(ctx, jnp.not_equal)


@op("less_than", inputs="X Y", outputs="Out", attrs=_COMPARE_ATTRS, infer_shape=_compare_shape, grad=None)
def less_than(ctx):
    """Out = X < Y elementwise (bool), with Paddle's axis broadcasting."""
    return _compare(ctx, jnp.less)


@op("less_equal", inputs="X Y", outputs="Out", attrs=_COMPARE_ATTRS, infer_shape=_compare_shape, grad=None)
def less_equal(ctx):
    """Out = X <= Y elementwise (bool), with Paddle's axis broadcasting."""
    return _compare(ctx, jnp.less_equal)


@op("greater_than", inputs="X Y", outputs="Out", attrs=_COMPARE_ATTRS, infer_shape=_compare_shape, grad=None)
def greater_than(ctx):
    """Out = X > Y elementwise (bool), with Paddle's axis broadcasting."""
    return _compare(ctx, jnp.greater)


@op("greater_equal", inputs="X Y", outputs="Out", attrs=_COMPARE_ATTRS, infer_shape=_compare_shape, grad=None)
def greater_equal(ctx):
    """Out = X >= Y elementwise (bool), with Paddle's axis broadcasting."""
    return _compare(ctx, jnp.greater_equal)


# -- logical ops -----------------------------------------------------------------------------------
def _as_bool(x):
    return x if x.dtype == jnp.bool_ else x != 0


def _logical_shape(ctx: InferShapeContext) -> None:
    x, y = ctx.input("X"), ctx.input("Y")
    out = paddle_broadcast(x.shape, y.shape, -1)
    ctx.check(out is not None, f"X {x.shape} and Y {y.shape} do not broadcast")
    ctx.set_output("Out", out, "bool", x.lod_level)


def _logical(ctx, fn):
    """Out = fn(X, Y) on X and Y read as bools."""
    return {"Out": fn(_as_bool(ctx.input("X")), _as_bool(ctx.input("Y")))}


@op("logical_and", inputs="X Y", outputs="Out", infer_shape=_logical_shape, grad=None)
def logical_and(ctx):
    """X and Y elementwise (bool), NumPy broadcasting."""
    return _logical(ctx, jnp.logical_and)


@op("logical_or", inputs="X Y", outputs="Out", infer_shape=_logical_shape, grad=None)
def logical_or(ctx):
    """X or Y elementwise (bool), NumPy broadcasting."""
    return _logical(ctx, jnp.logical_or)


@op("logical_xor", inputs="X Y", outputs="Out", infer_shape=_logical_shape, grad=None)
def logical_xor(ctx):
    """X xor Y elementwise (bool), NumPy broadcasting."""
    return _logical(ctx, jnp.logical_xor)


def _bool_like_x(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", x.shape, "bool", x.lod_level)


@op("logical_not", inputs="X", outputs="Out", infer_shape=_bool_like_x, grad=None)
def logical_not(ctx):
    """not X elementwise (bool)."""
    return {"Out": jnp.logical_not(_as_bool(ctx.input("X")))}


# -- bitwise ops -----------------------------------------------------------------------------------
def _bitwise(ctx, fn):
    """Out = fn(X, Y) for integer or bool X and Y."""
    x, y = ctx.input("X"), ctx.input("Y")
    if x.dtype != jnp.bool_ and not jnp.issubdtype(x.dtype, jnp.integer):
        _fail(ctx, f"needs integer or bool inputs, got {x.dtype}")
    return {"Out": fn(x, y)}


@op("bitwise_and", inputs="X Y", outputs="Out", infer_shape=_binary_shape, grad=None)
def bitwise_and(ctx):
    """X & Y bit by bit (integers; logical and for bool), NumPy broadcasting."""
    return _bitwise(ctx, jnp.bitwise_and)


@op("bitwise_or", inputs="X Y", outputs="Out", infer_shape=_binary_shape, grad=None)
def bitwise_or(ctx):
    """X | Y bit by bit (integers; logical or for bool), NumPy broadcasting."""
    return _bitwise(ctx, jnp.bitwise_or)


@op("bitwise_xor", inputs="X Y", outputs="Out", infer_shape=_binary_shape, grad=None)
def bitwise_xor(ctx):
    """X ^ Y bit by bit (integers; logical xor for bool), NumPy broadcasting."""
    return _bitwise(ctx, jnp.bitwise_xor)


@op("bitwise_not", inputs="X", outputs="Out", infer_shape=same_as("X"), grad=None)
def bitwise_not(ctx):
    """~X bit by bit (integers; logical not for bool)."""
    return {"Out": jnp.invert(ctx.input("X"))}


# -- tests -----------------------------------------------------------------------------------------
@op("isfinite_v2", inputs="X", outputs="Out", infer_shape=_bool_like_x, grad=None)
def isfinite_v2(ctx):
    """Whether each element of X is finite (not inf, not NaN), as bool."""
    x = ctx.input("X")
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return {"Out": jnp.ones(x.shape, jnp.bool_)}
    return {"Out": jnp.isfinite(x)}


@op("isnan_v2", inputs="X", outputs="Out", infer_shape=_bool_like_x, grad=None)
def isnan_v2(ctx):
    """Whether each element of X is NaN (bool; never for integers)."""
    x = ctx.input("X")
    return {"Out": jnp.isnan(x) if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.zeros(x.shape, jnp.bool_)}


@op("isinf_v2", inputs="X", outputs="Out", infer_shape=_bool_like_x, grad=None)
def isinf_v2(ctx):
    """Whether each element of X is +inf or -inf (bool; never for integers)."""
    x = ctx.input("X")
    return {"Out": jnp.isinf(x) if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.zeros(x.shape, jnp.bool_)}


def _isclose_shape(ctx: InferShapeContext) -> None:
    a, b = ctx.input("Input"), ctx.input("Other")
    out = paddle_broadcast(a.shape, b.shape, -1)
    ctx.check(out is not None, f"Input {a.shape} and Other {b.shape} do not broadcast")
    ctx.set_output("Out", out, "bool", 0)


@op("isclose", inputs="Input Other Rtol? Atol?", outputs="Out",
    attrs={"rtol": "1e-05", "atol": "1e-08", "equal_nan": False}, infer_shape=_isclose_shape, grad=None)
def isclose(ctx):
    """|Input - Other| <= atol + rtol · |Other| elementwise (bool); NaNs equal when ``equal_nan``.
    The tolerances are strings (Paddle keeps their full precision) or one-element tensors."""
    a, b = ctx.input("Input"), ctx.input("Other")
    tol = {}
    for slot, attr in (("Rtol", "rtol"), ("Atol", "atol")):
        t = ctx.input(slot)
        tol[attr] = t.reshape(()).astype(a.dtype) if t is not None else jnp.asarray(float(ctx.attr(attr)), a.dtype)
    # Paddle's kernel: NaNs are close only to NaNs (and only with equal_nan); otherwise equal, or
    # within atol + rtol·|Other|, or within 1e-15 of that bound.
    left = jnp.abs(a - b)
    right = tol["atol"] + tol["rtol"] * jnp.abs(b)
    close = (a == b) | (left <= right) | (jnp.abs(left - right) <= 1e-15)
    nan_a, nan_b = jnp.isnan(a), jnp.isnan(b)
    both_nan = bool(ctx.attr("equal_nan")) & nan_a & nan_b
    return {"Out": jnp.where(nan_a | nan_b, both_nan, close)}


# -- where -----------------------------------------------------------------------------------------
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
