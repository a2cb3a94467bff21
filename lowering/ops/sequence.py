"""Sequence (LoD) ops: their rules take :class:`~fluidjax.lowering.lod_value.LoDValue` inputs.

Inside a compiled step a LoD input is padded rows plus offsets (``lowering/lod_value.py``);
these rules are segment operations over the last LoD level, and padding rows never reach a
result: their segment ids fall past the last sequence and are dropped.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ...ir.registry import op
from ...ir.shape import InferShapeContext
from ..lod_value import LoDValue, counted_rows
from ..lower import lod_aware

_POOL_TYPES = ("SUM", "AVERAGE", "SQRT", "MAX", "LAST", "FIRST")


def _sequence_pool_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.check(x.lod_level >= 1, f"X must be a LoD tensor (lod_level >= 1), got lod_level {x.lod_level}: "
                                "declare it with layer.data(..., lod_level=1)")
    pool = str(ctx.attr("pooltype")).upper()
    ctx.check(pool in _POOL_TYPES, f"pooltype must be one of {list(_POOL_TYPES)}, got {ctx.attr('pooltype')!r}")
    shape = (-1,) + tuple(x.shape[1:])
    ctx.set_output("Out", shape, x.dtype, x.lod_level - 1)
    ctx.set_output("MaxIndex", shape, "int32", x.lod_level - 1)


def _broadcast_rows(v, like):
    return v.reshape(v.shape + (1,) * (like.ndim - 1))


@op("sequence_pool", inputs="X", outputs="Out MaxIndex?",
    attrs={"is_test": False, "pooltype": "AVERAGE", "pad_value": 0.0},
    infer_shape=_sequence_pool_shape, no_grad_outputs=["MaxIndex"])
def sequence_pool(ctx):
    """Pool each sequence of the last LoD level into one row: ``SUM``, ``AVERAGE`` (sum / length),
    ``SQRT`` (sum / sqrt(length)), ``MAX`` (per column; MaxIndex holds the row it came from),
    ``LAST``, ``FIRST``. An empty sequence gives a row of ``pad_value``. Out keeps the LoD levels
    above the last one (a lod_level 2 input gives a lod_level 1 output).

    As in Paddle, the gradient of MAX goes to the first row holding the maximum.
    """
    x = ctx.input("X")
    if x.__class__ is not LoDValue:
        raise TypeError("sequence_pool needs a LoD input (fed as a LoDTensor)")
    data, offsets = x.data, x.offsets[-1]
    count = offsets.shape[0] - 1
    rows = data.shape[0]
    seg = x.segment_ids()
    lengths = offsets[1:] - offsets[:-1]
    pool = str(ctx.attr("pooltype")).upper()
    max_index = None
    if pool in ("SUM", "AVERAGE", "SQRT"):
        out = jax.ops.segment_sum(data, seg, num_segments=count)
        if pool != "SUM":
            n = lengths.astype(data.dtype)
            n = jnp.sqrt(n) if pool == "SQRT" else n
            out = out / _broadcast_rows(jnp.maximum(n, jnp.ones((), data.dtype)), out)
    elif pool == "MAX":
        # Paddle's kernel: start from the sequence's first row, take a later row only when it is
        # greater. So a NaN in the first row is the result, a later NaN is never taken (and a
        # column's maximum never comes from another sequence: every row is its own sequence's).
        row = _broadcast_rows(jnp.arange(rows, dtype=jnp.int32), data)
        safe_seg = jnp.minimum(seg, count - 1) if count else seg
        real = _broadcast_rows(seg < count, data)
        starts = offsets[:-1].astype(jnp.int32)
        if jnp.issubdtype(data.dtype, jnp.inexact):
            first_row = _broadcast_rows(offsets[safe_seg] == jnp.arange(rows, dtype=offsets.dtype), data)
            lowest = jnp.array(-jnp.inf, data.dtype)
            candidate = jnp.where(jnp.isnan(data) & ~first_row, lowest, data)
            lead_nan = jnp.isnan(data[jnp.clip(starts, 0, rows - 1)])              # [count, ...]
        else:
            candidate, lead_nan = data, None
        best = jax.ops.segment_max(jnp.where(real, candidate, jnp.zeros((), data.dtype)), seg, num_segments=count)
        hit = (candidate == best[safe_seg]) & real
        candidates = jnp.where(hit, jnp.broadcast_to(row, data.shape), rows)
        max_index = jax.ops.segment_min(candidates, seg, num_segments=count)
        if lead_nan is not None:
            max_index = jnp.where(lead_nan, _broadcast_rows(starts, max_index), max_index)
        max_index = jnp.minimum(max_index, rows - 1)
        out = jnp.take_along_axis(data, max_index.reshape(count, -1).reshape(max_index.shape), axis=0) \
            if data.ndim > 1 else data[max_index]
    else:
        pick = offsets[1:] - 1 if pool == "LAST" else offsets[:-1]
        out = data[jnp.clip(pick, 0, rows - 1)]
    empty = _broadcast_rows(lengths == 0, out)
    out = jnp.where(empty, jnp.asarray(ctx.attr("pad_value"), out.dtype), out)
    if max_index is None:
        max_index = jnp.zeros(out.shape, jnp.int32)
    else:
        max_index = jnp.where(empty, -1, max_index).astype(jnp.int32)     # Paddle: -1 for empty
    if x.lod_level > 1:
        upper = x.offsets[:-1]
        return {"Out": LoDValue(out, upper), "MaxIndex": LoDValue(max_index, upper)}
    # one row per sequence: with padding sequences (FLAGS_bucket_sequences), only the real ones count
    return {"Out": counted_rows(out, x.offsets[0]), "MaxIndex": counted_rows(max_index, x.offsets[0])}


def _same_lod_shape(out_slot: str, max_levels: int | None = None):
    def rule(ctx: InferShapeContext) -> None:
        x = ctx.input("X")
        ctx.check(x.lod_level >= 1, f"X must be a LoD tensor (lod_level >= 1), got lod_level {x.lod_level}")
        ctx.check(max_levels is None or x.lod_level <= max_levels,
                  f"X may have at most {max_levels} LoD level(s), as in Paddle; got lod_level {x.lod_level}")
        ctx.set_output(out_slot, x.shape, x.dtype, x.lod_level)
    return rule


def _segment_info(x: LoDValue):
    """(segment id per row, clipped to a valid index, and whether the row is real) for x's last level."""
    count = x.offsets[-1].shape[0] - 1
    seg = x.segment_ids()
    real = seg < count
    return jnp.minimum(seg, max(count - 1, 0)), real, count


@op("sequence_softmax", inputs="X", outputs="Out", attrs={"use_cudnn": False},
    infer_shape=_same_lod_shape("Out"))
def sequence_softmax(ctx):
    """Softmax over the rows of each sequence (X is [N, 1] or [N]); Out keeps X's LoD."""
    x = ctx.input("X")
    data = x.data
    flat = data.reshape(data.shape[0])
    seg, real, count = _segment_info(x)
    ids = jnp.where(real, seg, count)            # padding rows: past the end, dropped
    zero = jnp.zeros((), flat.dtype)
    # Every value computed for a padding row or an empty sequence stays finite (peak -inf of an
    # empty segment, a 0 total): jnp.where's gradient multiplies the untaken side by 0, and 0 * inf
    # is NaN (a DynamicRNN step whose static input has empty sequences hit that).
    peak = lax.stop_gradient(jax.ops.segment_max(flat, ids, num_segments=count))
    peak = jnp.where(jnp.isfinite(peak), peak, zero)
    e = jnp.where(real, jnp.exp(jnp.where(real, flat - peak[seg], zero)), zero)
    total = jax.ops.segment_sum(e, ids, num_segments=count)
    # Only an empty sequence's total is replaced: a real sequence's NaN or 0 total (it holds NaN, or
    # only -inf) makes it NaN, as Paddle's exp(x) / sum(exp(x)) does.
    lengths = x.offsets[-1][1:] - x.offsets[-1][:-1]
    total = jnp.where(lengths > 0, total, jnp.ones((), flat.dtype))
    out = jnp.where(real, e / total[seg], zero)
    return {"Out": LoDValue(out.reshape(data.shape), x.offsets)}


@op("sequence_reverse", inputs="X", outputs="Y", infer_shape=_same_lod_shape("Y", max_levels=1))
def sequence_reverse(ctx):
    """The rows of each sequence in reverse order; Y keeps X's LoD."""
    x = ctx.input("X")
    offsets = x.offsets[-1]
    seg, real, _ = _segment_info(x)
    rows = jnp.arange(x.data.shape[0], dtype=offsets.dtype)
    source = jnp.where(real, offsets[seg] + offsets[seg + 1] - 1 - rows, rows)
    return {"Y": LoDValue(x.data[source], x.offsets)}


def _expand_as_shape(ctx: InferShapeContext) -> None:
    x, y = ctx.input("X"), ctx.input("Y")
    ctx.check(y.lod_level >= 1, f"Y must be a LoD tensor (lod_level >= 1), got lod_level {y.lod_level}")
    ctx.set_output("Out", (-1,) + tuple(x.shape[1:]), x.dtype, y.lod_level)


@op("sequence_expand_as", inputs="X Y", outputs="Out", infer_shape=_expand_as_shape, no_grad_inputs=["Y"])
def sequence_expand_as(ctx):
    """Row i of X repeated as many times as sequence i of Y is long; Out takes Y's LoD."""
    x, y = ctx.input("X"), ctx.input("Y")
    data = x.data if x.__class__ is LoDValue else x
    seg, real, _ = _segment_info(y)
    out = jnp.where(_broadcast_rows(real, data[seg]), data[seg], jnp.zeros((), data.dtype))
    return {"Out": LoDValue(out, y.offsets)}


def _concat_shape(ctx: InferShapeContext) -> None:
    xs = ctx.inputs("X")
    first = xs[0]
    for x in xs:
        ctx.check(x.lod_level == 1, f"every X must have one LoD level (Paddle's rule), got lod_level {x.lod_level}")
        ctx.check(tuple(x.shape[1:]) == tuple(first.shape[1:]) and x.dtype == first.dtype,
                  f"every X must have the row shape and dtype of the first ({first.shape[1:]}, {first.dtype}); "
                  f"got {x.shape[1:]}, {x.dtype}")
    ctx.set_output("Out", (-1,) + tuple(first.shape[1:]), first.dtype, 1)


@op("sequence_concat", inputs="X*", outputs="Out", infer_shape=_concat_shape)
def sequence_concat(ctx):
    """Sequence i of Out is sequence i of every X, one after another (all X have as many sequences)."""
    xs = ctx.inputs("X")
    starts = [x.offsets[-1][:-1] for x in xs]
    lengths = [x.offsets[-1][1:] - x.offsets[-1][:-1] for x in xs]
    out_offsets = sum(x.offsets[-1] for x in xs)
    rows = sum(x.data.shape[0] for x in xs)
    count = out_offsets.shape[0] - 1
    base = [0]
    for x in xs[:-1]:
        base.append(base[-1] + x.data.shape[0])
    r = jnp.arange(rows, dtype=out_offsets.dtype)
    seg = jnp.searchsorted(out_offsets[1:], r, side="right")
    real = seg < count
    seg = jnp.minimum(seg, count - 1)
    pos = r - out_offsets[seg]
    # Which input the row comes from: the first whose running length passes its position.
    source = jnp.zeros_like(r)
    before = jnp.zeros_like(r)
    chosen = jnp.zeros(r.shape, bool)
    for k, (start, length) in enumerate(zip(starts, lengths)):
        here = ~chosen & (pos < before + length[seg])
        source = jnp.where(here, base[k] + start[seg] + pos - before, source)
        chosen = chosen | here
        before = before + length[seg]
    data = jnp.concatenate([x.data for x in xs])
    out = jnp.where(_broadcast_rows(real, data), data[jnp.where(real, source, 0)], jnp.zeros((), data.dtype))
    return {"Out": LoDValue(out, (out_offsets,))}


lod_aware("sequence_pool", "sequence_softmax", "sequence_reverse", "sequence_expand_as", "sequence_concat", "mean")


# -- Fluid 1.x: position encoding and scattering by sequence ----------------------------------------
def _add_position_encoding_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.check(x.ndim in (2, 3) and (x.shape[-1] < 0 or x.shape[-1] % 2 == 0),
              f"add_position_encoding needs X [N, M, P] or a LoD [T, P] with an even P, got {x.shape}")
    ctx.check(x.ndim == 3 or x.lod_level >= 1, "a 2-D X of add_position_encoding must be a LoD tensor")
    ctx.set_output("Out", x.shape, x.dtype, x.lod_level)


@op("add_position_encoding", inputs="X", outputs="Out", attrs={"alpha": 1.0, "beta": 1.0},
    infer_shape=_add_position_encoding_shape)
def add_position_encoding(ctx):
    """X * alpha + beta * the sinusoid encoding of each row's position j (in its sequence, or along
    dim 1 of a dense [N, M, P] X): sin(j / 10000^(k / (P/2 - 1))) in the first half of the
    features, cos in the second."""
    x = ctx.input("X")
    data = x.data if x.__class__ is LoDValue else x
    half = data.shape[-1] // 2
    if x.__class__ is LoDValue:
        offsets = x.offsets[-1]
        rows = jnp.arange(data.shape[0], dtype=offsets.dtype)
        pos = rows - offsets[jnp.minimum(x.segment_ids(), offsets.shape[0] - 2)]
    else:
        pos = jnp.arange(data.shape[1])
    k = jnp.arange(half, dtype=jnp.float64 if data.dtype == jnp.float64 else jnp.float32)
    scale = jnp.power(10000.0, k / (half - 1)) if half > 1 else jnp.full((half,), 10000.0, k.dtype)
    val = pos.astype(k.dtype)[:, None] / scale
    enc = jnp.concatenate([jnp.sin(val), jnp.cos(val)], -1).astype(data.dtype)
    out = data * ctx.attr("alpha") + enc * ctx.attr("beta")
    return {"Out": LoDValue(out, x.offsets) if x.__class__ is LoDValue else out}


def _sequence_scatter_shape(ctx: InferShapeContext) -> None:
    x, ids, upd = ctx.input("X"), ctx.input("Ids"), ctx.input("Updates")
    ctx.check(ids.lod_level >= 1 and upd.lod_level >= 1, "sequence_scatter's Ids and Updates must be LoD tensors")
    ctx.check(x.ndim == 2, f"sequence_scatter needs a 2-D X, got {x.shape}")
    ctx.set_output("Out", x.shape, x.dtype, 0)


@op("sequence_scatter", inputs="X Ids Updates", outputs="Out", infer_shape=_sequence_scatter_shape,
    no_grad_inputs=["Ids"])
def sequence_scatter(ctx):
    """Out = X, then for sequence i of Ids/Updates: Out[i, Ids[j]] += Updates[j] for each row j of it."""
    x, ids, upd = ctx.input("X"), ctx.input("Ids"), ctx.input("Updates")
    seg = ids.segment_ids()
    real = seg < ids.offsets[-1].shape[0] - 1
    cols = ids.data.reshape(-1).astype(jnp.int32)
    vals = jnp.where(real, upd.data.reshape(-1), jnp.zeros((), upd.data.dtype))
    rows = jnp.where(real, seg, x.shape[0])          # padding rows fall outside and are dropped
    return {"Out": x.at[rows, cols].add(vals.astype(x.dtype), mode="drop")}


lod_aware("add_position_encoding", "sequence_scatter")
