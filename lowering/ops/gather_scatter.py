"""Gathering and scattering by index tensors: gather, gather_nd, scatter, scatter_nd_add, multiplex, shard_index,
take_along_axis,
put_along_axis (``index_select`` and ``index_sample`` are in ``search.py``)."""

from __future__ import annotations

import jax.numpy as jnp

from ...ir.registry import op
from ...ir.shape import InferShapeContext, same_as
from ..checks import IndexInput, index_inputs
from ._errors import _fail
from ._shapes import _norm_axis, dims_equal
from ._tensor_attrs import static_ints


# -- gather / gather_nd / scatter ------------------------------------------------------------------
def _index_check(ctx: InferShapeContext, idx, slot: str) -> None:
    ctx.check(idx.dtype in ("int32", "int64"), f"{slot} must be int32 or int64, got {idx.dtype}")


def _gather_shape(ctx: InferShapeContext) -> None:
    x, idx = ctx.input("X"), ctx.input("Index")
    _index_check(ctx, idx, "Index")
    ctx.check(idx.ndim <= 1 or (idx.ndim == 2 and dims_equal(idx.shape[1], 1)),
              f"Index must be 0-d, 1-d or [N, 1], got {idx.shape}")
    if ctx.input("Axis") is not None:
        ctx.set_output("Out", (-1,) * (x.ndim - (idx.ndim == 0)), x.dtype, 0)
        return
    axis = _norm_axis(ctx.attr("axis"), x.ndim)
    ctx.check(0 <= axis < x.ndim, f"axis {ctx.attr('axis')} is out of range for rank {x.ndim}")
    mid = () if idx.ndim == 0 else (idx.shape[0],)
    ctx.set_output("Out", x.shape[:axis] + mid + x.shape[axis + 1:], x.dtype, 0)


@op("gather", inputs="X Index Axis?", outputs="Out", attrs={"axis": 0}, infer_shape=_gather_shape,
    no_grad_inputs=["Index", "Axis"])
def gather(ctx):
    """The slices ``X[..., Index[i], ...]`` along ``axis`` (a 0-d Index drops that dim)."""
    x, idx = ctx.input("X"), ctx.input("Index")
    axis = static_ints(ctx, "Axis", what="axis")
    axis = _norm_axis(ctx.attr("axis") if axis is None else axis[0], x.ndim)
    if idx.ndim == 2:
        idx = idx.reshape(-1)
    return {"Out": jnp.take(x, idx, axis=axis, mode="clip")}


@index_inputs("gather")
def _gather_indices(attr, shape):
    x = shape("X")
    axis = attr("axis")
    axis = axis + len(x) if axis < 0 else axis
    # An axis given as a tensor (the Axis input) is not known here: no check (documented).
    return [IndexInput("Index", x[axis])] if 0 <= axis < len(x) else []


def _gather_nd_shape(ctx: InferShapeContext) -> None:
    x, idx = ctx.input("X"), ctx.input("Index")
    _index_check(ctx, idx, "Index")
    ctx.check(idx.ndim >= 1, "Index must have rank >= 1 (its last dim indexes X's leading dims)")
    k = idx.shape[-1]
    ctx.check(k >= 0, "Index's last dim must be known at build time")
    ctx.check(k <= x.ndim, f"Index's last dim ({k}) exceeds X's rank {x.ndim}")
    ctx.set_output("Out", idx.shape[:-1] + x.shape[k:], x.dtype, 0)


@op("gather_nd", inputs="X Index", outputs="Out", infer_shape=_gather_nd_shape, no_grad_inputs=["Index"])
def gather_nd(ctx):
    """``Out[i...] = X[Index[i..., 0], ..., Index[i..., k-1]]``: Index's last dim ``k`` indexes X's
    first k dims."""
    x, idx = ctx.input("X"), ctx.input("Index")
    k = idx.shape[-1]
    if k == 0:
        return {"Out": jnp.broadcast_to(x, idx.shape[:-1] + x.shape)}
    coords = tuple(jnp.clip(idx[..., i], 0, x.shape[i] - 1) for i in range(k))
    return {"Out": x[coords]}


@index_inputs("gather_nd")
def _gather_nd_indices(attr, shape):
    x, k = shape("X"), shape("Index")[-1]
    if k < 0:
        return [IndexInput("Index", -1)]       # unknown until run time: checked in the step
    return [IndexInput("Index", x[i], component=i) for i in range(min(k, len(x)))]


def _scatter_shape(ctx: InferShapeContext) -> None:
    x, ids, upd = ctx.input("X"), ctx.input("Ids"), ctx.input("Updates")
    _index_check(ctx, ids, "Ids")
    ctx.check(ids.ndim <= 1 or (ids.ndim == 2 and dims_equal(ids.shape[1], 1)),
              f"Ids must be 0-d, 1-d or [N, 1], got {ids.shape}")
    ctx.check(x.ndim >= 1, "X must have rank >= 1")
    ctx.check(upd.dtype == x.dtype, f"Updates is {upd.dtype} but X is {x.dtype}")
    if ids.ndim == 0:
        ctx.check(upd.ndim == x.ndim - 1 and all(dims_equal(a, b) for a, b in zip(upd.shape, x.shape[1:])),
                  f"with a 0-d Ids, Updates {upd.shape} must have X's shape {x.shape} without dim 0")
    else:
        ctx.check(upd.ndim == x.ndim and all(dims_equal(a, b) for a, b in zip(upd.shape[1:], x.shape[1:])),
                  f"Updates {upd.shape} must be [len(Ids)] + X's shape {x.shape} after dim 0")
        ctx.check(dims_equal(upd.shape[0], ids.shape[0]),
                  f"Updates has {upd.shape[0]} rows but Ids has {ids.shape[0]} indices")
    ctx.set_output("Out", x.shape, x.dtype, x.lod_level)


@op("scatter", inputs="X Ids Updates", outputs="Out", attrs={"overwrite": True}, infer_shape=_scatter_shape,
    no_grad_inputs=["Ids"])
def scatter(ctx):
    """X with rows ``Ids[i]`` replaced by ``Updates[i]`` (``overwrite``), or zeroed and then summed
    with every update that targets them (``overwrite=False``)."""
    x, ids, upd = ctx.input("X"), ctx.input("Ids"), ctx.input("Updates")
    if ids.ndim == 0:
        ids, upd = ids.reshape(1), upd[None]
    ids = ids.reshape(-1)
    if ctx.attr("overwrite"):
        return {"Out": x.at[ids].set(upd, mode="drop")}
    return {"Out": x.at[ids].set(jnp.zeros_like(upd), mode="drop").at[ids].add(upd, mode="drop")}


@index_inputs("scatter")
def _scatter_indices(attr, shape):
    return [IndexInput("Ids", shape("X")[0])]


# -- take_along_axis / put_along_axis --------------------------------------------------------------
def _along_axis_index(x_ndim: int, index, axis: int, axis_size: int):
    """The full index tuple of Paddle's *_along_axis: Index's own coordinates, except along ``axis``."""
    index = jnp.where(index < 0, index + axis_size, index)
    grids = list(jnp.indices(index.shape, sparse=True))
    return tuple(index if d == axis else grids[d] for d in range(x_ndim))


def _along_shape(ctx: InferShapeContext, out: str) -> None:
    x, index = ctx.input("Input"), ctx.input("Index")
    axis = ctx.attr("Axis")
    ctx.check(x.ndim == index.ndim, f"Input {x.shape} and Index {index.shape} must have the same rank")
    ctx.check(-x.ndim <= axis < x.ndim, f"Axis {axis} is out of range for a rank-{x.ndim} Input")
    ctx.check(index.dtype in ("int32", "int64"), f"Index must be int32 or int64, got {index.dtype}")
    shape = index.shape if out == "take" else x.shape
    ctx.set_output("Result", shape, x.dtype, 0)


@op("take_along_axis", inputs="Input Index", outputs="Result", attrs={"Axis": 0},
    infer_shape=lambda ctx: _along_shape(ctx, "take"), no_grad_inputs=["Index"])
def take_along_axis(ctx):
    """Result[i, j, k] = Input[Index[i, j, k], j, k] for Axis 0 (likewise for other axes); Result has
    Index's shape."""
    x, index = ctx.input("Input"), ctx.input("Index")
    axis = int(ctx.attr("Axis")) % x.ndim
    return {"Result": x[_along_axis_index(x.ndim, index, axis, x.shape[axis])]}


_PUT_REDUCE = ("assign", "add", "mul", "multiply", "mean", "amin", "amax")


def _put_shape(ctx: InferShapeContext) -> None:
    ctx.check(ctx.attr("Reduce") in _PUT_REDUCE, f"Reduce must be one of {_PUT_REDUCE}, got {ctx.attr('Reduce')!r}")
    _along_shape(ctx, "put")


@op("put_along_axis", inputs="Input Index Value", outputs="Result",
    attrs={"Axis": 0, "Reduce": "assign", "Include_self": True}, infer_shape=_put_shape, no_grad_inputs=["Index"])
def put_along_axis(ctx):
    """Input with Value written at Index along Axis (the inverse of take_along_axis): ``Reduce``
    "assign" replaces, "add"/"mul" accumulate, "mean"/"amin"/"amax" combine the values sent to one
    place (with the original element too when ``Include_self``). Value has Index's shape (a
    broadcastable Value is broadcast to it). Where one place gets several values under "assign",
    which one wins is not defined (Paddle's CPU kernel: the last)."""
    x, index, value = ctx.input("Input"), ctx.input("Index"), ctx.input("Value")
    axis = int(ctx.attr("Axis")) % x.ndim
    value = jnp.broadcast_to(value.astype(x.dtype), index.shape)
    where = _along_axis_index(x.ndim, index, axis, x.shape[axis])
    reduce = ctx.attr("Reduce")
    include_self = bool(ctx.attr("Include_self"))
    if reduce == "assign":
        return {"Result": x.at[where].set(value)}
    touched = jnp.zeros(x.shape, jnp.bool_).at[where].set(True)
    if reduce == "add":
        base = x if include_self else jnp.where(touched, jnp.zeros((), x.dtype), x)
        return {"Result": base.at[where].add(value)}
    if reduce in ("mul", "multiply"):
        base = x if include_self else jnp.where(touched, jnp.ones((), x.dtype), x)
        return {"Result": base.at[where].multiply(value)}
    if reduce == "mean":
        count = jnp.zeros(x.shape, x.dtype).at[where].add(jnp.ones((), x.dtype))
        base = x if include_self else jnp.where(touched, jnp.zeros((), x.dtype), x)
        total = base.at[where].add(value)
        denom = count + (1 if include_self else 0)
        if jnp.issubdtype(x.dtype, jnp.integer):
            mean = total // jnp.maximum(denom, 1)
        else:
            mean = total / jnp.maximum(denom, 1)
        return {"Result": jnp.where(touched, mean, x)}
    if reduce in ("amin", "amax"):
        big = jnp.finfo(x.dtype).max if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).max
        fill = big if reduce == "amin" else -big if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
        base = x if include_self else jnp.where(touched, jnp.asarray(fill, x.dtype), x)
        out = base.at[where].min(value) if reduce == "amin" else base.at[where].max(value)
        return {"Result": out}
    _fail(ctx, f"Reduce must be one of {_PUT_REDUCE}, got {reduce!r}")


# -- scatter_nd_add / multiplex ----------------------------------------------------------------------
@op("scatter_nd_add", inputs="X Index Updates", outputs="Out", infer_shape=same_as("X"), no_grad_inputs=["Index"])
def scatter_nd_add(ctx):
    """X with Updates added at the k-dim coordinates of Index [..., k] (Updates is
    Index.shape[:-1] + X.shape[k:]); repeated coordinates add up."""
    x, index, updates = ctx.input("X"), ctx.input("Index"), ctx.input("Updates")
    k = index.shape[-1]
    coords = tuple(index[..., i] for i in range(k))
    return {"Out": x.at[coords].add(updates.astype(x.dtype))}


@op("multiplex", inputs="X* Ids", outputs="Out", infer_shape=same_as("X"), no_grad_inputs=["Ids"])
def multiplex(ctx):
    """Row i of Out is row i of X[Ids[i]] (the candidates X all of one shape)."""
    xs = jnp.stack(ctx.inputs("X"))
    ids = ctx.input("Ids").reshape(-1).astype(jnp.int32)
    return {"Out": xs[ids, jnp.arange(xs.shape[1])]}


@op("shard_index", inputs="X", outputs="Out",
    attrs={"index_num": 0, "nshards": 0, "shard_id": 0, "ignore_value": -1}, infer_shape=same_as("X"), grad=None)
def shard_index(ctx):
    """Ids of shard ``shard_id`` (of ``nshards`` equal shards of ``index_num`` ids) as offsets into
    that shard; ids of other shards become ``ignore_value``."""
    x = ctx.input("X")
    size = -(-ctx.attr("index_num") // ctx.attr("nshards"))
    shard = ctx.attr("shard_id")
    return {"Out": jnp.where(x // size == shard, x - shard * size, ctx.attr("ignore_value")).astype(x.dtype)}
