"""Reductions: reduce_sum/mean/max/min/prod, reduce_any/all/amax/amin, logsumexp, and the running
reductions cumsum and cumprod.

Paddle 2.6 conventions, checked against it:

- ``dim`` empty, ``reduce_all`` set, or ``dim`` naming every axis reduces everything; without
  ``keep_dim`` the result is then 0-d (shape ``()``), with it all ones.
- ``reduce_sum`` of bool or int32 gives int64 unless ``out_dtype`` (a Paddle dtype number, -1 =
  unset) says otherwise; the other reductions ignore ``in_dtype``/``out_dtype``, as Paddle's
  kernels do. ``reduce_mean`` of integers divides with truncation, as C++ does.
- ``reduce_max``/``reduce_min`` send the gradient to every element equal to the result (Paddle's
  rule), where ``jnp.max`` would share it among ties.
- Of a LoD (or counted) value reduced over its rows only the real rows count: the padding rows
  of its static capacity are replaced by the reduction's identity, and ``reduce_mean`` divides by
  the real row count (Paddle's tensor has no padding rows; its result is this one). The gradients
  follow (these ops are LoD-aware; their gradients are the vjp of this rule).

The searches (arg_max/arg_min, top_k, argsort) live in ``search.py``.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

from ...ir import dtypes
from ...ir.registry import Attr, declare_counts, op
from ...ir.shape import InferShapeContext, same_as
from ..lod_value import LoDValue
from ..lower import lod_aware
from ._counts import count_of, counted, is_counted, real_rows
from ._errors import _fail
from ._shapes import prod


_REDUCE_ATTRS = {
    "dim": Attr("ints", [0]),
    "keep_dim": False,
    "reduce_all": False,
    "in_dtype": -1,
    "out_dtype": -1,
}


def _reduced_axes(ndim: int, dim, reduce_all: bool) -> tuple[int, ...] | None:
    """The sorted axes to reduce (None when ``dim`` is out of range)."""
    dim = list(dim or [])
    if reduce_all or not dim or ndim == 0:
        return tuple(range(ndim))
    axes = set()
    for d in dim:
        if not -ndim <= d < ndim:
            return None
        axes.add(d % ndim)
    return tuple(sorted(axes))


def _reduced_shape(shape, axes, keep_dim: bool) -> tuple[int, ...]:
    if keep_dim:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_out_dtype(op_type: str, x_dtype: str, out_dtype: int) -> str:
    if op_type != "reduce_sum":
        return x_dtype
    if out_dtype is not None and out_dtype >= 0:
        return dtypes.from_enum(out_dtype)
    return "int64" if x_dtype in ("bool", "int32") else x_dtype


def _reduce_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    axes = _reduced_axes(x.ndim, ctx.attr("dim"), ctx.attr("reduce_all"))
    ctx.check(axes is not None, f"dim={ctx.attr('dim')} is out of range for a rank-{x.ndim} input")
    out_dtype = _reduce_out_dtype(ctx.op.type, x.dtype, ctx.attr("out_dtype"))
    # Paddle keeps X's LoD when the batch axis survives (one result per row: the rows keep their
    # sequences, and a fetch returns the real rows only), and drops it when the rows are reduced.
    lod_level = x.lod_level if axes and 0 not in axes else 0
    ctx.set_output("Out", _reduced_shape(x.shape, axes, bool(ctx.attr("keep_dim"))), out_dtype, lod_level)


@partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3))
def _extreme(x, axes, keep_dim, largest):
    reducer = jnp.max if largest else jnp.min
    return reducer(x, axis=axes, keepdims=keep_dim)


def _extreme_fwd(x, axes, keep_dim, largest):
    out = _extreme(x, axes, keep_dim, largest)
    return out, (x, out)


def _extreme_bwd(axes, keep_dim, largest, res, g):
    x, out = res
    if not keep_dim:
        out, g = jnp.expand_dims(out, axes), jnp.expand_dims(g, axes)
    return (jnp.where(x == out, g, jnp.zeros((), g.dtype)),)


_extreme.defvjp(_extreme_fwd, _extreme_bwd)


def _mean(x, axes, keep_dim):
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.mean(x, axis=axes, keepdims=keep_dim)
    count = 1
    for a in axes:
        count *= x.shape[a]
    total = jnp.sum(x, axis=axes, keepdims=keep_dim, dtype=x.dtype)
    return lax.div(total, jnp.asarray(count, x.dtype))


_REDUCERS = {
    "reduce_sum": lambda x, axes, keep: jnp.sum(x, axis=axes, keepdims=keep, dtype=x.dtype),
    "reduce_mean": _mean,
    "reduce_max": lambda x, axes, keep: _extreme(x, axes, keep, True),
    "reduce_min": lambda x, axes, keep: _extreme(x, axes, keep, False),
    "reduce_prod": lambda x, axes, keep: jnp.prod(x, axis=axes, keepdims=keep, dtype=x.dtype),
}


def _reduce(ctx, op_type: str):
    """The JAX rule of ``op_type``, one of :data:`_REDUCERS`."""
    reducer = _REDUCERS[op_type]
    x = ctx.input("X")
    lod = None
    if x.__class__ is LoDValue:
        lod, x = x, x.data
    axes = _reduced_axes(x.ndim, ctx.attr("dim"), ctx.attr("reduce_all"))
    if axes is None:
        raise ValueError(f"dim={ctx.attr('dim')} is out of range for a rank-{x.ndim} input")
    out_dtype = dtypes.to_numpy(_reduce_out_dtype(op_type, dtypes.normalize(x.dtype), ctx.attr("out_dtype")))
    if x.dtype != out_dtype:
        x = x.astype(out_dtype)
    keep = bool(ctx.attr("keep_dim"))
    if lod is not None and 0 in axes:        # over the rows of a LoD value: the real rows only
        real = lod.row_mask().reshape((-1,) + (1,) * (x.ndim - 1))
        x = jnp.where(real, x, _identity(op_type, x.dtype))
        if op_type == "reduce_mean":
            count = lod.row_count().astype(x.dtype)
            for a in axes:
                if a != 0:
                    count = count * x.shape[a]
            total = jnp.sum(x, axis=axes, keepdims=keep, dtype=x.dtype)
            return {"Out": total / count if jnp.issubdtype(x.dtype, jnp.inexact) else lax.div(total, count)}
    out = reducer(x, axes, keep)
    if lod is not None and 0 not in axes and out.ndim >= 1:
        # not over the rows: every row stays a row of X's sequences (Paddle's reduce ops share X's
        # LoD when they keep the first dim), and padding rows stay padding, never real results
        return {"Out": LoDValue(out, lod.offsets)}
    return {"Out": out}


def _identity(op_type: str, dtype):
    """The value a padding row takes so that it changes no result of ``op_type``."""
    if op_type in ("reduce_max", "reduce_min"):
        info = jnp.finfo(dtype) if jnp.issubdtype(dtype, jnp.inexact) else jnp.iinfo(dtype)
        if jnp.issubdtype(dtype, jnp.inexact):
            return jnp.asarray(-jnp.inf if op_type == "reduce_max" else jnp.inf, dtype)
        return jnp.asarray(info.min if op_type == "reduce_max" else info.max, dtype)
    return jnp.asarray(1 if op_type == "reduce_prod" else 0, dtype)


@op("reduce_sum", inputs="X", outputs="Out", attrs=_REDUCE_ATTRS, infer_shape=_reduce_shape)
def reduce_sum(ctx):
    """Sum of X over ``dim`` (everything when ``reduce_all`` or ``dim`` is empty)."""
    return _reduce(ctx, "reduce_sum")


@op("reduce_mean", inputs="X", outputs="Out", attrs=_REDUCE_ATTRS, infer_shape=_reduce_shape)
def reduce_mean(ctx):
    """Mean of X over ``dim`` (everything when ``reduce_all`` or ``dim`` is empty)."""
    return _reduce(ctx, "reduce_mean")


@op("reduce_max", inputs="X", outputs="Out", attrs=_REDUCE_ATTRS, infer_shape=_reduce_shape)
def reduce_max(ctx):
    """Maximum of X over ``dim``; the gradient goes to every maximal element."""
    return _reduce(ctx, "reduce_max")


@op("reduce_min", inputs="X", outputs="Out", attrs=_REDUCE_ATTRS, infer_shape=_reduce_shape)
def reduce_min(ctx):
    """Minimum of X over ``dim``; the gradient goes to every minimal element."""
    return _reduce(ctx, "reduce_min")


@op("reduce_prod", inputs="X", outputs="Out", attrs=_REDUCE_ATTRS, infer_shape=_reduce_shape)
def reduce_prod(ctx):
    """Product of X over ``dim`` (everything when ``reduce_all`` or ``dim`` is empty)."""
    return _reduce(ctx, "reduce_prod")


lod_aware(*_REDUCERS)


# -- reduce_any / reduce_all / reduce_amax / reduce_amin, logsumexp ------------------------------------
def _axes(ndim: int, axis, reduce_all: bool) -> tuple[int, ...]:
    """Paddle's recompute_reduce_all: no axis, every axis, or ``reduce_all`` reduce everything."""
    axis = [int(a) for a in (axis or [])]
    if reduce_all or not axis or len(axis) == ndim:
        return tuple(range(ndim))
    return tuple(sorted({a % ndim for a in axis}))


def _reduce2_shape(ctx: InferShapeContext, dtype=None) -> None:
    x = ctx.input("X")
    dim = ctx.attr("dim") or []
    ctx.check(all(-max(x.ndim, 1) <= d < max(x.ndim, 1) for d in dim), f"dim {list(dim)} is out of range for "
                                                                       f"a rank-{x.ndim} input")
    axes = _axes(x.ndim, dim, ctx.attr("reduce_all"))
    keep = ctx.attr("keep_dim")
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keep else \
        tuple(d for i, d in enumerate(x.shape) if i not in axes)
    ctx.set_output("Out", shape, dtype or x.dtype, 0)


_REDUCE2_ATTRS = {"dim": Attr("longs", [0]), "keep_dim": False, "reduce_all": False, "in_dtype": -1, "out_dtype": -1}


def _reduce2(ctx, fn):
    """Out = fn(X, axes, keep_dim), the axes by Paddle's recompute_reduce_all (:func:`_axes`)."""
    x = ctx.input("X")
    if ctx.input("AxisTensor") is not None or ctx.inputs("AxisTensorList"):
        _fail(ctx, "the axis given as a tensor is not supported; use the dim attribute")
    axes = _axes(x.ndim, ctx.attr("dim"), ctx.attr("reduce_all"))
    return {"Out": fn(x, axes, bool(ctx.attr("keep_dim")))}


@op("reduce_any", inputs="X AxisTensor? AxisTensorList*?", outputs="Out", attrs=_REDUCE2_ATTRS,
    infer_shape=lambda ctx: _reduce2_shape(ctx, "bool"), no_grad_inputs=["AxisTensor", "AxisTensorList"], grad=None)
def reduce_any(ctx):
    """Whether any element of X over ``dim`` is true (non-zero)."""
    return _reduce2(ctx, lambda x, a, k: jnp.any(x != 0, axis=a, keepdims=k))


@op("reduce_all", inputs="X AxisTensor? AxisTensorList*?", outputs="Out", attrs=_REDUCE2_ATTRS,
    infer_shape=lambda ctx: _reduce2_shape(ctx, "bool"), no_grad_inputs=["AxisTensor", "AxisTensorList"], grad=None)
def reduce_all(ctx):
    """Whether every element of X over ``dim`` is true (non-zero)."""
    return _reduce2(ctx, lambda x, a, k: jnp.all(x != 0, axis=a, keepdims=k))


@op("reduce_amax", inputs="X AxisTensor? AxisTensorList*?", outputs="Out", attrs=_REDUCE2_ATTRS,
    infer_shape=_reduce2_shape, no_grad_inputs=["AxisTensor", "AxisTensorList"])
def reduce_amax(ctx):
    """The largest element of X over ``dim``; the gradient is shared evenly among equal maxima."""
    return _reduce2(ctx, lambda x, a, k: jnp.max(x, axis=a, keepdims=k))


@op("reduce_amin", inputs="X AxisTensor? AxisTensorList*?", outputs="Out", attrs=_REDUCE2_ATTRS,
    infer_shape=_reduce2_shape, no_grad_inputs=["AxisTensor", "AxisTensorList"])
def reduce_amin(ctx):
    """The smallest element of X over ``dim``; the gradient is shared evenly among equal minima."""
    return _reduce2(ctx, lambda x, a, k: jnp.min(x, axis=a, keepdims=k))


def _logsumexp_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    axis = ctx.attr("axis") or []
    ctx.check(all(-max(x.ndim, 1) <= a < max(x.ndim, 1) for a in axis),
              f"axis {list(axis)} is out of range for a rank-{x.ndim} input")
    axes = _axes(x.ndim, axis, ctx.attr("reduce_all"))
    keep = ctx.attr("keepdim")
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keep else \
        tuple(d for i, d in enumerate(x.shape) if i not in axes)
    ctx.set_output("Out", shape, x.dtype, 0)


@op("logsumexp", inputs="X", outputs="Out", attrs={"axis": Attr("ints", [0]), "keepdim": False, "reduce_all": False},
    infer_shape=_logsumexp_shape)
def logsumexp(ctx):
    """log(sum(exp(X))) over ``axis`` (all axes when ``reduce_all`` or when axis lists every axis or
    none), computed stably; ``keepdim`` keeps the reduced axes as 1s."""
    x = ctx.input("X")
    axes = _axes(x.ndim, ctx.attr("axis"), ctx.attr("reduce_all"))
    return {"Out": jax.scipy.special.logsumexp(x, axis=axes, keepdims=bool(ctx.attr("keepdim")))}


# -- cumsum, cumprod -----------------------------------------------------------------------------------
def _cumsum_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    if ctx.attr("flatten"):
        ctx.set_output("Out", (prod(x.shape),), x.dtype, 0)
        return
    axis = ctx.attr("axis")
    ctx.check(x.ndim == 0 and axis in (0, -1) or -x.ndim <= axis < x.ndim,
              f"axis={axis} is out of range for a rank-{x.ndim} input")
    ctx.set_output("Out", x.shape, x.dtype)


@op("cumsum", inputs="X", outputs="Out",
    attrs={"axis": -1, "flatten": False, "exclusive": False, "reverse": False}, infer_shape=_cumsum_shape)
def cumsum(ctx):
    """Running sums of X along ``axis`` (of flattened X with ``flatten``).

    ``exclusive`` leaves the current element out (the first sum is 0); ``reverse`` runs from the end.
    """
    x = ctx.input("X")
    count = None
    if is_counted(x):              # the padding rows add nothing (they come after the real rows)
        count, x = count_of(x), jnp.where(real_rows(x), x.data, jnp.zeros((), x.dtype))
        count = count * (prod(x.shape[1:]) if ctx.attr("flatten") else 1)
    if ctx.attr("flatten"):
        x, axis = x.reshape(-1), 0
    elif x.ndim == 0:
        return {"Out": x}
    else:
        axis = ctx.attr("axis") % x.ndim
    reverse = bool(ctx.attr("reverse"))
    if reverse:
        x = jnp.flip(x, axis)
    out = jnp.cumsum(x, axis=axis, dtype=x.dtype)
    if ctx.attr("exclusive"):
        zeros = jnp.zeros_like(lax.slice_in_dim(out, 0, 1, axis=axis))
        out = jnp.concatenate([zeros, lax.slice_in_dim(out, 0, out.shape[axis] - 1, axis=axis)], axis=axis)
    if reverse:
        out = jnp.flip(out, axis)
    return {"Out": out if count is None else counted(out, count)}


def _cumsum_counts(op, values) -> dict:
    """cumsum honours a count along the rows (or flattened); along another axis it is row-wise."""
    xs = values.get("X") or [None]
    rank = len(getattr(xs[0], "shape", ()))
    if not rank:
        return {}
    along_rows = op.attrs.get("flatten") or int(op.attrs.get("axis", -1)) % rank == 0
    return {"X": "count" if along_rows else "rows"}


declare_counts("cumsum", _cumsum_counts)


@op("cumprod", inputs="X", outputs="Out", attrs={"dim": -1}, infer_shape=same_as("X"))
def cumprod(ctx):
    """Cumulative product of X along ``dim``."""
    x = ctx.input("X")
    if x.ndim == 0:
        return {"Out": x}
    return {"Out": jnp.cumprod(x, axis=int(ctx.attr("dim")) % x.ndim)}
