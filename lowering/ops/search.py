"""Searching and sorting: arg_max/arg_min, top_k/top_k_v2 and argsort; picking elements by index
(index_select, index_sample); and the ops whose output size depends on the data (where_index,
masked_select, unique: padded and counted, see docs/ops_data_dependent.md).

``arg_max``/``arg_min`` return the first index of the extreme value, int64 (int32 when ``dtype``
is 2); with ``flatten`` the result is 0-d (all ones with ``keepdims``). None of these ops has a
gradient for its indices.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir import dtypes
from ...ir.errors import OpRuntimeError
from ...ir.registry import Attr, declare_counts, op
from ...ir.shape import InferShapeContext
from ..lod_value import LoDValue
from ..checks import bound_checked, check_count, may_be_counted
from ._counts import count_of, counted, given, is_counted
from ._errors import _fail
from ._shapes import paddle_broadcast
from .reduce import _reduced_shape


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


def _arg(ctx, fn):
    """The index of the extreme element of X by ``fn`` (``jnp.argmax`` or ``jnp.argmin``)."""
    x = ctx.input("X")
    keep = bool(ctx.attr("keepdims"))
    if ctx.attr("flatten") or x.ndim == 0:
        out = fn(x.reshape(-1), axis=0)
        out = out.reshape((1,) * x.ndim) if keep else out
    else:
        out = fn(x, axis=ctx.attr("axis") % x.ndim, keepdims=keep)
    return {"Out": out.astype(_arg_dtype(ctx.attr("dtype")))}


_ARG_ATTRS = {"axis": Attr("long", 0), "keepdims": False, "flatten": False, "dtype": 3}


@op("arg_max", inputs="X", outputs="Out", attrs=_ARG_ATTRS, infer_shape=_arg_shape, grad=None)
def arg_max(ctx):
    """Index of the (first) largest element of X along ``axis`` (of all of X with ``flatten``)."""
    return _arg(ctx, jnp.argmax)


@op("arg_min", inputs="X", outputs="Out", attrs=_ARG_ATTRS, infer_shape=_arg_shape, grad=None)
def arg_min(ctx):
    """Index of the (first) smallest element of X along ``axis`` (of all of X with ``flatten``)."""
    return _arg(ctx, jnp.argmin)


# -- top_k / top_k_v2, argsort ------------------------------------------------------------------------
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
    x = ctx.input("X")
    if is_counted(x):
        return _top_k_counted(x, _static_k(ctx), True, ctx)
    values, indices = _top_k(x, _static_k(ctx), -1, True)
    return {"Out": values, "Indices": indices}


def _sort_counted(x, descending: bool):
    """The order that sorts a counted value along its rows with its padding rows last: a stable
    sort of all rows, then the positions of real rows moved ahead, each group in its order (so the
    real rows are in the order a sort of them alone gives)."""
    data = x.data
    idx = jnp.argsort(data, axis=0, stable=True, descending=descending)
    padding = (idx >= count_of(x)).astype(jnp.int32)
    return jnp.take_along_axis(idx, jnp.argsort(padding, axis=0, stable=True), axis=0)


def _top_k_counted(x, k: int, largest: bool, ctx=None) -> dict:
    """top_k along the rows of a counted value: the first k of its sorted real rows. Paddle refuses
    k past the count; with ``ctx`` (the op's compute context) the step checks it, a
    ``BoundExceededError`` naming the op and the one that produced the count when the value has
    fewer than k real rows (checks.check_count)."""
    if ctx is not None:
        check_count(ctx.checks, ctx.op, ctx.env, ctx.op.inputs["X"][0], count_of(x) >= k, count_of(x),
                    f"top_k with k={k} needs a real count of at least {k} rows")
    idx = _sort_counted(x, largest)[:k]
    n = jnp.minimum(count_of(x), k)
    return {"Out": counted(jnp.take_along_axis(x.data, idx, axis=0), n),
            "Indices": counted(idx.astype(jnp.int64), n)}


def _along_rows(attr: str, default: int):
    """Sorting ops: they honour a count along the rows; along another axis they are row-wise."""

    def roles(op, values):
        xs = values.get("X") or [None]
        rank = len(getattr(xs[0], "shape", ()))
        if not rank or given(values, "K"):
            return {}
        return {"X": "count" if int(op.attrs.get(attr, default)) % rank == 0 else "rows"}

    return roles


@op("top_k_v2", inputs="X K?", outputs="Out Indices",
    attrs={"k": 1, "axis": -1, "largest": True, "sorted": True}, infer_shape=_top_k_shape,
    no_grad_inputs=["K"], no_grad_outputs=["Indices"])
def top_k_v2(ctx):
    """The k largest (or smallest, ``largest=False``) values of X along ``axis``, and their indices.

    Results are always sorted (largest first, or smallest first); ties keep the lower index first.
    """
    x = ctx.input("X")
    if is_counted(x):
        return _top_k_counted(x, _static_k(ctx), bool(ctx.attr("largest")), ctx)
    values, indices = _top_k(x, _static_k(ctx), ctx.attr("axis"), bool(ctx.attr("largest")))
    return {"Out": values, "Indices": indices}


def _argsort_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    axis = ctx.attr("axis")
    ctx.check(-max(x.ndim, 1) <= axis < max(x.ndim, 1), f"axis {axis} is out of range for a rank-{x.ndim} input")
    ctx.set_output("Out", x.shape, x.dtype, x.lod_level)
    ctx.set_output("Indices", x.shape, "int64", x.lod_level)


@op("argsort", inputs="X", outputs="Out Indices", attrs={"axis": -1, "descending": False},
    infer_shape=_argsort_shape, no_grad_outputs=["Indices"])
def argsort(ctx):
    """X sorted along ``axis`` (Out) and the int64 positions the sorted elements came from
    (Indices); ``descending`` sorts largest first. Ties keep their order (a stable sort)."""
    x = ctx.input("X")
    if is_counted(x):              # along the rows: the padding rows sort last, the count is kept
        idx, n = _sort_counted(x, bool(ctx.attr("descending"))), count_of(x)
        return {"Out": counted(jnp.take_along_axis(x.data, idx, axis=0), n),
                "Indices": counted(idx.astype(jnp.int64), n)}
    if x.ndim == 0:
        return {"Out": x, "Indices": jnp.zeros((), jnp.int64)}
    axis = int(ctx.attr("axis")) % x.ndim
    idx = jnp.argsort(x, axis=axis, stable=True, descending=bool(ctx.attr("descending")))
    return {"Out": jnp.take_along_axis(x, idx, axis=axis), "Indices": idx.astype(jnp.int64)}


declare_counts("argsort", _along_rows("axis", -1))
declare_counts("top_k", _along_rows("k_axis_of_top_k", -1))
declare_counts("top_k_v2", _along_rows("axis", -1))
for _type in ("top_k", "top_k_v2"):
    bound_checked(_type, lambda op_: may_be_counted(op_, "X"))


# -- picking by index ------------------------------------------------------------------------------
def _index_select_shape(ctx: InferShapeContext) -> None:
    x, index = ctx.input("X"), ctx.input("Index")
    dim = ctx.attr("dim")
    ctx.check(-x.ndim <= dim < x.ndim, f"dim {dim} is out of range for a rank-{x.ndim} X")
    ctx.check(index.ndim <= 1, f"Index must be 1-D, got {index.shape}")
    ctx.check(index.dtype in ("int32", "int64"), f"Index must be int32 or int64, got {index.dtype}")
    shape = list(x.shape)
    shape[dim % x.ndim] = index.shape[0] if index.ndim == 1 else 1
    ctx.set_output("Out", shape, x.dtype, 0)


@op("index_select", inputs="X Index", outputs="Out", attrs={"dim": 0}, infer_shape=_index_select_shape,
    no_grad_inputs=["Index"])
def index_select(ctx):
    """The slices of X at positions ``Index`` (1-D) along ``dim``."""
    x, index = ctx.input("X"), ctx.input("Index")
    dim = int(ctx.attr("dim")) % x.ndim
    index = index.reshape(-1)
    index = jnp.where(index < 0, index + x.shape[dim], index)
    return {"Out": jnp.take(x, index, axis=dim, mode="clip")}


def _index_sample_shape(ctx: InferShapeContext) -> None:
    x, index = ctx.input("X"), ctx.input("Index")
    ctx.check(x.ndim == 2 and index.ndim == 2, f"X and Index must be 2-D, got {x.shape} and {index.shape}")
    ctx.check(index.dtype in ("int32", "int64"), f"Index must be int32 or int64, got {index.dtype}")
    ctx.set_output("Out", (x.shape[0] if x.shape[0] >= 0 else index.shape[0], index.shape[1]), x.dtype, 0)


@op("index_sample", inputs="X Index", outputs="Out", infer_shape=_index_sample_shape, no_grad_inputs=["Index"])
def index_sample(ctx):
    """Out[i, k] = X[i, Index[i, k]]: per row, the elements at that row's indices."""
    x, index = ctx.input("X"), ctx.input("Index")
    return {"Out": jnp.take_along_axis(x, index.astype(jnp.int32), axis=1, mode="clip")}


# -- data-dependent output sizes (docs/ops_data_dependent.md) ---------------------------------------
# The number of rows of these outputs depends on the data. Inside jax.jit an output is padded to a
# static capacity (the most rows the input allows) and carried as a LoDValue whose single level
# [0, count] holds the real row count: a fetch cuts it back to the real rows (Paddle's result),
# row-wise consumers compute on the padding harmlessly (its rows are zeros).
def ragged(data, count) -> LoDValue:
    """``data`` padded to its capacity, of which the first ``count`` rows are real."""
    return LoDValue(data, [jnp.stack([jnp.zeros((), jnp.int32), jnp.asarray(count, jnp.int32)])])


def _where_index_shape(ctx: InferShapeContext) -> None:
    cond = ctx.input("Condition")
    ctx.set_output("Out", (-1, cond.ndim), "int64", 0)


@op("where_index", inputs="Condition", outputs="Out", infer_shape=_where_index_shape, grad=None)
def where_index(ctx):
    """The int64 coordinates [K, rank] of the K non-zero (true) elements of Condition, in row-major
    order (``paddle.nonzero``). K depends on the data: the value is padded to Condition's size
    and carries K (see docs/ops_data_dependent.md)."""
    cond = ctx.input("Condition")
    flat = cond.reshape(-1) != 0
    capacity = flat.shape[0]
    (pos,) = jnp.nonzero(flat, size=capacity, fill_value=0)
    coords = jnp.stack(jnp.unravel_index(pos, cond.shape), axis=-1) if cond.ndim else jnp.zeros((capacity, 0))
    count = jnp.sum(flat)
    valid = (jnp.arange(capacity) < count)[:, None]
    return {"Out": ragged(jnp.where(valid, coords, 0).astype(jnp.int64), count)}


def _masked_select_shape(ctx: InferShapeContext) -> None:
    x, mask = ctx.input("X"), ctx.input("Mask")
    ctx.check(mask.dtype == "bool", f"Mask must be bool, got {mask.dtype}")
    ctx.check(paddle_broadcast(x.shape, mask.shape, -1) is not None, f"X {x.shape} and Mask {mask.shape} do not broadcast")
    ctx.set_output("Y", (-1,), x.dtype, 0)


@op("masked_select", inputs="X Mask", outputs="Y", infer_shape=_masked_select_shape, no_grad_inputs=["Mask"])
def masked_select(ctx):
    """The elements of X where Mask is true (X and Mask broadcast), as a 1-D tensor in row-major
    order. Its length depends on the data: padded to the broadcast size, carrying the count."""
    x, mask = ctx.input("X"), ctx.input("Mask")
    shape = jnp.broadcast_shapes(x.shape, mask.shape)
    xs = jnp.broadcast_to(x, shape).reshape(-1)
    ms = jnp.broadcast_to(mask, shape).reshape(-1)
    (pos,) = jnp.nonzero(ms, size=xs.shape[0], fill_value=0)
    count = jnp.sum(ms)
    valid = jnp.arange(xs.shape[0]) < count
    return {"Y": ragged(jnp.where(valid, xs[pos], jnp.zeros((), x.dtype)), count)}


def _unique_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    axis = list(ctx.attr("axis") or [])
    ctx.check(len(axis) <= 1, f"unique takes at most one axis, got {axis}")
    index_dtype = dtypes.from_enum(ctx.attr("dtype"))
    ctx.check(index_dtype in ("int32", "int64"), f"dtype must be int32 or int64, got {index_dtype}")
    if axis:
        a = axis[0] % x.ndim
        ctx.check(a == 0, f"unique along axis {axis[0]} is not supported, only along axis 0 (or flattened)")
        out = tuple(-1 if i == a else d for i, d in enumerate(x.shape))
        inverse = (x.shape[a],)
    else:
        out = (-1,)
        inverse = (-1,) if any(d < 0 for d in x.shape) else (int(np.prod(x.shape)),)
    ctx.set_output("Out", out, x.dtype, 0)
    for slot in ("Indices", "Counts"):
        if ctx.has_output(slot):
            ctx.set_output(slot, (-1,), index_dtype, 0)
    if ctx.has_output("Index"):
        ctx.set_output("Index", inverse, index_dtype, 0)


@op("unique", inputs="X", outputs="Out Indices? Index Counts?",
    attrs={"return_index": False, "return_inverse": False, "return_counts": False, "axis": Attr("ints", []),
           "dtype": 3, "is_sorted": False},
    infer_shape=_unique_shape, grad=None)
def unique(ctx):
    """The distinct values of X (flattened, or the distinct slices along one ``axis``): sorted
    when ``is_sorted`` (Paddle 2.x's paddle.unique), else in order of first appearance (fluid's
    unique). Indices: where each first appears; Index: for each element, its value's position in
    Out; Counts: how often each appears. Out, Indices and Counts have data-dependent lengths:
    padded to X's size (along the axis), carrying the count."""
    x = ctx.input("X")
    in_count = None
    if is_counted(x):              # a counted X: its padding rows (or their elements) take no part
        per_row = int(np.prod(x.data.shape[1:]))
        in_count, x = count_of(x), x.data
    index_dtype = dtypes.to_numpy(dtypes.from_enum(ctx.attr("dtype")))
    axis = [int(a) % x.ndim for a in (ctx.attr("axis") or [])]
    if axis and axis[0] != 0:
        _fail(ctx, "unique along an axis other than 0 is not supported (its padded rows would not be leading)")
    if axis:
        moved = x
        rows = moved.reshape(moved.shape[0], -1)
    else:
        moved = x.reshape(-1)
        rows = moved.reshape(-1, 1)
    n = rows.shape[0]
    real = jnp.ones((n,), bool) if in_count is None else \
        jnp.arange(n) < in_count * (1 if axis else per_row)
    # Sort rows lexicographically (stable; padding last), then mark where a new distinct row starts.
    keys = tuple(rows[:, k] for k in reversed(range(rows.shape[1])))
    order = jnp.lexsort(keys + (~real,)) if rows.shape[1] else jnp.arange(n)
    srt = rows[order]
    real_sorted = real[order]
    new = jnp.concatenate([jnp.ones((1,), bool), jnp.any(srt[1:] != srt[:-1], axis=1)]) if n else jnp.zeros((0,), bool)
    new = new & real_sorted
    group = jnp.maximum(jnp.cumsum(new) - 1, 0)               # sorted position -> distinct rank
    count = jnp.sum(new)
    inverse_sorted = jnp.zeros((n,), jnp.int32).at[order].set(group.astype(jnp.int32))
    first = jnp.full((n,), n, jnp.int32).at[group].min(jnp.where(real_sorted, order, n).astype(jnp.int32))
    counts = jnp.zeros((n,), jnp.int32).at[group].add(real_sorted.astype(jnp.int32))
    valid = jnp.arange(n) < count
    if ctx.attr("is_sorted"):
        rank_of = jnp.arange(n)                                # output slot k holds rank k
        inverse = inverse_sorted
    else:
        # Order the distinct values by first appearance.
        key = jnp.where(valid, first, n + jnp.arange(n))
        rank_of = jnp.argsort(key, stable=True)               # output slot k holds rank rank_of[k]
        slot_of_rank = jnp.zeros((n,), jnp.int32).at[rank_of].set(jnp.arange(n, dtype=jnp.int32))
        inverse = slot_of_rank[inverse_sorted]
    first_pos = jnp.where(valid, first[rank_of], 0)
    values = moved[first_pos]
    values = jnp.where(valid.reshape((-1,) + (1,) * (values.ndim - 1)), values, jnp.zeros((), x.dtype))
    out = {"Out": ragged(values, count)}
    if ctx.has_output("Index"):
        out["Index"] = inverse.astype(index_dtype)
        if in_count is not None:   # one entry per real element of X
            out["Index"] = counted(jnp.where(real, out["Index"], 0), in_count * (1 if axis else per_row))
    if ctx.has_output("Indices"):
        out["Indices"] = ragged(first_pos.astype(index_dtype), count)
    if ctx.has_output("Counts"):
        out["Counts"] = ragged(jnp.where(valid, counts[rank_of], 0).astype(index_dtype), count)
    return out


declare_counts("unique", {"X": "count"})


def _similarity_focus_shape(ctx: InferShapeContext) -> None:
    x, axis, indexes = ctx.input("X"), ctx.attr("axis"), list(ctx.attr("indexes"))
    ctx.check(x.ndim == 4 and axis in (1, 2, 3), f"similarity_focus needs a 4-D X and axis 1, 2 or 3, "
                                                 f"got {x.shape} and axis {axis}")
    ctx.check(len(indexes) > 0 and all(0 <= i and (x.shape[axis] < 0 or i < x.shape[axis]) for i in indexes),
              f"indexes {indexes} out of range for dim {axis} of X {x.shape}")
    ctx.set_output("Out", x.shape, x.dtype, 0)


@op("similarity_focus", inputs="X", outputs="Out", attrs={"axis": 0, "indexes": Attr("ints", [])},
    infer_shape=_similarity_focus_shape, grad=None)
def similarity_focus(ctx):
    """A 0/1 mask of X's shape: for each instance and each of ``indexes`` along ``axis``, the 2-D
    slice's entries taken greedily from the largest, skipping any whose row or column is already
    taken, until every row or every column is; their positions are 1 at every index along ``axis``."""
    x, axis = ctx.input("X"), ctx.attr("axis")
    moved = jnp.moveaxis(x, axis, 1)                         # [B, A, R, C]
    rows, cols = moved.shape[2], moved.shape[3]

    def focus(mat):                                          # [R, C] -> 0/1 [R, C]
        def step(_, state):
            free, picked = state
            flat = jnp.argmax(jnp.where(free, mat, -jnp.inf).reshape(-1))
            r, c = flat // cols, flat % cols
            free = free & (jnp.arange(rows)[:, None] != r) & (jnp.arange(cols)[None, :] != c)
            return free, picked.at[r, c].set(True)

        init = (jnp.ones((rows, cols), bool), jnp.zeros((rows, cols), bool))
        return lax.fori_loop(0, min(rows, cols), step, init)[1]

    mask = jnp.zeros((moved.shape[0], rows, cols), bool)
    for index in ctx.attr("indexes"):
        mask = mask | jax.vmap(focus)(moved[:, index].astype(jnp.float32 if x.dtype != jnp.float64 else x.dtype))
    out = jnp.broadcast_to(mask[:, None], moved.shape).astype(x.dtype)
    return {"Out": jnp.moveaxis(out, 1, axis)}
