"""Reductions and searches: reduce_sum/mean/max/min/prod, arg_max/arg_min, top_k, cumsum.

Paddle 2.6 conventions, checked against it:

- ``dim`` empty, ``reduce_all`` set, or ``dim`` naming every axis reduces everything; without
  ``keep_dim`` the result is then 0-d (shape ``()``), with it all ones.
- ``reduce_sum`` of bool or int32 gives int64 unless ``out_dtype`` (a Paddle dtype number, -1 =
  unset) says otherwise; the other reductions ignore ``in_dtype``/``out_dtype``, as Paddle's
  kernels do. ``reduce_mean`` of integers divides with truncation, as C++ does.
- ``reduce_max``/``reduce_min`` send the gradient to every element equal to the result (Paddle's
  rule), where ``jnp.max`` would share it among ties.
- ``arg_max``/``arg_min`` return the first index of the extreme value, int64 (int32 when
  ``dtype`` is 2); with ``flatten`` the result is 0-d (all ones with ``keepdims``).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

from ...ir import dtypes
from ...ir.errors import OpRuntimeError
from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext
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
    # Paddle keeps X's LoD only when the batch axis survives; we simply drop it.
    ctx.set_output("Out", _reduced_shape(x.shape, axes, bool(ctx.attr("keep_dim"))), out_dtype, 0)


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

_REDUCE_DOCS = {
    "reduce_sum": "Sum of X over ``dim`` (everything when ``reduce_all`` or ``dim`` is empty).",
    "reduce_mean": "Mean of X over ``dim`` (everything when ``reduce_all`` or ``dim`` is empty).",
    "reduce_max": "Maximum of X over ``dim``; the gradient goes to every maximal element.",
    "reduce_min": "Minimum of X over ``dim``; the gradient goes to every minimal element.",
    "reduce_prod": "Product of X over ``dim`` (everything when ``reduce_all`` or ``dim`` is empty).",
}


def _reduce(op_type: str):
    reducer = _REDUCERS[op_type]

    def rule(ctx):
        x = ctx.input("X")
        axes = _reduced_axes(x.ndim, ctx.attr("dim"), ctx.attr("reduce_all"))
        if axes is None:
            raise ValueError(f"dim={ctx.attr('dim')} is out of range for a rank-{x.ndim} input")
        out_dtype = dtypes.to_numpy(_reduce_out_dtype(op_type, dtypes.normalize(x.dtype), ctx.attr("out_dtype")))
        if x.dtype != out_dtype:
            x = x.astype(out_dtype)
        return {"Out": reducer(x, axes, bool(ctx.attr("keep_dim")))}

    rule.__name__ = op_type
    rule.__doc__ = _REDUCE_DOCS[op_type]
    op(op_type, inputs="X", outputs="Out", attrs=dict(_REDUCE_ATTRS), infer_shape=_reduce_shape)(rule)


for _type in _REDUCERS:
    _reduce(_type)


# -- arg_max / arg_min ------------------------------------------------------------------------------
def _arg_dtype(dtype_attr) -> str:
    return "int32" if dtype_attr == dtypes.to_enum("int32") else "int64"


def _arg_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    axis, keep = ctx.attr("axis"), bool(ctx.attr("keepdims"))
    if ctx.attr("flatten"):
        shape = (1,) * x.ndim if keep else ()
    else:
        ctx.check(x.ndim == 0 and axis in (0, -1) or -x.ndim <= axis < x.ndim,
                  f"axis={axis} is out of range for a rank-{x.ndim} input")
        axis = axis % x.ndim if x.ndim else 0
        shape = _reduced_shape(x.shape, (axis,), keep) if x.ndim else ()
    ctx.set_output("Out", shape, _arg_dtype(ctx.attr("dtype")), 0)


def _arg(op_type: str, fn, doc: str):
    def rule(ctx):
        x = ctx.input("X")
        keep = bool(ctx.attr("keepdims"))
        if ctx.attr("flatten") or x.ndim == 0:
            out = fn(x.reshape(-1), axis=0)
            out = out.reshape((1,) * x.ndim) if keep else out
        else:
            out = fn(x, axis=ctx.attr("axis") % x.ndim, keepdims=keep)
        return {"Out": out.astype(_arg_dtype(ctx.attr("dtype")))}

    rule.__name__ = op_type
    rule.__doc__ = doc
    op(op_type, inputs="X", outputs="Out",
       attrs={"axis": Attr("long", 0), "keepdims": False, "flatten": False, "dtype": 3},
       infer_shape=_arg_shape, grad=None)(rule)


_arg("arg_max", jnp.argmax, "Index of the (first) largest element of X along ``axis`` (of all of X with ``flatten``).")
_arg("arg_min", jnp.argmin, "Index of the (first) smallest element of X along ``axis`` (of all of X with ``flatten``).")


# -- top_k / top_k_v2 -------------------------------------------------------------------------------
def _static_k(ctx) -> int:
    """k from the ``K`` input when given (it must be known when the step is traced), else the attr."""
    k_tensor = ctx.input("K")
    if k_tensor is None:
        return int(ctx.attr("k"))
    try:
        return int(jnp.asarray(k_tensor).reshape(-1)[0])
    except jax.errors.JAXTypeError:
        raise OpRuntimeError(
            f"op {ctx.opdef.type!r}: a K input (a fed or computed tensor) is not supported (XLA needs "
            "k when compiling); set the attribute k instead") from None


def _top_k_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    axis = ctx.attr("axis") if ctx.opdef.type == "top_k_v2" else -1
    axis = -1 if axis is None else axis
    ctx.check(x.ndim >= 1 and -x.ndim <= axis < x.ndim or x.ndim == 0 and axis in (0, -1),
              f"axis={axis} is out of range for a rank-{x.ndim} input")
    k = -1 if ctx.input("K") is not None else int(ctx.attr("k"))
    shape = list(x.shape)
    if x.ndim:
        axis %= x.ndim
        ctx.check(k < 0 or shape[axis] < 0 or 0 <= k <= shape[axis],
                  f"k={k} must lie in [0, {shape[axis]}] (the size of axis {axis})")
        shape[axis] = k
    ctx.set_output("Out", shape, x.dtype)
    ctx.set_output("Indices", shape, "int64")


def _top_k(x, k: int, axis: int, largest: bool):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    moved = jnp.moveaxis(x, axis, -1)
    values, indices = lax.top_k(moved if largest else -moved, k)
    if not largest:
        values = -values
    return jnp.moveaxis(values, -1, axis), jnp.moveaxis(indices.astype(jnp.int64), -1, axis)


@op("top_k", inputs="X K?", outputs="Out Indices", attrs={"k": 1}, infer_shape=_top_k_shape,
    no_grad_inputs=["K"], no_grad_outputs=["Indices"])
def top_k(ctx):
    """The k largest values of X along its last axis (descending) and their int64 indices."""
    values, indices = _top_k(ctx.input("X"), _static_k(ctx), -1, True)
    return {"Out": values, "Indices": indices}


@op("top_k_v2", inputs="X K?", outputs="Out Indices",
    attrs={"k": 1, "axis": -1, "largest": True, "sorted": True}, infer_shape=_top_k_shape,
    no_grad_inputs=["K"], no_grad_outputs=["Indices"])
def top_k_v2(ctx):
    """The k largest (or smallest, ``largest=False``) values of X along ``axis``, and their indices.

    Results are always sorted (largest first, or smallest first); ties keep the lower index first.
    """
    x = ctx.input("X")
    values, indices = _top_k(x, _static_k(ctx), ctx.attr("axis"), bool(ctx.attr("largest")))
    return {"Out": values, "Indices": indices}


# -- cumsum -------------------------------------------------------------------------------------------
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
    return {"Out": out}
