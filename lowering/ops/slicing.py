"""Regions of a tensor: reading them (slice, strided_slice, crop_tensor), writing them (set_value)
and padding around a tensor (pad2d, pad3d; ``pad`` of every dim is in ``tensor.py``).

Bounds given as tensors (``StartsTensor``, ``Offsets``, ``Paddings``, ...) are read when their
values are concrete (``_tensor_attrs.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir import dtypes
from ...ir.registry import Attr, declare_counts, op
from ...ir.shape import InferShapeContext, same_as
from ..checks import bound_checked, check_count, may_be_counted
from ._counts import count_of, counted, given, is_counted
from ._errors import _fail, _runtime_fail
from ._shapes import _norm_axis
from ._tensor_attrs import static_ints


# -- slice / strided_slice -------------------------------------------------------------------------
def slice_bounds(dim: int, start: int, end: int) -> tuple[int, int]:
    """Paddle's slice: negative bounds count from the end, then both are clipped to [0, dim]."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    start = min(max(start, 0), dim)
    end = min(max(end, 0), dim)
    return start, max(end, start)


def _slice_out(shape, axes, starts, ends, decrease, fail) -> tuple[tuple[int, ...], list[tuple]]:
    """Output shape and per-dim (start, end) of ``slice``; UNK dims give UNK sizes."""
    rank = len(shape)
    if not (len(axes) == len(starts) == len(ends)):
        fail(f"axes {list(axes)}, starts {list(starts)} and ends {list(ends)} need one length")
    out = list(shape)
    bounds = []
    for a, s, e in zip(axes, starts, ends):
        a = _norm_axis(int(a), rank)
        if not 0 <= a < rank:
            fail(f"axes {list(axes)}: {a} is out of range for rank {rank}")
        d = shape[a]
        if d < 0:
            out[a] = -1
            bounds.append((a, None))
            continue
        lo, hi = slice_bounds(d, int(s), int(e))
        out[a] = hi - lo
        bounds.append((a, (lo, hi)))
    return _decrease(out, decrease, rank, fail), bounds


def _decrease(out, decrease, rank, fail):
    dec = sorted({_norm_axis(int(a), rank) for a in decrease})
    for a in dec:
        if not 0 <= a < rank:
            fail(f"decrease_axis {list(decrease)} is out of range for rank {rank}")
        if out[a] not in (1, -1):
            fail(f"decrease_axis {list(decrease)}: dim {a} has size {out[a]} after slicing, not 1")
    return tuple(d for i, d in enumerate(out) if i not in dec)


_SLICE_TENSORS = ("StartsTensor", "EndsTensor", "StartsTensorList", "EndsTensorList")


def _slice_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("Input")
    axes = ctx.attr("axes")
    if any(ctx.inputs(s) for s in _SLICE_TENSORS):
        out = list(x.shape)
        for a in axes:
            out[_norm_axis(int(a), x.ndim)] = -1
        shape = _decrease(out, ctx.attr("decrease_axis"), x.ndim, ctx.fail)
    else:
        shape, _ = _slice_out(x.shape, axes, ctx.attr("starts"), ctx.attr("ends"), ctx.attr("decrease_axis"),
                              ctx.fail)
    ctx.set_output("Out", shape, x.dtype, x.lod_level)


@op("slice", inputs="Input StartsTensor? EndsTensor? StartsTensorList*? EndsTensorList*?", outputs="Out",
    attrs={"axes": Attr("ints", []), "starts": Attr("ints", []), "ends": Attr("ints", []),
           "infer_flags": Attr("ints", []), "decrease_axis": Attr("ints", [])},
    infer_shape=_slice_shape, no_grad_inputs=list(_SLICE_TENSORS))
def slice_(ctx):
    """``Input[starts:ends]`` along ``axes`` (bounds clipped, negatives from the end); the dims of
    ``decrease_axis`` (size 1) are dropped. Tensor bounds must be concrete.

    An end before the start gives an empty dim (Paddle's kernel raises instead).
    """
    x = ctx.input("Input")
    starts = static_ints(ctx, "StartsTensor", "StartsTensorList", what="starts")
    ends = static_ints(ctx, "EndsTensor", "EndsTensorList", what="ends")

    fail = _runtime_fail("slice")
    if is_counted(x):
        def need_one_row(ok, count, requirement):
            check_count(ctx.checks, ctx.op, ctx.env, ctx.op.inputs["Input"][0], ok, count, requirement)

        return {"Out": _slice_counted(x, list(ctx.attr("axes")), list(ctx.attr("starts") if starts is None else starts),
                                      list(ctx.attr("ends") if ends is None else ends), list(ctx.attr("decrease_axis")),
                                      fail, need_one_row)}

    shape, bounds = _slice_out(x.shape, ctx.attr("axes"), ctx.attr("starts") if starts is None else starts,
                               ctx.attr("ends") if ends is None else ends, ctx.attr("decrease_axis"), fail)
    index = [slice(None)] * x.ndim
    for a, (lo, hi) in bounds:
        index[a] = slice(lo, hi)
    return {"Out": x[tuple(index)].reshape(shape)}


def _slice_counted(x, axes, starts, ends, decrease, fail, need_one_row=None):
    """``slice`` of a counted value along its rows: bounds from the end count from the real row
    count (Paddle's rule on its real rows), the result carries its own count; the other axes are
    sliced as usual. With the rows in ``decrease_axis`` the one row is returned as a plain value,
    and a run where that row does not exist (the count is too small) is refused by an in-step
    check (``need_one_row``; Paddle refuses it too)."""
    data, n = x.data, count_of(x)
    cap = data.shape[0]
    rows = [k for k, a in enumerate(axes) if _norm_axis(int(a), data.ndim) == 0]
    k = rows[0]
    lo, hi = int(starts[k]), int(ends[k])
    start = jnp.clip(jnp.where(lo < 0, lo + n, lo), 0, n)
    stop = jnp.clip(jnp.where(hi < 0, hi + n, hi), 0, n)
    size = jnp.maximum(stop - start, 0).astype(jnp.int32)
    bound = cap                    # the most rows the slice can have, whatever the count
    if lo < 0:
        bound = min(bound, -lo, max(hi - lo, 0) if hi < 0 else bound)
    else:
        bound = min(bound, max(cap - lo, 0), max(hi - lo, 0) if hi >= 0 else bound)
    if hi >= 0:
        bound = min(bound, hi)
    picked = jnp.take(data, start + jnp.arange(bound), axis=0, mode="clip")
    keep = [i for i in range(len(axes)) if i != k]
    if keep:
        shape, bounds = _slice_out(picked.shape, [axes[i] for i in keep], [starts[i] for i in keep],
                                   [ends[i] for i in keep], [], fail)
        index = [slice(None)] * picked.ndim
        for a, (b_lo, b_hi) in bounds:
            index[a] = slice(b_lo, b_hi)
        picked = picked[tuple(index)]
    dec = sorted({_norm_axis(int(a), data.ndim) for a in decrease})
    if 0 in dec:                   # one row, dropped dim: a plain value
        if bound != 1:
            fail(f"decrease_axis {decrease}: the rows slice [{lo}:{hi}] of a value whose row count is data "
                 "is not one row")
        if need_one_row is not None:
            need_one_row(size == 1, n, f"slice [{lo}:{hi}] of the rows with decrease_axis needs that row to exist")
        return picked.reshape([d for i, d in enumerate(picked.shape) if i not in dec])
    out = counted(picked, size)
    if dec:
        out = type(out)(out.data.reshape([d for i, d in enumerate(picked.shape) if i not in dec]), out.offsets)
    return out


def _slice_counts(op, values) -> dict:
    """slice honours a count when it slices the rows by attribute bounds; along other axes it is row-wise."""
    xs = values.get("Input") or [None]
    rank = len(getattr(xs[0], "shape", ()))
    if not rank:
        return {}
    along_rows = any(_norm_axis(int(a), rank) == 0 for a in op.attrs.get("axes") or [])
    if not along_rows:
        return {"Input": "rows"}
    tensors = any(given(values, t) for t in _SLICE_TENSORS)
    return {} if tensors else {"Input": "count"}


declare_counts("slice", _slice_counts)


def strided_bounds(dim: int, start: int, end: int, stride: int) -> tuple[int, int, int]:
    """Paddle's strided_slice on a dim of size ``dim``: returns (first index, count, stride).

    Negative ``start``/``end`` count from the end (clipped at 0); with a negative stride an
    ``end`` of -1 means "through index 0" (Paddle's rule, unlike Python's).
    """
    if stride == 0:
        raise ValueError("strides must not be 0")
    if start < 0:
        start += dim
    if stride > 0:
        if end < 0:
            end += dim
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        count = max(0, -(-(end - start) // stride))
    else:
        if end < -1:  # -1 means "through index 0"; other negative ends count from the end
            end = max(end + dim, 0)
        start = min(max(start, 0), dim - 1)
        end = min(end, dim - 1)
        count = max(0, -(-(start - end) // -stride))
    return start, count, stride


def _strided_out(shape, axes, starts, ends, strides, decrease, fail):
    rank = len(shape)
    if not (len(axes) == len(starts) == len(ends) == len(strides)):
        fail(f"axes {list(axes)}, starts {list(starts)}, ends {list(ends)} and strides {list(strides)} "
             "need one length")
    out = list(shape)
    plan = []
    for a, s, e, st in zip(axes, starts, ends, strides):
        a = _norm_axis(int(a), rank)
        if not 0 <= a < rank:
            fail(f"axes {list(axes)}: {a} is out of range for rank {rank}")
        if int(st) == 0:
            fail("strides must not be 0")
        d = shape[a]
        if d < 0:
            out[a] = -1
            plan.append((a, None))
            continue
        first, count, stride = strided_bounds(d, int(s), int(e), int(st))
        out[a] = count
        plan.append((a, (first, count, stride)))
    return _decrease(out, decrease, rank, fail), plan


_STRIDED_TENSORS = ("StartsTensor", "StartsTensorList", "EndsTensor", "EndsTensorList", "StridesTensor",
                    "StridesTensorList")


def _strided_slice_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("Input")
    if any(ctx.inputs(s) for s in _STRIDED_TENSORS):
        out = list(x.shape)
        for a in ctx.attr("axes"):
            out[_norm_axis(int(a), x.ndim)] = -1
        shape = _decrease(out, ctx.attr("decrease_axis"), x.ndim, ctx.fail)
    else:
        shape, _ = _strided_out(x.shape, ctx.attr("axes"), ctx.attr("starts"), ctx.attr("ends"),
                                ctx.attr("strides"), ctx.attr("decrease_axis"), ctx.fail)
    ctx.set_output("Out", shape, x.dtype, x.lod_level)


@op("strided_slice",
    inputs="Input StartsTensor? StartsTensorList*? EndsTensor? EndsTensorList*? StridesTensor? StridesTensorList*?",
    outputs="Out",
    attrs={"axes": Attr("ints", []), "starts": Attr("ints", []), "ends": Attr("ints", []),
           "strides": Attr("ints", []), "infer_flags": Attr("ints", []), "decrease_axis": Attr("ints", [])},
    infer_shape=_strided_slice_shape, no_grad_inputs=list(_STRIDED_TENSORS))
def strided_slice(ctx):
    """``Input[starts:ends:strides]`` along ``axes`` (negative strides walk backwards; with a
    negative stride an end of -1 reaches index 0); ``decrease_axis`` dims are dropped.

    Bounds that walk against the stride give an empty dim, and bounds past the dim are clipped
    into it (Paddle's kernel raises for the first and reads past the dim for the second).
    """
    x = ctx.input("Input")
    vals = {}
    for name, a, b in (("starts", "StartsTensor", "StartsTensorList"), ("ends", "EndsTensor", "EndsTensorList"),
                       ("strides", "StridesTensor", "StridesTensorList")):
        v = static_ints(ctx, a, b, what=name)
        vals[name] = ctx.attr(name) if v is None else v

    fail = _runtime_fail("strided_slice")

    shape, plan = _strided_out(x.shape, ctx.attr("axes"), vals["starts"], vals["ends"], vals["strides"],
                               ctx.attr("decrease_axis"), fail)
    out = x
    for a, (first, count, stride) in plan:
        if count == 0:
            out = jax.lax.slice_in_dim(out, 0, 0, 1, a)
            continue
        if stride < 0:  # walk a flipped copy forwards
            out, first, stride = jnp.flip(out, a), out.shape[a] - 1 - first, -stride
        out = jax.lax.slice_in_dim(out, first, first + (count - 1) * stride + 1, stride, a)
    return {"Out": out.reshape(shape)}


# -- crop_tensor -----------------------------------------------------------------------------------
def _crop_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    shape = list(ctx.attr("shape") or [])
    if ctx.input("Shape") is not None or ctx.inputs("ShapeTensor"):
        shape = [-1] * x.ndim
    ctx.check(len(shape) == x.ndim, f"shape {shape} must have one value per dim of X {x.shape}")
    tensor_offsets = ctx.input("Offsets") is not None or bool(ctx.inputs("OffsetsTensor"))
    offsets = [int(v) for v in ctx.attr("offsets") or []] or [0] * x.ndim
    # A -1 takes the rest of the dim past its offset: known when the offset and the dim are.
    out = [t if t != -1 else (d - o if d >= 0 and not tensor_offsets else -1)
           for d, t, o in zip(x.shape, shape, offsets)]
    ctx.set_output("Out", out, x.dtype, 0)


@op("crop_tensor", inputs="X Shape? ShapeTensor*? Offsets? OffsetsTensor*?", outputs="Out",
    attrs={"shape": Attr("ints", []), "offsets": Attr("ints", [])}, infer_shape=_crop_shape,
    no_grad_inputs=["Shape", "ShapeTensor", "Offsets", "OffsetsTensor"])
def crop_tensor(ctx):
    """The block of X of ``shape`` starting at ``offsets`` (a -1 in shape takes the rest of that
    dim). The offsets may be tensors known only at run time; the shape, which sets the output's
    shape, must be known when the block is lowered."""
    x = ctx.input("X")
    shape = static_ints(ctx, "Shape", "ShapeTensor", what="the crop shape")
    shape = shape if shape is not None else [int(v) for v in ctx.attr("shape")]
    if ctx.input("Offsets") is not None or ctx.inputs("OffsetsTensor"):
        parts = [v.reshape(-1) for s in ("Offsets", "OffsetsTensor") for v in ctx.inputs(s) if v is not None]
        offsets = jnp.concatenate(parts).astype(jnp.int32)
        if any(t == -1 for t in shape):
            _fail(ctx, "a -1 in shape needs static offsets (the output's size would depend on their values)")
        return {"Out": lax.dynamic_slice(x, [offsets[i] for i in range(x.ndim)], shape)}
    offsets = [int(v) for v in ctx.attr("offsets")] or [0] * x.ndim
    sizes = [x.shape[i] - offsets[i] if t == -1 else t for i, t in enumerate(shape)]
    if any(o < 0 or o + sz > dim for o, sz, dim in zip(offsets, sizes, x.shape)):
        _fail(ctx, f"the crop at offsets {offsets} of shape {sizes} does not fit in X {list(x.shape)}")
    return {"Out": lax.slice(x, offsets, [o + sz for o, sz in zip(offsets, sizes)])}


# -- set_value -------------------------------------------------------------------------------------
def _scalar_value(s):
    """A Python value from a Paddle ``Scalar`` message (or a plain number)."""
    if isinstance(s, (bool, int, float, complex)):
        return s
    # Scalar.Type: BOOLEAN 1, LONG 2, FLOAT64 3, COMPLEX128 4.
    if s.type == 1:
        return bool(s.b)
    if s.type == 2:
        return int(s.i)
    if s.type == 3:
        return float(s.r)
    return complex(s.c.r, s.c.i)


def _set_value_slices(ctx, shape):
    """(index tuple, the shape the indexed region has before decrease/none axes) for set_value."""
    axes = [int(a) for a in ctx.attr("axes")]
    starts = static_ints(ctx, "StartsTensorList", what="starts")
    ends = static_ints(ctx, "EndsTensorList", what="ends")
    steps = static_ints(ctx, "StepsTensorList", what="steps")
    starts = starts if starts is not None else [int(v) for v in ctx.attr("starts")]
    ends = ends if ends is not None else [int(v) for v in ctx.attr("ends")]
    steps = steps if steps is not None else [int(v) for v in ctx.attr("steps")] or [1] * len(axes)
    if not len(axes) == len(starts) == len(ends) == len(steps):
        _fail(ctx, f"axes {axes}, starts {starts}, ends {ends} and steps {steps} must have one length")
    index = [slice(None)] * len(shape)
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            _fail(ctx, "a step of 0 is not allowed")
        n = shape[a]
        # Paddle's normalisation: negative bounds count from the end, then clamp to the dim.
        s = s + n if s < 0 else s
        e = e + n if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), n), min(max(e, 0), n)
        else:
            s, e = min(max(s, -1), n - 1), min(max(e, -1), n - 1)
        index[a] = slice(s, e if e >= 0 else None, st)
    return tuple(index)


@op("set_value", inputs="Input ValueTensor? StartsTensorList*? EndsTensorList*? StepsTensorList*?", outputs="Out",
    attrs={"dtype": 5, "axes": Attr("longs", []), "starts": Attr("longs", []), "ends": Attr("longs", []),
           "steps": Attr("longs", []), "decrease_axes": Attr("longs", []), "none_axes": Attr("longs", []),
           "values": Attr("scalars", []), "shape": Attr("longs", [])},
    infer_shape=same_as("Input"), no_grad_inputs=["StartsTensorList", "EndsTensorList", "StepsTensorList"])
def set_value(ctx):
    """Input with the slice [starts:ends:steps] over ``axes`` replaced by ValueTensor, or by the
    ``values`` attribute (shaped ``shape``), broadcast to the slice (Paddle's ``x[...] = v``).

    The gradient is Out@GRAD outside the slice for Input (0 inside) and the slice of Out@GRAD,
    summed over the broadcast, for ValueTensor."""
    x = ctx.input("Input")
    index = _set_value_slices(ctx, x.shape)
    region = x[index]
    value = ctx.input("ValueTensor")
    if value is None:
        raw = [_scalar_value(s) for s in ctx.attr("values") or []]
        shape = [int(d) for d in ctx.attr("shape")] or [len(raw)]
        value = jnp.asarray(np.asarray(raw).astype(dtypes.to_numpy(x.dtype)).reshape(shape))
    value = value.astype(x.dtype)
    # Paddle broadcasts the value to the region's shape with decrease_axes dropped and a 1 put at
    # each of none_axes (positions in that result), then views it with the region's shape.
    decrease = {int(a) for a in ctx.attr("decrease_axes")}
    none_axes = sorted(int(a) for a in ctx.attr("none_axes"))
    assign_shape, k = [], 0
    for i, d in enumerate(region.shape):
        while k < len(none_axes) and none_axes[k] <= i:
            assign_shape.append(1)
            k += 1
        if i not in decrease:
            assign_shape.append(d)
    assign_shape += [1] * (len(none_axes) - k)
    try:
        value = jnp.broadcast_to(value, tuple(assign_shape))
    except ValueError:
        _fail(ctx, f"the value of shape {list(value.shape)} does not broadcast to the slice {assign_shape}")
    value = value.reshape(region.shape)
    return {"Out": x.at[index].set(value)}


# -- pad3d / pad2d ---------------------------------------------------------------------------------
_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _pad3d_widths(ndim: int, pads, data_format: str):
    """(before, after) per dim of a 5-d X: ``pads`` is [left, right, top, bottom, front, back]."""
    w, h, d = (pads[0], pads[1]), (pads[2], pads[3]), (pads[4], pads[5])
    if data_format == "NCDHW":
        return [(0, 0), (0, 0), d, h, w]
    return [(0, 0), d, h, w, (0, 0)]


def _pad3d_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.check(x.ndim == 5, f"X must be 5-d (N, C, D, H, W or N, D, H, W, C), got {x.shape}")
    fmt = ctx.attr("data_format")
    ctx.check(fmt in ("NCDHW", "NDHWC"), f"data_format must be NCDHW or NDHWC, got {fmt!r}")
    ctx.check(ctx.attr("mode") in _PAD_MODES, f"mode must be one of {sorted(_PAD_MODES)}, got {ctx.attr('mode')!r}")
    if ctx.input("Paddings") is not None:
        spatial = (2, 3, 4) if fmt == "NCDHW" else (1, 2, 3)
        ctx.set_output("Out", tuple(-1 if i in spatial else d for i, d in enumerate(x.shape)), x.dtype, 0)
        return
    pads = list(ctx.attr("paddings"))
    ctx.check(len(pads) == 6, f"paddings needs 6 values [left, right, top, bottom, front, back], got {pads}")
    widths = _pad3d_widths(5, pads, fmt)
    mode = ctx.attr("mode")
    for i, (d, (a, b)) in enumerate(zip(x.shape, widths)):
        if mode == "reflect" and d >= 0:
            ctx.check(a < d and b < d, f"reflect padding ({a}, {b}) must be smaller than dim {i} of size {d}")
        if mode == "circular" and d >= 0:
            ctx.check(a <= d and b <= d, f"circular padding ({a}, {b}) must not exceed dim {i} of size {d}")
    shape = tuple(d + a + b if d >= 0 else -1 for d, (a, b) in zip(x.shape, widths))
    ctx.set_output("Out", shape, x.dtype, 0)


@op("pad3d", inputs="X Paddings?", outputs="Out",
    attrs={"paddings": Attr("ints", [0, 0, 0, 0, 0, 0]), "mode": "constant", "value": 0.0, "data_format": "NCDHW"},
    infer_shape=_pad3d_shape, no_grad_inputs=["Paddings"])
def pad3d(ctx):
    """A 5-d X padded in its three spatial dims: ``paddings`` = [left, right, top, bottom, front,
    back]; ``mode`` constant (``value``), reflect, replicate or circular."""
    x = ctx.input("X")
    pads = static_ints(ctx, "Paddings", what="paddings")
    pads = list(ctx.attr("paddings") if pads is None else pads)
    widths = _pad3d_widths(x.ndim, pads, ctx.attr("data_format"))
    mode = _PAD_MODES[ctx.attr("mode")]
    if mode == "constant":
        return {"Out": jnp.pad(x, widths, constant_values=jnp.asarray(ctx.attr("value"), x.dtype))}
    return {"Out": jnp.pad(x, widths, mode=mode)}


_PAD2D_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge"}


def _pad2d_widths(x_ndim: int, pads, fmt: str):
    top, bottom, left, right = (int(p) for p in pads)
    if fmt == "NHWC":
        return [(0, 0), (top, bottom), (left, right), (0, 0)]
    return [(0, 0), (0, 0), (top, bottom), (left, right)]


def _pad2d_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.check(x.ndim == 4, f"X must be 4-D, got {x.shape}")
    ctx.check(ctx.attr("mode") in _PAD2D_MODES, f"mode must be one of {list(_PAD2D_MODES)}, got {ctx.attr('mode')!r}")
    if ctx.input("Paddings") is not None:
        shape = list(x.shape)
        for a in ((1, 2) if ctx.attr("data_format") == "NHWC" else (2, 3)):
            shape[a] = -1
        ctx.set_output("Out", shape, x.dtype, 0)
        return
    pads = list(ctx.attr("paddings"))
    ctx.check(len(pads) == 4, f"paddings needs [top, bottom, left, right], got {pads}")
    widths = _pad2d_widths(x.ndim, pads, ctx.attr("data_format"))
    ctx.set_output("Out", tuple(d + a + b if d >= 0 else -1 for d, (a, b) in zip(x.shape, widths)), x.dtype, 0)


@op("pad2d", inputs="X Paddings?", outputs="Out",
    attrs={"paddings": Attr("ints", [0, 0, 0, 0]), "pad_value": 0.0, "mode": "constant", "data_format": "NCHW"},
    infer_shape=_pad2d_shape, no_grad_inputs=["Paddings"])
def pad2d(ctx):
    """A 4-D X padded by ``paddings`` = [top, bottom, left, right]: ``mode`` constant
    (``pad_value``), reflect or edge."""
    x = ctx.input("X")
    pads = static_ints(ctx, "Paddings", what="paddings")
    widths = _pad2d_widths(x.ndim, pads if pads is not None else ctx.attr("paddings"), ctx.attr("data_format"))
    mode = _PAD2D_MODES[ctx.attr("mode")]
    if mode == "constant":
        return {"Out": jnp.pad(x, widths, constant_values=jnp.asarray(ctx.attr("pad_value"), x.dtype))}
    return {"Out": jnp.pad(x, widths, mode=mode)}


def _pad_constant_like_shape(ctx: InferShapeContext) -> None:
    x, y = ctx.input("X"), ctx.input("Y")
    ctx.check(x.ndim == y.ndim and all(a < 0 or b < 0 or a >= b for a, b in zip(x.shape, y.shape)),
              f"pad_constant_like needs Y {y.shape} no larger than X {x.shape} in every dim")
    ctx.set_output("Out", x.shape, y.dtype, 0)


# Fluid 1.x's op (Paddle 2.6 no longer registers it).
@op("pad_constant_like", inputs="X Y", outputs="Out", attrs={"pad_value": 0.0},
    infer_shape=_pad_constant_like_shape, no_grad_inputs=["X"])
def pad_constant_like(ctx):
    """Y padded at the end of every dim with ``pad_value`` to X's shape (X gives only the shape)."""
    x, y = ctx.input("X"), ctx.input("Y")
    widths = [(0, a - b) for a, b in zip(x.shape, y.shape)]
    return {"Out": jnp.pad(y, widths, constant_values=jnp.asarray(ctx.attr("pad_value"), y.dtype))}


def _drops_the_rows(op_) -> bool:
    """Whether a ``slice`` takes one row of the rows' dim away (``decrease_axis`` holds 0) of a value
    whose row count may be data: then the step checks that row exists."""
    return 0 in [int(a) for a in op_.attrs.get("decrease_axis", ()) or ()] and may_be_counted(op_, "Input")


bound_checked("slice", _drops_the_rows)

