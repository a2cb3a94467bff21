"""Changing a tensor's shape or the order of its elements: reshape2/reshape, transpose2/transpose,
flatten_contiguous_range/flatten2, squeeze2/unsqueeze2, expand_v2/expand/expand_as_v2, tile,
repeat_interleave, flip, roll, the channel shuffles (channel_shuffle, shuffle_channel) and TSM's temporal_shift.

``reshape``, ``transpose``, ``flatten2``, ``expand`` and ``shuffle_channel`` are Fluid 1.x's ops,
which Paddle 2.6.2 still runs (models saved in Fluid's directory layout use them). Attributes
given as tensors (``Shape``/``ShapeTensor``, ``expand_shapes_tensor``, ...) are read when their
values are concrete (``_tensor_attrs.py``); where the program declares the output's shape,
``reshape2`` and ``expand_v2`` fall back to it.

Paddle's ``XShape`` outputs (``[0] + X.shape``) only carry X's shape to the grad op; here they
are zero-size arrays of that shape and never receive a gradient.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...ir.errors import OpRuntimeError
from ...ir.registry import Attr, declare_counts, op
from ...ir.shape import InferShapeContext, same_as
from ..checks import bound_checked, check_count, may_be_counted
from ._counts import count_of, counted, given, is_counted
from ._errors import _fail, _runtime_fail
from ._shapes import _norm_axis, prod
from ._tensor_attrs import static_ints


XSHAPE = ["XShape"]


def _declared_shape(ctx, slot: str = "Out") -> tuple[int, ...] | None:
    var = ctx.out_var(slot)
    return tuple(var.shape) if var is not None else None


def _set_xshape(ctx: InferShapeContext, x) -> None:
    ctx.set_output("XShape", (0, *x.shape), x.dtype, 0)


def _xshape(x) -> jax.Array:
    return jnp.zeros((0, *x.shape), x.dtype)


def _tensor_dims(ctx: InferShapeContext, rank_slot: str, list_slot: str | None = None) -> int | None:
    """How many values a tensor-form attribute holds (its length), if the build time knows."""
    t = ctx.input(rank_slot) if rank_slot else None
    if t is not None:
        return t.shape[0] if t.ndim == 1 and t.shape[0] >= 0 else (1 if t.ndim == 0 else None)
    if list_slot:
        items = ctx.inputs(list_slot)
        if items:
            return len(items)
    return None


# -- reshape2 / reshape ----------------------------------------------------------------------------
def reshape_target(in_shape, shape, fail) -> tuple[int, ...]:
    """Paddle's reshape rule: ``0`` copies X's dim at that index, one ``-1`` is inferred.

    ``in_shape`` may hold -1 (UNK); the result then has -1 where the size cannot be known. Dims
    copied by ``0`` cancel out, so ``[0, -1]`` of ``(-1, 3, 4)`` gives ``(-1, 12)``.
    """
    shape = [int(s) for s in shape]
    if shape.count(-1) > 1:
        fail(f"shape {shape} has more than one -1")
    out: list[int] = []
    copied: set[int] = set()
    for i, s in enumerate(shape):
        if s == 0:
            if i >= len(in_shape):
                fail(f"shape {shape}: 0 at index {i} copies a dim X does not have (X has rank {len(in_shape)})")
            out.append(in_shape[i])
            copied.add(i)
        elif s < -1:
            fail(f"shape {shape} holds {s}; dims must be positive, 0 (copy) or -1 (infer)")
        else:
            out.append(s)
    rest_in = [d for i, d in enumerate(in_shape) if i not in copied]
    in_known = all(d >= 0 for d in rest_in)
    in_size = prod(rest_in) if in_known else -1
    if -1 in shape:
        k = shape.index(-1)
        others = [d for i, d in enumerate(out) if i != k and i not in copied]
        cap = prod(others)
        if in_size >= 0 and cap >= 0:
            if cap == 0 or in_size % cap:
                fail(f"cannot reshape X {tuple(in_shape)} to {shape}: {in_size} elements do not divide "
                     f"into parts of {cap}")
            out[k] = in_size // cap
        else:
            out[k] = -1
    else:
        # Dims copied by 0 are on both sides: compare the rest.
        rest_out = [d for i, d in enumerate(out) if i not in copied]
        size_in, size_out = prod(rest_in), prod(rest_out)
        if size_in >= 0 and size_out >= 0 and size_in != size_out:
            fail(f"cannot reshape X {tuple(in_shape)} ({prod(in_shape) if prod(in_shape) >= 0 else '?'} "
                 f"elements) to {shape}: the sizes differ")
    return tuple(out)


def rows_kept(in_shape, out_shape, copies_rows: bool = False) -> bool:
    """Whether a reshape of ``in_shape`` to ``out_shape`` keeps X's rows as Out's rows (Paddle's
    reshape/flatten share X's LoD then: ``x_dims[0] == out_dims[0]``). ``copies_rows``: the target
    shape's first entry is 0 (copy X's dim). With an UNK first dim the rows are kept when the other
    dims hold as many elements on both sides (both known); Paddle's build time compares -1 with -1
    and marks Out a LoD tensor even when the run-time rows differ, where it then shares no LoD."""
    if not in_shape or not out_shape:
        return False
    if copies_rows:
        return True
    if in_shape[0] >= 0 and out_shape[0] >= 0:
        return in_shape[0] == out_shape[0]
    tail_in, tail_out = in_shape[1:], out_shape[1:]
    return (all(d >= 0 for d in tail_in) and all(d >= 0 for d in tail_out)
            and prod(tail_in) == prod(tail_out))


def _reshape2_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    if ctx.input("Shape") is not None or ctx.inputs("ShapeTensor"):
        n = _tensor_dims(ctx, "Shape", "ShapeTensor")
        ctx.check(n is not None, "the length of the Shape tensor must be known at build time")
        declared = ctx.output("Out").shape
        shape = declared if len(declared) == n else (-1,) * n
    else:
        shape = reshape_target(x.shape, ctx.attr("shape"), ctx.fail)
    attr = ctx.attr("shape") if ctx.input("Shape") is None and not ctx.inputs("ShapeTensor") else None
    lod = x.lod_level if rows_kept(x.shape, shape, bool(attr) and int(attr[0]) == 0) else 0
    ctx.set_output("Out", shape, x.dtype, lod)
    _set_xshape(ctx, x)


@op("reshape2", inputs="X Shape? ShapeTensor*?", outputs="Out XShape",
    attrs={"shape": Attr("ints", []), "use_quantizer": False},
    infer_shape=_reshape2_shape, no_grad_inputs=["Shape", "ShapeTensor"], no_grad_outputs=XSHAPE)
def reshape2(ctx):
    """X with a new shape: ``0`` in ``shape`` copies X's dim, one ``-1`` is inferred.

    A ``Shape``/``ShapeTensor`` input wins over the attribute; its values must be concrete, or the
    program must declare Out's shape (at most one unknown dim).
    """
    x = ctx.input("X")

    fail = _runtime_fail("reshape2")
    try:
        tensor_shape = static_ints(ctx, "Shape", "ShapeTensor", what="the target shape")
    except OpRuntimeError:
        declared = _declared_shape(ctx)
        if declared is None or sum(d < 0 for d in declared) > 1:
            raise
        tensor_shape = list(declared)
    shape = counted_target(x, tensor_shape if tensor_shape is not None else ctx.attr("shape"), fail)
    if is_counted(x):
        return {"Out": reshape_counted(x, shape[1:], ctx), "XShape": _xshape(x.data)}
    return {"Out": x.reshape(shape), "XShape": _xshape(x)}


def counted_target(x, shape, fail) -> tuple[int, ...]:
    """:func:`reshape_target` for ``x``; for a counted ``x`` with ``shape[0] == -1`` the rows are its
    real elements re-cut (:func:`reshape_counted`), so only the other dims are resolved (the padded
    capacity need not divide into them; the real count is checked inside the step)."""
    shape = [int(s) for s in shape]
    if is_counted(x) and shape and shape[0] == -1 and -1 not in shape[1:]:
        if any(s == 0 and i >= len(x.shape) for i, s in enumerate(shape)):
            fail(f"shape {shape}: a 0 copies a dim X does not have (X has rank {len(x.shape)})")
        if any(s < -1 for s in shape):
            fail(f"shape {shape} holds a dim below -1; dims must be positive, 0 (copy) or -1 (infer)")
        return (-1,) + tuple(x.shape[i] if s == 0 else s for i, s in enumerate(shape) if i)
    return reshape_target(x.shape, shape, fail)


def reshape_counted(x, tail, ctx=None):
    """A counted value's real elements (row-major, so its padding rows come last) re-cut into rows
    of shape ``tail``: the capacity grows to whole rows, the count is the real elements' rows.
    Paddle refuses a count that leaves a partial row; with ``ctx`` (the op's compute context) the
    step checks that the real elements fill whole rows, a ``BoundExceededError`` naming the op and
    the one that produced the count when they do not (checks.check_count)."""
    data = x.data
    per_in, per_out = prod(data.shape[1:]), prod(tail)
    if ctx is not None and per_out > 1:
        elements = count_of(x) * per_in
        check_count(ctx.checks, ctx.op, ctx.env, ctx.op.inputs["X"][0], elements % per_out == 0, elements,
                    f"reshape to rows of {list(tail)} needs a real element count divisible by {per_out}")
    flat = data.reshape(-1)
    rows = -(-flat.shape[0] // per_out) if per_out else 0
    flat = jnp.concatenate([flat, jnp.zeros((rows * per_out - flat.shape[0],), flat.dtype)])
    return counted(flat.reshape((rows,) + tuple(tail)), count_of(x) * per_in // max(per_out, 1))


def _reshape_counts(op, values) -> dict:
    """reshape honours a count when the rows stay the first dim: ``shape[0]`` is 0 (copied) or -1
    (the real elements re-cut, see :func:`reshape_counted`), the other dims fixed."""
    if given(values, "Shape") or given(values, "ShapeTensor"):
        return {}
    shape = [int(d) for d in op.attrs.get("shape") or []]
    return {"X": "count"} if shape and shape[0] in (0, -1) and -1 not in shape[1:] else {}


declare_counts("reshape2", _reshape_counts)
bound_checked("reshape2", lambda op_: bool(_reshape_counts(op_, {})) and may_be_counted(op_, "X"))


def _reshape_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    if ctx.input("Shape") is not None or ctx.inputs("ShapeTensor"):
        n = ctx.input("Shape").shape[0] if ctx.input("Shape") is not None else len(ctx.inputs("ShapeTensor"))
        ctx.set_output("Out", (-1,) * max(n, 0), x.dtype, 0)
        return
    attr = ctx.attr("shape")
    out = reshape_target(x.shape, attr, ctx.fail)
    ctx.set_output("Out", out, x.dtype, x.lod_level if rows_kept(x.shape, out, bool(attr) and int(attr[0]) == 0) else 0)


@op("reshape", inputs="X Shape? ShapeTensor*?", outputs="Out", attrs={"shape": Attr("ints", [])},
    infer_shape=_reshape_shape, no_grad_inputs=["Shape", "ShapeTensor"])
def reshape(ctx):
    """Fluid 1.x's reshape (reshape2 without XShape): ``0`` copies X's dim, one ``-1`` is inferred;
    a Shape/ShapeTensor input, when its values are known at lowering, wins over the attribute."""
    x = ctx.input("X")
    shape = static_ints(ctx, "Shape", "ShapeTensor", what="the target shape")
    shape = counted_target(x, shape if shape is not None else ctx.attr("shape"), lambda m: _fail(ctx, m))
    if is_counted(x):
        return {"Out": reshape_counted(x, shape[1:], ctx)}
    return {"Out": x.reshape(shape)}


declare_counts("reshape", _reshape_counts)
bound_checked("reshape", lambda op_: bool(_reshape_counts(op_, {})) and may_be_counted(op_, "X"))


# -- transpose2 / transpose ------------------------------------------------------------------------
def _perm(ctx, rank: int, fail) -> list[int]:
    axis = [_norm_axis(int(a), rank) for a in ctx.attr("axis")]
    if sorted(axis) != list(range(rank)):
        fail(f"axis {list(ctx.attr('axis'))} is not a permutation of the {rank} dims of X")
    return axis


def _transpose2_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    perm = _perm(ctx, x.ndim, ctx.fail)
    ctx.set_output("Out", tuple(x.shape[a] for a in perm), x.dtype, 0)
    _set_xshape(ctx, x)


@op("transpose2", inputs="X", outputs="Out XShape", attrs={"axis": Attr("ints", [])},
    infer_shape=_transpose2_shape, no_grad_outputs=XSHAPE)
def transpose2(ctx):
    """X with its dims permuted: ``Out.shape[i] = X.shape[axis[i]]``."""
    x = ctx.input("X")
    perm = _perm(ctx, x.ndim, _runtime_fail("transpose2"))
    return {"Out": jnp.transpose(x, perm), "XShape": _xshape(x)}


def _transpose_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    axis = [int(a) % max(x.ndim, 1) for a in ctx.attr("axis")]
    ctx.check(sorted(axis) == list(range(x.ndim)), f"axis {ctx.attr('axis')} is not a permutation of X's {x.ndim} dims")
    ctx.set_output("Out", tuple(x.shape[a] for a in axis), x.dtype, 0)


# data_format is one of Paddle's "extra" attributes, but its transpose_grad reads it.
@op("transpose", inputs="X", outputs="Out", attrs={"axis": Attr("ints", []), "data_format": "AnyLayout"},
    infer_shape=_transpose_shape)
def transpose(ctx):
    """Fluid 1.x's transpose (transpose2 without XShape): X's dims permuted by ``axis``."""
    x = ctx.input("X")
    return {"Out": jnp.transpose(x, [int(a) % x.ndim for a in ctx.attr("axis")])}


# -- flatten_contiguous_range / flatten2 -----------------------------------------------------------
def _flatten_target(shape, start: int, stop: int, fail) -> tuple[int, ...]:
    rank = len(shape)
    if rank == 0:
        return (1,)
    s, e = _norm_axis(start, rank), _norm_axis(stop, rank)
    if not (0 <= s < rank and 0 <= e < rank):
        fail(f"start_axis={start} / stop_axis={stop} are out of range for rank {rank}")
    if s > e:
        fail(f"start_axis ({start}) must not come after stop_axis ({stop})")
    return tuple(shape[:s]) + (prod(shape[s:e + 1]),) + tuple(shape[e + 1:])


def _flatten_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    out = _flatten_target(x.shape, ctx.attr("start_axis"), ctx.attr("stop_axis"), ctx.fail)
    ctx.set_output("Out", out, x.dtype, x.lod_level if ctx.attr("start_axis") not in (0, -x.ndim) else 0)
    _set_xshape(ctx, x)


@op("flatten_contiguous_range", inputs="X", outputs="Out XShape",
    attrs={"start_axis": 1, "stop_axis": 1}, infer_shape=_flatten_shape, no_grad_outputs=XSHAPE)
def flatten_contiguous_range(ctx):
    """X with dims ``start_axis`` … ``stop_axis`` (inclusive) merged into one (a 0-d X gives [1])."""
    x = ctx.input("X")
    out = _flatten_target(x.shape, ctx.attr("start_axis"), ctx.attr("stop_axis"),
                          _runtime_fail("flatten_contiguous_range"))
    if is_counted(x):              # start_axis 0: the rows merge with the next dims
        return {"Out": reshape_counted(x, out[1:]), "XShape": _xshape(x.data)}
    return {"Out": x.reshape(out), "XShape": _xshape(x)}


def _flatten_counts(op, values) -> dict:
    xs = values.get("X") or [None]
    rank = len(getattr(xs[0], "shape", ()))
    return {"X": "count" if rank and int(op.attrs.get("start_axis", 1)) % rank == 0 else "rows"} if rank else {}


declare_counts("flatten_contiguous_range", _flatten_counts)


def _flatten_dims(shape, axis: int):
    return (prod(shape[:axis]) if axis else 1, prod(shape[axis:]))


def _flatten2_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    axis = ctx.attr("axis")
    ctx.check(0 <= axis <= x.ndim, f"axis {axis} must lie in [0, {x.ndim}]")
    out = _flatten_dims(x.shape, axis)
    # Paddle's Flatten2Op shares X's LoD when Out's first dim is X's (the rows stay the rows)
    keep = axis >= 1 and all(d >= 0 for d in x.shape[1:axis]) and prod(x.shape[1:axis]) == 1
    ctx.set_output("Out", out, x.dtype, x.lod_level if keep else 0)
    ctx.set_output("XShape", (0, *x.shape), x.dtype, 0)


@op("flatten2", inputs="X", outputs="Out XShape", attrs={"axis": 1}, infer_shape=_flatten2_shape,
    no_grad_outputs=["XShape"])
def flatten2(ctx):
    """X as a matrix: the dims before ``axis`` make the rows, the rest the columns (Fluid 1.x's
    flatten; XShape carries X's shape, as in reshape2, and Paddle's flatten2_grad needs it)."""
    x = ctx.input("X")
    axis = int(ctx.attr("axis"))
    return {"Out": x.reshape(_flatten_dims(x.shape, axis)), "XShape": jnp.zeros((0, *x.shape), x.dtype)}


# -- squeeze2 / unsqueeze2 -------------------------------------------------------------------------
def squeeze_dims(shape, axes, fail) -> list[int]:
    """The dims Paddle's squeeze removes: all size-1 dims when ``axes`` is empty, else those of
    ``axes`` that have size 1 (others are kept silently). At build time an UNK dim named in
    ``axes`` is taken to be 1 (the user asked to squeeze it); with empty ``axes`` UNK dims stay.
    """
    rank = len(shape)
    if not axes:
        return [i for i, d in enumerate(shape) if d == 1]
    out = set()
    for a in axes:
        i = _norm_axis(int(a), rank)
        if not 0 <= i < max(rank, 1):
            fail(f"axes {list(axes)}: {a} is out of range for rank {rank}")
        if rank and shape[i] in (1, -1):
            out.add(i)
    return sorted(out)


def _squeeze2_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    drop = squeeze_dims(x.shape, ctx.attr("axes"), ctx.fail)
    # Paddle's Squeeze2Op shares X's LoD when the first dim stays (the rows are the same rows)
    lod = x.lod_level if x.ndim and 0 not in drop else 0
    ctx.set_output("Out", tuple(d for i, d in enumerate(x.shape) if i not in drop), x.dtype, lod)
    _set_xshape(ctx, x)


@op("squeeze2", inputs="X", outputs="Out XShape", attrs={"axes": Attr("ints", [])},
    infer_shape=_squeeze2_shape, no_grad_outputs=XSHAPE)
def squeeze2(ctx):
    """X without size-1 dims: all of them when ``axes`` is empty, else those listed (a listed dim
    whose size is not 1 is kept, as Paddle does)."""
    x = ctx.input("X")
    drop = [i for i in squeeze_dims(x.shape, ctx.attr("axes"), lambda m: None) if x.shape[i] == 1]
    return {"Out": jnp.squeeze(x, tuple(drop)) if drop else x, "XShape": _xshape(x)}


def unsqueeze_target(shape, axes, fail) -> tuple[int, ...]:
    """Paddle's unsqueeze: axes are inserted one after another, each relative to the rank so far
    (a negative one counts from the end of that rank + 1)."""
    rank = len(shape)
    out_rank = rank + len(axes)
    marks = [0] * (out_rank + 1)
    cur = rank
    for a in axes:
        a = int(a)
        pos = a + cur + 1 if a < 0 else a
        if not 0 <= pos <= cur:
            fail(f"axes {list(axes)}: {a} is out of range while inserting into rank {cur}")
        for i in range(cur, pos - 1, -1):
            if marks[i] == 1:
                marks[i + 1], marks[i] = 1, 0
        marks[pos] = 1
        cur += 1
    dims = iter(shape)
    return tuple(1 if marks[i] else next(dims) for i in range(out_rank))


def _unsqueeze2_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    if ctx.input("AxesTensor") is not None or ctx.inputs("AxesTensorList"):
        n = _tensor_dims(ctx, "AxesTensor", "AxesTensorList")
        ctx.check(n is not None, "the length of AxesTensor must be known at build time")
        out = (-1,) * (x.ndim + n)
    else:
        out = unsqueeze_target(x.shape, ctx.attr("axes"), ctx.fail)
    # Paddle's Unsqueeze2Op shares X's LoD when the first dim stays the rows' dim
    tensor_axes = ctx.input("AxesTensor") is not None or ctx.inputs("AxesTensorList")
    marked = () if tensor_axes or not x.ndim else unsqueeze_target(tuple(range(2, 2 + x.ndim)), ctx.attr("axes"),
                                                                     ctx.fail)
    lod = x.lod_level if marked[:1] == (2,) else 0
    ctx.set_output("Out", out, x.dtype, lod)
    _set_xshape(ctx, x)


@op("unsqueeze2", inputs="X AxesTensor? AxesTensorList*?", outputs="Out XShape",
    attrs={"axes": Attr("ints", [])}, infer_shape=_unsqueeze2_shape,
    no_grad_inputs=["AxesTensor", "AxesTensorList"], no_grad_outputs=XSHAPE)
def unsqueeze2(ctx):
    """X with size-1 dims inserted at ``axes`` (each relative to the rank reached so far)."""
    x = ctx.input("X")
    axes = static_ints(ctx, "AxesTensor", "AxesTensorList", what="axes")
    axes = ctx.attr("axes") if axes is None else axes

    fail = _runtime_fail("unsqueeze2")

    return {"Out": x.reshape(unsqueeze_target(x.shape, axes, fail)), "XShape": _xshape(x)}


# -- expand_v2 / expand / expand_as_v2 / tile / repeat_interleave ----------------------------------
def expand_target(in_shape, shape, fail) -> tuple[int, ...]:
    """``expand_v2``: X's dims align with the trailing ones of ``shape``; -1 keeps X's dim."""
    shape = [int(s) for s in shape]
    if len(shape) < len(in_shape):
        fail(f"shape {shape} has fewer dims than X {tuple(in_shape)}")
    lead = len(shape) - len(in_shape)
    out = []
    for i, s in enumerate(shape):
        if i < lead:
            if s <= 0:
                fail(f"shape {shape}: the new leading dim {i} must be positive, got {s}")
            out.append(s)
            continue
        d = in_shape[i - lead]
        if s == -1:
            out.append(d)
        elif s <= 0:
            fail(f"shape {shape} holds {s}; dims must be positive or -1 (keep)")
        else:
            if d >= 0 and d != 1 and d != s:
                fail(f"X's dim {i - lead} has size {d}; it can only expand to {shape} if it is 1 or equal")
            out.append(s)
    return tuple(out)


def _expand_v2_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    if ctx.input("Shape") is not None or ctx.inputs("expand_shapes_tensor"):
        n = _tensor_dims(ctx, "Shape", "expand_shapes_tensor")
        ctx.check(n is not None, "the length of the Shape tensor must be known at build time")
        declared = ctx.output("Out").shape
        ctx.set_output("Out", declared if len(declared) == n else (-1,) * n, x.dtype, 0)
        return
    ctx.set_output("Out", expand_target(x.shape, ctx.attr("shape"), ctx.fail), x.dtype, 0)


@op("expand_v2", inputs="X Shape? expand_shapes_tensor*?", outputs="Out", attrs={"shape": Attr("ints", [])},
    infer_shape=_expand_v2_shape, no_grad_inputs=["Shape", "expand_shapes_tensor"])
def expand_v2(ctx):
    """X broadcast to ``shape`` (-1 keeps X's dim; new dims may be added in front)."""
    x = ctx.input("X")

    fail = _runtime_fail("expand_v2")

    try:
        shape = static_ints(ctx, "Shape", "expand_shapes_tensor", what="the target shape")
    except OpRuntimeError:
        declared = _declared_shape(ctx)
        if declared is None or len(declared) < x.ndim:
            raise
        lead = len(declared) - x.ndim
        if any(d < 0 for d in declared[:lead]):
            raise
        shape = list(declared)  # -1 keeps X's dim
    shape = ctx.attr("shape") if shape is None else shape
    return {"Out": jnp.broadcast_to(x, expand_target(x.shape, shape, fail))}


def _expand_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    if ctx.input("ExpandTimes") is not None or ctx.inputs("expand_times_tensor"):
        # Entries known in the attribute (Fluid writes -1 where a tensor gives the count) keep theirs.
        known = [int(t) for t in ctx.attr("expand_times")] if ctx.inputs("expand_times_tensor") else []
        known = known if len(known) == x.ndim else [-1] * x.ndim
        ctx.set_output("Out", tuple(d * t if d >= 0 and t >= 0 else -1 for d, t in zip(x.shape, known)),
                       x.dtype, x.lod_level)
        return
    times = [int(t) for t in ctx.attr("expand_times")]
    ctx.check(len(times) == x.ndim, f"expand_times {times} needs one value per dim of X {x.shape}")
    ctx.set_output("Out", tuple(d * t if d >= 0 else -1 for d, t in zip(x.shape, times)), x.dtype, x.lod_level)


@op("expand", inputs="X ExpandTimes? expand_times_tensor*?", outputs="Out", attrs={"expand_times": Attr("ints", [])},
    infer_shape=_expand_shape, no_grad_inputs=["ExpandTimes", "expand_times_tensor"])
def expand(ctx):
    """Fluid 1.x's expand: X tiled ``expand_times[i]`` times along each dim (tile with one value
    per dim)."""
    x = ctx.input("X")
    times = static_ints(ctx, "ExpandTimes", "expand_times_tensor", what="expand_times")
    times = [int(t) for t in (times if times is not None else ctx.attr("expand_times"))]
    if len(times) != len(x.shape):
        _fail(ctx, f"expand_times {times} needs one value per dim of X {list(x.shape)}")
    if is_counted(x):              # the real rows repeated, back to back; then the padding
        data, n = x.data, count_of(x)
        rows = jnp.arange(data.shape[0] * times[0]) % jnp.maximum(n, 1)
        return {"Out": counted(jnp.tile(data[rows], [1] + times[1:]), n * times[0])}
    return {"Out": jnp.tile(x, times)}


declare_counts("expand", lambda op, values: {} if given(values, "ExpandTimes") or given(values, "expand_times_tensor")
               else {"X": "count"})


def _expand_as_target(ctx, x_shape, y_shape) -> list[int]:
    target = list(y_shape) if y_shape is not None else [int(d) for d in ctx.attr("target_shape")]
    if len(target) < len(x_shape):
        raise ValueError(f"the target shape {target} has fewer dims than X {list(x_shape)}")
    offset = len(target) - len(x_shape)
    # A -1 in the attribute keeps X's dim there (Paddle's expand rule).
    return [x_shape[i - offset] if d == -1 and i >= offset else d for i, d in enumerate(target)]


def _expand_as_shape(ctx: InferShapeContext) -> None:
    x, y = ctx.input("X"), ctx.input("Y")
    try:
        target = _expand_as_target(ctx, x.shape, y.shape if y is not None else None)
    except ValueError as e:
        ctx.fail(str(e))
    offset = len(target) - x.ndim
    for i, d in enumerate(x.shape):
        t = target[i + offset]
        ctx.check(d < 0 or t < 0 or d == t or d == 1, f"X {x.shape} cannot expand to {target}")
    ctx.set_output("Out", target, x.dtype, 0)


@op("expand_as_v2", inputs="X Y?", outputs="Out", attrs={"target_shape": Attr("ints", [])},
    infer_shape=_expand_as_shape, no_grad_inputs=["Y"])
def expand_as_v2(ctx):
    """X broadcast to Y's shape (or to ``target_shape`` when Y is not given); dims of X that are 1
    repeat. The gradient sums over the repeats."""
    x, y = ctx.input("X"), ctx.input("Y")
    try:
        target = _expand_as_target(ctx, x.shape, y.shape if y is not None else None)
    except ValueError as e:
        _fail(ctx, str(e))
    return {"Out": jnp.broadcast_to(x, tuple(target))}


def _tile_target(in_shape, repeats, fail):
    repeats = [int(r) for r in repeats]
    if any(r <= 0 for r in repeats):
        fail(f"repeat_times {repeats} must be positive")
    n = max(len(repeats), len(in_shape))
    repeats = [1] * (n - len(repeats)) + repeats
    shape = [1] * (n - len(in_shape)) + list(in_shape)
    return tuple(d * r if d >= 0 else -1 for d, r in zip(shape, repeats)), repeats


def _tile_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    if ctx.input("RepeatTimes") is not None or ctx.inputs("repeat_times_tensor"):
        n = _tensor_dims(ctx, "RepeatTimes", "repeat_times_tensor")
        ctx.check(n is not None, "the length of RepeatTimes must be known at build time")
        ctx.set_output("Out", (-1,) * max(n, x.ndim), x.dtype, 0)
        return
    ctx.set_output("Out", _tile_target(x.shape, ctx.attr("repeat_times"), ctx.fail)[0], x.dtype, 0)


@op("tile", inputs="X RepeatTimes? repeat_times_tensor*?", outputs="Out", attrs={"repeat_times": Attr("ints", [])},
    infer_shape=_tile_shape, no_grad_inputs=["RepeatTimes", "repeat_times_tensor"])
def tile(ctx):
    """X repeated ``repeat_times[i]`` times along each dim (shorter lists are padded with 1 in
    front; a longer list adds dims to X in front)."""
    x = ctx.input("X")
    reps = static_ints(ctx, "RepeatTimes", "repeat_times_tensor", what="repeat_times")
    reps = ctx.attr("repeat_times") if reps is None else reps

    fail = _runtime_fail("tile")

    _, reps = _tile_target(x.shape, reps, fail)
    return {"Out": jnp.tile(x, reps)}


def _repeat_count(ctx, x, axis: int):
    tensor = ctx.input("RepeatsTensor")
    if tensor is None:
        return int(ctx.attr("Repeats"))
    try:
        repeats = static_ints(ctx, "RepeatsTensor", what="RepeatsTensor")
    except OpRuntimeError:
        var = ctx.out_var("Out")
        if var is None or var.shape[axis] < 0:
            raise
        # The program declares the output's length: repeats are data, the total is static.
        return tensor.reshape(-1), int(var.shape[axis])
    return (repeats[0] if len(repeats) == 1 else np.asarray(repeats)), None


def _repeat_interleave_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    dim = ctx.attr("dim")
    ctx.check(-x.ndim <= dim < x.ndim, f"dim {dim} is out of range for a rank-{x.ndim} X")
    dim %= x.ndim
    shape = list(x.shape)
    if ctx.input("RepeatsTensor") is not None:
        shape[dim] = -1
    elif shape[dim] >= 0:
        shape[dim] *= int(ctx.attr("Repeats"))
    ctx.set_output("Out", shape, x.dtype, 0)


@op("repeat_interleave", inputs="X RepeatsTensor?", outputs="Out", attrs={"Repeats": 0, "dim": 0},
    infer_shape=_repeat_interleave_shape, no_grad_inputs=["RepeatsTensor"])
def repeat_interleave(ctx):
    """Each slice of X along ``dim`` repeated ``Repeats`` times in place (or RepeatsTensor[i] times
    for slice i: the total must be known when the block is lowered)."""
    x = ctx.input("X")
    dim = int(ctx.attr("dim")) % x.ndim
    count = _repeat_count(ctx, x, dim)
    if isinstance(count, int):
        return {"Out": jnp.repeat(x, count, axis=dim)}
    repeats, total = count
    return {"Out": jnp.repeat(x, repeats, axis=dim, total_repeat_length=total)}


# -- flip / roll -----------------------------------------------------------------------------------
def _flip_axes(ctx, ndim: int) -> list[int]:
    axes = [int(a) for a in ctx.attr("axis")]
    if any(not -max(ndim, 1) <= a < max(ndim, 1) for a in axes):
        _fail(ctx, f"axis {axes} is out of range for a rank-{ndim} input")
    return [a % ndim for a in axes] if ndim else []


@op("flip", inputs="X", outputs="Out", attrs={"axis": Attr("ints", [])}, infer_shape=same_as("X"))
def flip(ctx):
    """X with the order of its elements reversed along each of ``axis``."""
    x = ctx.input("X")
    return {"Out": jnp.flip(x, axis=tuple(_flip_axes(ctx, x.ndim))) if x.ndim else x}


@op("roll", inputs="X ShiftsTensor?", outputs="Out", attrs={"shifts": Attr("longs", []), "axis": Attr("longs", [])},
    infer_shape=same_as("X"), no_grad_inputs=["ShiftsTensor"])
def roll(ctx):
    """X rolled by ``shifts`` along ``axis`` (elements past the end come back at the start); with no
    axis, X is rolled as a flat array. A ``ShiftsTensor`` replaces ``shifts`` (its values may be
    known only at run time: the shape does not depend on them)."""
    x = ctx.input("X")
    tensor = ctx.input("ShiftsTensor")
    axis = [int(a) for a in ctx.attr("axis")]
    if tensor is not None:
        shifts = tensor.reshape(-1)
        count = shifts.shape[0]
    else:
        shifts = [int(s) for s in ctx.attr("shifts")]
        count = len(shifts)
    if not axis:
        if count != 1:
            _fail(ctx, f"without axis, shifts must hold one value, got {count}")
        return {"Out": jnp.roll(x.reshape(-1), shifts[0]).reshape(x.shape)}
    if count != len(axis):
        _fail(ctx, f"shifts ({count} values) and axis {axis} must have the same length")
    out = x
    for i, a in enumerate(axis):
        out = jnp.roll(out, shifts[i], axis=a % x.ndim)
    return {"Out": out}


# -- channel shuffles ------------------------------------------------------------------------------
def _channel_shuffle_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    g = ctx.attr("groups")
    ctx.check(x.ndim == 4, f"X must be 4-D, got {x.shape}")
    c = x.shape[3] if ctx.attr("data_format") == "NHWC" else x.shape[1]
    ctx.check(g > 0 and (c < 0 or c % g == 0), f"X's {c} channels do not split into groups={g}")
    ctx.set_output("Out", x.shape, x.dtype, 0)


@op("channel_shuffle", inputs="X", outputs="Out", attrs={"groups": 1, "data_format": "NCHW"},
    infer_shape=_channel_shuffle_shape)
def channel_shuffle(ctx):
    """Channels viewed as [groups, C / groups] and transposed (ShuffleNet's shuffle)."""
    x = ctx.input("X")
    g = int(ctx.attr("groups"))
    if ctx.attr("data_format") == "NHWC":
        n, h, w, c = x.shape
        return {"Out": x.reshape(n, h, w, g, c // g).transpose(0, 1, 2, 4, 3).reshape(n, h, w, c)}
    n, c, h, w = x.shape
    return {"Out": x.reshape(n, g, c // g, h, w).transpose(0, 2, 1, 3, 4).reshape(n, c, h, w)}


@op("shuffle_channel", inputs="X", outputs="Out", attrs={"group": 1}, infer_shape=same_as("X"))
def shuffle_channel(ctx):
    """Fluid 1.x's channel shuffle of NCHW X: channels viewed as [group, C / group], transposed."""
    x = ctx.input("X")
    g = int(ctx.attr("group"))
    n, c = x.shape[:2]
    if c % g:
        _fail(ctx, f"X's {c} channels do not split into group={g}")
    return {"Out": x.reshape(n, g, c // g, *x.shape[2:]).swapaxes(1, 2).reshape(x.shape)}


@op("temporal_shift", inputs="X", outputs="Out", attrs={"seg_num": 1, "shift_ratio": 0.25, "data_format": "NCHW"},
    infer_shape=same_as("X"))
def temporal_shift(ctx):
    """TSM's shift of X [N·T, C, H, W] (T = seg_num): the first C·ratio channels take the previous
    frame's values, the next C·ratio the next frame's (zeros past either end), the rest stay."""
    x = ctx.input("X")
    last = ctx.attr("data_format") == "NHWC"
    if last:
        x = jnp.moveaxis(x, -1, 1)
    t = ctx.attr("seg_num")
    nt, c = x.shape[0], x.shape[1]
    v = x.reshape((nt // t, t) + x.shape[1:])
    c1, c2 = int(c * ctx.attr("shift_ratio")), int(c * 2 * ctx.attr("shift_ratio"))
    zero = jnp.zeros_like(v[:, :1])
    prev = jnp.concatenate([zero, v[:, :-1]], axis=1)
    nxt = jnp.concatenate([v[:, 1:], zero], axis=1)
    out = jnp.concatenate([prev[:, :, :c1], nxt[:, :, c1:c2], v[:, :, c2:]], axis=2).reshape(x.shape)
    return {"Out": jnp.moveaxis(out, 1, -1) if last else out}


def _space_to_depth_shape(ctx: InferShapeContext) -> None:
    x, bs = ctx.input("X"), ctx.attr("blocksize")
    ctx.check(x.ndim == 4 and bs > 0, f"space_to_depth needs a 4-D X and blocksize > 0, got {x.shape}, {bs}")
    ctx.check(x.shape[1] < 0 or x.shape[1] % (bs * bs) == 0, f"X's channels {x.shape[1]} must be a multiple of "
                                                             f"blocksize² ({bs * bs})")
    ctx.check(all(d < 0 or d % bs == 0 for d in x.shape[2:]),
              f"X's height and width {x.shape[2:]} must be multiples of blocksize {bs}")
    n, c, h, w = x.shape
    ctx.set_output("Out", (n, c * bs * bs if c >= 0 else -1, h // bs if h >= 0 else -1, w // bs if w >= 0 else -1),
                   x.dtype, 0)


def _space_to_depth_order(c: int, h: int, w: int, bs: int) -> np.ndarray:
    """Fluid's kernel (darknet's reorg): input element (b, k, j, i) of [C, H, W] goes to flat
    position w2 + W*bs*(h2 + H*bs*(k % (C/bs²) + (C/bs²)*b)), with offset = k // (C/bs²),
    w2 = i*bs + offset % bs, h2 = j*bs + offset // bs; the result is read as [C*bs², H/bs, W/bs]
    (per instance, so b = 0 here). Returns, for each output position, the input position."""
    out_c = c // (bs * bs)
    k, j, i = np.meshgrid(np.arange(c), np.arange(h), np.arange(w), indexing="ij")
    offset = k // out_c if out_c else k
    w2, h2 = i * bs + offset % bs, j * bs + offset // bs
    dest = w2 + w * bs * (h2 + h * bs * (k % max(out_c, 1)))
    src = np.empty(c * h * w, np.int64)
    src[dest.reshape(-1)] = np.arange(c * h * w)
    return src


# Fluid 1.x's op (Paddle 2.6 no longer registers it).
@op("space_to_depth", inputs="X", outputs="Out", attrs={"blocksize": 0}, infer_shape=_space_to_depth_shape)
def space_to_depth(ctx):
    """Blocks of blocksize x blocksize pixels moved into channels: [N, C, H, W] ->
    [N, C*bs², H/bs, W/bs], in the element order of Fluid's kernel (see _space_to_depth_order)."""
    x, bs = ctx.input("X"), ctx.attr("blocksize")
    n, c, h, w = x.shape
    src = _space_to_depth_order(c, h, w, bs)
    return {"Out": x.reshape(n, -1)[:, src].reshape(n, c * bs * bs, h // bs, w // bs)}
