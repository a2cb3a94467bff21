"""Joining and splitting tensors: concat, split, stack, unstack, unbind."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir.registry import Attr, declare_counts, op
from ...ir.shape import InferShapeContext
from ._counts import count_of, counted, given, is_counted, real_rows, rows_of
from ._errors import _runtime_fail
from ._shapes import _norm_axis, dims_equal
from ._tensor_attrs import static_ints


def _joined_shape(shape, rank: int) -> tuple:
    """The shape an input of concat joins with: its own, or, where it has more dims than the first
    input and every extra trailing dim is 1, its first ``rank`` dims. Fluid 1.x's concat checked
    dims only up to the first input's rank and its kernel copied each input as rows of its
    elements from the axis on, so ``concat([noise (N, 100), reshape(label, [-1, 1, 1, 1])], 1)``
    gave (N, 101) (the PaddleCV CGAN does this); extra dims that are not 1 stay a rank error."""
    shape = tuple(shape)
    if len(shape) > rank and all(d == 1 for d in shape[rank:]):
        return shape[:rank]
    return shape


def _concat_shape(ctx: InferShapeContext) -> None:
    xs = ctx.inputs("X")
    ctx.check(len(xs) > 0, "X needs at least one tensor")
    first = xs[0]
    rank = first.ndim
    for x in xs:
        ctx.check(len(_joined_shape(x.shape, rank)) == rank,
                  f"all inputs need the same rank; {x.name!r} has {x.shape}, {first.name!r} has {first.shape}")
        ctx.check(x.dtype == first.dtype, f"all inputs need one dtype; {x.name!r} is {x.dtype}, "
                  f"{first.name!r} is {first.dtype}")
    if ctx.input("AxisTensor") is not None:
        ctx.set_output("Out", (-1,) * rank, first.dtype)
        return
    axis = _norm_axis(ctx.attr("axis"), rank)
    ctx.check(0 <= axis < rank, f"axis {ctx.attr('axis')} is out of range for rank {rank}")
    out = list(first.shape)
    shapes = [_joined_shape(x.shape, rank) for x in xs]
    for x, shape in zip(xs[1:], shapes[1:]):
        for i in range(rank):
            if i == axis:
                continue
            ctx.check(dims_equal(out[i], shape[i]),
                      f"inputs differ in dim {i} (not the concat axis {axis}): {first.shape} vs {x.shape}")
            if out[i] < 0:
                out[i] = shape[i]
    sizes = [shape[axis] for shape in shapes]
    out[axis] = -1 if any(s < 0 for s in sizes) else sum(sizes)
    ctx.set_output("Out", out, first.dtype)


@op("concat", inputs="X* AxisTensor?", outputs="Out", attrs={"axis": 0}, infer_shape=_concat_shape,
    no_grad_inputs=["AxisTensor"])
def concat(ctx):
    """The tensors of X joined along ``axis`` (an ``AxisTensor`` must be concrete)."""
    xs = ctx.inputs("X")
    axis = static_ints(ctx, "AxisTensor", what="axis")
    axis = ctx.attr("axis") if axis is None else axis[0]
    if any(is_counted(x) for x in xs):
        return {"Out": concat_counted_rows(xs)}
    rank = xs[0].ndim
    xs = [x if x.ndim == rank else x.reshape(_joined_shape(x.shape, rank)) for x in xs]
    return {"Out": jnp.concatenate(xs, axis=_norm_axis(axis, rank))}


def concat_counted_rows(xs) -> "LoDValue":
    """Rows of counted values (and arrays) joined: each input's real rows right after the previous
    input's, the padding after all of them; the result carries the summed count."""
    datas = [rows_of(x) for x in xs]
    dtype = jnp.result_type(*datas)
    out = jnp.zeros((sum(d.shape[0] for d in datas),) + tuple(datas[0].shape[1:]), dtype)
    start = jnp.zeros((), jnp.int32)
    for x, d in zip(xs, datas):
        rows = jnp.where(real_rows(x), d.astype(dtype), jnp.zeros((), dtype))
        out = lax.dynamic_update_slice(out, rows, (start,) + (jnp.zeros((), jnp.int32),) * (d.ndim - 1))
        start = start + count_of(x)
    return counted(out, start)


def _concat_counts(op, values) -> dict:
    """concat along the rows honours the inputs' counts; along another axis it is row-wise."""
    if given(values, "AxisTensor"):
        return {}
    xs = values.get("X") or []
    rank = len(getattr(xs[0], "shape", ())) if xs else 0
    return {"X": "count" if rank and int(op.attrs.get("axis", 0)) % rank == 0 else "rows"}


declare_counts("concat", _concat_counts)


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


def _unbind_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    axis = ctx.attr("axis")
    ctx.check(-x.ndim <= axis < x.ndim, f"axis {axis} is out of range for a rank-{x.ndim} X")
    axis %= x.ndim
    n = len(ctx.op.outputs.get("Out", ()))
    ctx.check(x.shape[axis] < 0 or x.shape[axis] == n, f"X has {x.shape[axis]} slices along axis {axis} but "
                                                       f"{n} outputs are named")
    for i in range(n):
        ctx.set_output("Out", x.shape[:axis] + x.shape[axis + 1:], x.dtype, 0, index=i)


@op("unbind", inputs="X", outputs="Out*", attrs={"axis": 0}, infer_shape=_unbind_shape)
def unbind(ctx):
    """The slices of X along ``axis``, that axis removed."""
    x = ctx.input("X")
    axis = int(ctx.attr("axis")) % x.ndim
    return {"Out": [jnp.squeeze(s, axis) for s in jnp.split(x, x.shape[axis], axis=axis)]}
