"""Tensor manipulation: reshaping, transposing, joining, splitting, slicing, gathering, padding.

Several Paddle ops take a *tensor* form of an attribute (``Shape``/``ShapeTensor`` of
``reshape2``, ``StartsTensor`` of ``slice``, ``AxisTensor`` of ``concat``, ...). Inside
``jax.jit`` those tensors are tracers whose values are unknown while the computation is built,
but XLA needs static shapes. The slots are declared (programs saved by Paddle use them) and the
JAX rules use their values when they are concrete; where the program declares the output's
shape (a program loaded from Paddle does) ``reshape2`` and ``expand_v2`` fall back to it.
Otherwise the rule raises a clear error: use the attribute form.

Paddle's ``XShape`` outputs (``[0] + X.shape``) only carry X's shape to the grad op; here they
are zero-size arrays of that shape and never receive a gradient.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...ir.errors import OpRuntimeError
from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext
from ..checks import IndexInput, index_inputs
from ._shapes import dims_equal, prod

XSHAPE = ["XShape"]


# -- helpers ----------------------------------------------------------------------------------------
def static_ints(ctx, *slots: str, what: str) -> list[int] | None:
    """The integer values of tensor-input slots, when they are concrete (None if all are empty).

    Several slots are concatenated (``ShapeTensor`` then a list slot). Raises a clear error when
    the values are only known at run time (a tracer inside ``jax.jit``).
    """
    values = [v for s in slots for v in ctx.inputs(s)]
    if not values:
        return None
    out: list[int] = []
    for v in values:
        if isinstance(v, jax.core.Tracer):
            raise OpRuntimeError(
                f"op {ctx.opdef.type!r}: {what} given as a tensor is only known at run time, but XLA needs "
                f"static shapes; give it as the attribute instead (the layer functions do for Python ints)")
        out.extend(int(i) for i in np.asarray(v).reshape(-1))
    return out


def _declared_shape(ctx, slot: str = "Out") -> tuple[int, ...] | None:
    var = ctx.out_var(slot)
    return tuple(var.shape) if var is not None else None


def _runtime_fail(op_type: str):
    """A ``fail(message)`` for JAX rules: raises :class:`OpRuntimeError` naming the op."""

    def fail(message: str):
        raise OpRuntimeError(f"op {op_type!r}: {message}")

    return fail


def _norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


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


# -- reshape2 ----------------------------------------------------------------------------------------
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


def _reshape2_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    if ctx.input("Shape") is not None or ctx.inputs("ShapeTensor"):
        n = _tensor_dims(ctx, "Shape", "ShapeTensor")
        ctx.check(n is not None, "the length of the Shape tensor must be known at build time")
        declared = ctx.output("Out").shape
        shape = declared if len(declared) == n else (-1,) * n
    else:
        shape = reshape_target(x.shape, ctx.attr("shape"), ctx.fail)
    lod = x.lod_level if shape and x.shape and shape[0] == x.shape[0] and shape[0] >= 0 else 0
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
    shape = reshape_target(x.shape, tensor_shape if tensor_shape is not None else ctx.attr("shape"), fail)
    return {"Out": x.reshape(shape), "XShape": _xshape(x)}


# -- transpose2 ----------------------------------------------------------------------------------------
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


# -- flatten_contiguous_range -----------------------------------------------------------------------
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
    return {"Out": x.reshape(out), "XShape": _xshape(x)}


# -- squeeze2 / unsqueeze2 ----------------------------------------------------------------------------
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
    ctx.set_output("Out", tuple(d for i, d in enumerate(x.shape) if i not in drop), x.dtype, 0)
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
    ctx.set_output("Out", out, x.dtype, 0)
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


# -- concat / split / stack / unstack ------------------------------------------------------------------
def _concat_shape(ctx: InferShapeContext) -> None:
    xs = ctx.inputs("X")
    ctx.check(len(xs) > 0, "X needs at least one tensor")
    first = xs[0]
    rank = first.ndim
    for x in xs:
        ctx.check(x.ndim == rank, f"all inputs need the same rank; {x.name!r} has {x.shape}, "
                  f"{first.name!r} has {first.shape}")
        ctx.check(x.dtype == first.dtype, f"all inputs need one dtype; {x.name!r} is {x.dtype}, "
                  f"{first.name!r} is {first.dtype}")
    if ctx.input("AxisTensor") is not None:
        ctx.set_output("Out", (-1,) * rank, first.dtype)
        return
    axis = _norm_axis(ctx.attr("axis"), rank)
    ctx.check(0 <= axis < rank, f"axis {ctx.attr('axis')} is out of range for rank {rank}")
    out = list(first.shape)
    for x in xs[1:]:
        for i in range(rank):
            if i == axis:
                continue
            ctx.check(dims_equal(out[i], x.shape[i]),
                      f"inputs differ in dim {i} (not the concat axis {axis}): {first.shape} vs {x.shape}")
            if out[i] < 0:
                out[i] = x.shape[i]
    sizes = [x.shape[axis] for x in xs]
    out[axis] = -1 if any(s < 0 for s in sizes) else sum(sizes)
    ctx.set_output("Out", out, first.dtype)


@op("concat", inputs="X* AxisTensor?", outputs="Out", attrs={"axis": 0}, infer_shape=_concat_shape,
    no_grad_inputs=["AxisTensor"])
def concat(ctx):
    """The tensors of X joined along ``axis`` (an ``AxisTensor`` must be concrete)."""
    xs = ctx.inputs("X")
    axis = static_ints(ctx, "AxisTensor", what="axis")
    axis = ctx.attr("axis") if axis is None else axis[0]
    return {"Out": jnp.concatenate(xs, axis=_norm_axis(axis, xs[0].ndim))}


def split_sizes(dim: int, num: int, sections, n_out: int, fail) -> list[int]:
    """The part sizes of ``split``: ``num`` equal parts, or ``sections`` (one may be -1)."""
    sections = [int(s) for s in sections]
    if num > 0:
        if dim >= 0 and dim % num:
            fail(f"a dim of size {dim} does not split into num={num} equal parts")
        return [dim // num if dim >= 0 else -1] * num
    if not sections:
        fail("split needs num > 0 or sections")
    if sections.count(-1) > 1:
        fail(f"sections {sections} may hold only one -1")
    if -1 in sections:
        known = sum(s for s in sections if s != -1)
        if dim >= 0:
            if known > dim:
                fail(f"sections {sections} add up to more than the dim's size {dim}")
            sections[sections.index(-1)] = dim - known
    elif dim >= 0 and sum(sections) != dim:
        fail(f"sections {sections} add up to {sum(sections)}, but the dim has size {dim}")
    return sections


def _split_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    n_out = len(ctx.op.outputs.get("Out", []))
    if ctx.input("AxisTensor") is not None or ctx.inputs("SectionsTensorList"):
        for i in range(n_out):
            ctx.set_output("Out", (-1,) * x.ndim, x.dtype, index=i)
        return
    axis = _norm_axis(ctx.attr("axis"), x.ndim)
    ctx.check(0 <= axis < x.ndim, f"axis {ctx.attr('axis')} is out of range for rank {x.ndim}")
    sizes = split_sizes(x.shape[axis], ctx.attr("num"), ctx.attr("sections"), n_out, ctx.fail)
    ctx.check(len(sizes) == n_out, f"split makes {len(sizes)} parts but the op has {n_out} Out variables")
    for i, s in enumerate(sizes):
        shape = list(x.shape)
        shape[axis] = s
        ctx.set_output("Out", shape, x.dtype, index=i)


@op("split", inputs="X AxisTensor? SectionsTensorList*?", outputs="Out*",
    attrs={"sections": Attr("ints", []), "num": 0, "axis": 0, "use_mkldnn": False, "mkldnn_data_type": "float32"},
    infer_shape=_split_shape, no_grad_inputs=["AxisTensor", "SectionsTensorList"])
def split(ctx):
    """X cut along ``axis`` into ``num`` equal parts or parts of sizes ``sections`` (one -1 is
    inferred)."""
    x = ctx.input("X")
    axis = static_ints(ctx, "AxisTensor", what="axis")
    axis = _norm_axis(ctx.attr("axis") if axis is None else axis[0], x.ndim)
    sections = static_ints(ctx, "SectionsTensorList", what="sections")
    sections = ctx.attr("sections") if sections is None else sections

    fail = _runtime_fail("split")

    sizes = split_sizes(x.shape[axis], ctx.attr("num"), sections, 0, fail)
    cuts = np.cumsum(sizes)[:-1].tolist()
    return {"Out": list(jnp.split(x, cuts, axis=axis))}


def _stack_shape(ctx: InferShapeContext) -> None:
    xs = ctx.inputs("X")
    ctx.check(len(xs) > 0, "X needs at least one tensor")
    first = xs[0]
    shape = list(first.shape)
    for x in xs[1:]:
        ctx.check(x.ndim == first.ndim and all(dims_equal(a, b) for a, b in zip(shape, x.shape)),
                  f"all inputs need one shape; {x.name!r} has {x.shape}, {first.name!r} has {first.shape}")
        ctx.check(x.dtype == first.dtype, f"all inputs need one dtype; {x.name!r} is {x.dtype}")
        shape = [a if a >= 0 else b for a, b in zip(shape, x.shape)]
    axis = _norm_axis(ctx.attr("axis"), first.ndim + 1)
    ctx.check(0 <= axis <= first.ndim, f"axis {ctx.attr('axis')} is out of range for stacking rank {first.ndim}")
    ctx.set_output("Y", shape[:axis] + [len(xs)] + shape[axis:], first.dtype, 0)


@op("stack", inputs="X*", outputs="Y", attrs={"axis": 0}, infer_shape=_stack_shape)
def stack(ctx):
    """The tensors of X (one shape) stacked along a new dim ``axis``."""
    xs = ctx.inputs("X")
    return {"Y": jnp.stack(xs, axis=_norm_axis(ctx.attr("axis"), xs[0].ndim + 1))}


def _unstack_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.check(x.ndim > 0, "X must have rank >= 1")
    axis = _norm_axis(ctx.attr("axis"), x.ndim)
    ctx.check(0 <= axis < x.ndim, f"axis {ctx.attr('axis')} is out of range for rank {x.ndim}")
    n_out = len(ctx.op.outputs.get("Y", []))
    ctx.check(dims_equal(x.shape[axis], n_out),
              f"X has {x.shape[axis]} slices along axis {axis}, but the op has {n_out} Y variables")
    num = ctx.attr("num")
    ctx.check(num in (0, None) or dims_equal(x.shape[axis], num) or x.shape[axis] < 0,
              f"num={num} differs from X's dim {x.shape[axis]} along axis {axis}")
    shape = x.shape[:axis] + x.shape[axis + 1:]
    for i in range(n_out):
        ctx.set_output("Y", shape, x.dtype, 0, index=i)


@op("unstack", inputs="X", outputs="Y*", attrs={"axis": 0, "num": 0}, infer_shape=_unstack_shape)
def unstack(ctx):
    """X cut into its slices along ``axis`` (that dim removed)."""
    x = ctx.input("X")
    axis = _norm_axis(ctx.attr("axis"), x.ndim)
    return {"Y": [jnp.take(x, i, axis=axis) for i in range(x.shape[axis])]}


# -- slice / strided_slice ------------------------------------------------------------------------------
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

    shape, bounds = _slice_out(x.shape, ctx.attr("axes"), ctx.attr("starts") if starts is None else starts,
                               ctx.attr("ends") if ends is None else ends, ctx.attr("decrease_axis"), fail)
    index = [slice(None)] * x.ndim
    for a, (lo, hi) in bounds:
        index[a] = slice(lo, hi)
    return {"Out": x[tuple(index)].reshape(shape)}


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


# -- expand_v2 / tile -------------------------------------------------------------------------------
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


# -- gather / gather_nd / scatter -----------------------------------------------------------------------
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


# -- pad3d -------------------------------------------------------------------------------------------
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
