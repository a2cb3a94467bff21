"""``beam_search``: one step of Paddle 2.6.2's LoD beam search, as a static-shape computation.

Paddle (``phi/kernels/funcs/beam_search.cc``): for each source sentence (the sequences of level
``level`` of ``scores``' LoD, in rows), every prefix row offers its candidates — ``ids[row, d]``
(or ``d`` without ``ids``) scored ``scores[row, d]`` (``is_accumulated``) or ``pre_score +
log(scores[row, d])`` — except a finished prefix (``pre_ids[row] == end_id``), which offers only
``end_id`` with its ``pre_score``. The source keeps its ``beam_size`` best (score descending,
ties: the later row first, then candidate order); a source whose kept candidates all end a
finished prefix is pruned (it keeps none). The kept candidates are listed by prefix row, each
row's in score order: ``selected_ids`` / ``selected_scores`` [kept, 1] with the LoD
``[level's row offsets, kept candidates per prefix row]``, ``parent_idx`` [kept] the prefix row
of each.

Inside a step the kept count is data: the outputs have the static capacity ``sources ×
beam_size`` (padded to a bucket) and carry the count in their offsets
(``docs/ops_data_dependent.md``); ``parent_idx`` is held as plain rows with a count, cut on fetch.

``gather_tree`` (at the end) is the backtrace of Fluid 1.8's dense ``BeamSearchDecoder``: whole
sequences from [time, batch, beam] step ids and parent beams.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...ir.errors import OpRuntimeError
from ...ir.registry import op
from ...ir.shape import InferShapeContext
from ..checks import IndexInput, index_inputs
from ..lod_value import LoDValue, bucket, same_sequences
from ..lower import lod_aware


def _where(ctx) -> str:
    return f"op {ctx.op.type!r} at {ctx.op.location}"


def _rows(value):
    return value.data if isinstance(value, LoDValue) else jnp.asarray(value)


def _fit(value, rows: int):
    """``value``'s first ``rows`` rows, zero-padded (inputs padded to other buckets than scores)."""
    if value.shape[0] >= rows:
        return value[:rows]
    return jnp.concatenate([value, jnp.zeros((rows - value.shape[0],) + tuple(value.shape[1:]), value.dtype)])


def _abs_offsets(lod: LoDValue, level: int):
    """Level ``level``'s offsets in rows (Paddle's ``ToAbsOffset``)."""
    offsets = jnp.asarray(lod.offsets[level], jnp.int32)
    for inner in lod.offsets[level + 1:]:
        offsets = jnp.asarray(inner, jnp.int32)[offsets]
    return offsets


def _beam_search_shape(ctx: InferShapeContext) -> None:
    scores = ctx.input("scores")
    ctx.set_output("selected_ids", (-1, 1), "int64", 2)
    ctx.set_output("selected_scores", (-1, 1), scores.dtype, 2)
    if ctx.has_output("parent_idx"):
        ctx.set_output("parent_idx", (-1,), "int32", 0)


@op("beam_search", inputs="pre_ids pre_scores ids? scores", outputs="selected_ids selected_scores parent_idx",
    attrs={"level": 0, "beam_size": 0, "end_id": 0, "is_accumulated": True},
    infer_shape=_beam_search_shape, grad=None)
def beam_search(ctx):
    """One beam-search step over LoD beams (see the module docstring)."""
    scores_in = ctx.input("scores")
    if not isinstance(scores_in, LoDValue):
        raise OpRuntimeError(f"{_where(ctx)}: scores must be a LoD tensor (its LoD groups the prefixes "
                             "of each source sentence)")
    level = int(ctx.attr("level"))
    if not 0 <= level < scores_in.lod_level:
        raise OpRuntimeError(f"{_where(ctx)}: level {level} is not a LoD level of scores "
                             f"({scores_in.lod_level} levels)")
    beam_size, end_id = int(ctx.attr("beam_size")), int(ctx.attr("end_id"))
    if beam_size <= 0:
        raise OpRuntimeError(f"{_where(ctx)}: beam_size must be positive, got {beam_size}")
    scores = _rows(scores_in)
    rows = scores.shape[0]
    scores = scores.reshape(rows, -1)
    width = scores.shape[1]
    pre_ids = _fit(_rows(ctx.input("pre_ids")).reshape(-1), rows).astype(jnp.int64)
    pre_scores = _fit(_rows(ctx.input("pre_scores")).reshape(-1), rows).astype(scores.dtype)
    ids_in = ctx.input("ids")
    if ids_in is not None:
        ids = _rows(ids_in)
        ids = _fit(ids.reshape(ids.shape[0], -1), rows).astype(jnp.int64)
        if ids.shape != (rows, width):
            raise OpRuntimeError(f"{_where(ctx)}: ids has {ids.shape[1]} candidates per row, scores {width}")
    else:
        ids = jnp.broadcast_to(jnp.arange(width, dtype=jnp.int64), (rows, width))

    high = _abs_offsets(scores_in, level)               # [sources + 1] in rows
    if level == 0:           # as many sources: padding ones (FLAGS_bucket_sequences) stay padding
        high = same_sequences(high, scores_in.offsets[0])
    sources = high.shape[0] - 1
    real_rows = high[-1]
    row = jnp.arange(rows, dtype=jnp.int32)
    source = jnp.searchsorted(high[1:], row, side="right").astype(jnp.int32)   # padding rows: sources
    finished = pre_ids == end_id
    d = jnp.broadcast_to(jnp.arange(width, dtype=jnp.int32), (rows, width))
    if ctx.attr("is_accumulated"):
        cand = scores
    else:
        cand = pre_scores[:, None] + jnp.log(scores)
    cand = jnp.where(finished[:, None], pre_scores[:, None], cand)
    cand_id = jnp.where(finished[:, None], jnp.int64(end_id), ids)
    valid = (row < real_rows)[:, None] & (~finished[:, None] | (d == 0))

    flat = lambda a: a.reshape(-1)  # noqa: E731
    f_src = flat(jnp.broadcast_to(source[:, None], (rows, width)))
    f_row = flat(jnp.broadcast_to(row[:, None], (rows, width)))
    f_d, f_score, f_id, f_valid = flat(d), flat(cand), flat(cand_id), flat(valid)
    # Paddle's order within a source: score descending, then the later row, then candidate order.
    order = jnp.lexsort((f_d, -f_row, -f_score, ~f_valid, f_src))
    s_src, s_valid = f_src[order], f_valid[order]
    first = jnp.searchsorted(s_src, jnp.arange(sources + 1, dtype=f_src.dtype), side="left")
    rank = jnp.arange(order.shape[0]) - first[jnp.clip(s_src, 0, sources)]
    kept = s_valid & (rank < beam_size) & (s_src < sources)
    s_row, s_id = f_row[order], f_id[order]
    # A source whose kept candidates all continue finished prefixes with end_id is pruned.
    unfinished = kept & ~((s_id == end_id) & finished[s_row])
    live = jnp.zeros((sources + 1,), bool).at[s_src].max(unfinished)
    kept = kept & live[jnp.clip(s_src, 0, sources)]
    # Listed by prefix row, each row's candidates in their beam order.
    out_order = jnp.lexsort((rank, s_row, ~kept))
    capacity = bucket(max(min(sources * beam_size, rows * width), 1))
    pick = out_order[:capacity] if out_order.shape[0] >= capacity else jnp.concatenate(
        [out_order, jnp.zeros((capacity - out_order.shape[0],), out_order.dtype)])
    count = jnp.sum(kept).astype(jnp.int32)
    real = jnp.arange(capacity) < count
    sel_ids = jnp.where(real, s_id[pick], 0).reshape(capacity, 1)
    sel_scores = jnp.where(real, f_score[order][pick], 0).reshape(capacity, 1).astype(scores.dtype)
    parent = jnp.where(real, s_row[pick], 0).astype(jnp.int32)
    # Level 1: kept candidates per prefix row (rows past the real ones: empty).
    per_row = jnp.zeros((rows,), jnp.int32).at[s_row].add(kept.astype(jnp.int32))
    low = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(per_row).astype(jnp.int32)])
    low = jnp.concatenate([low, jnp.full((bucket(rows) - rows,), low[-1], jnp.int32)]) if bucket(rows) > rows else low
    lod = (high, low)
    outs = {"selected_ids": LoDValue(sel_ids, lod), "selected_scores": LoDValue(sel_scores, lod)}
    if ctx.has_output("parent_idx"):
        outs["parent_idx"] = LoDValue(parent, (jnp.stack([jnp.zeros((), jnp.int32), count]),))
    return outs


lod_aware("beam_search")


# -- gather_tree --------------------------------------------------------------------------------------
# Fluid 1.8's BeamSearchDecoder (layers.dynamic_decode) backtracks its time-major step ids along the
# chosen parent beams with this op (Paddle: phi/kernels/cpu/gather_tree_kernel.cc).
def _gather_tree_shape(ctx: InferShapeContext) -> None:
    ids, parents = ctx.input("Ids"), ctx.input("Parents")
    ctx.check(ids.dtype in ("int32", "int64"), f"Ids must hold int32 or int64 ids, got {ids.dtype}")
    ctx.check(parents.dtype == ids.dtype, f"Parents must have Ids' dtype {ids.dtype}, got {parents.dtype}")
    ctx.check(ids.ndim == 3, f"Ids must be [max_time, batch, beam], got {list(ids.shape)}")
    ctx.check(parents.ndim == 3 and all(a == b or a < 0 or b < 0 for a, b in zip(ids.shape, parents.shape)),
              f"Parents {list(parents.shape)} must have Ids' shape {list(ids.shape)}")
    ctx.set_output("Out", ids.shape, ids.dtype, 0)


@op("gather_tree", inputs="Ids Parents", outputs="Out", infer_shape=_gather_tree_shape, grad=None)
def gather_tree(ctx):
    """Whole sequences from beam search steps: ``Out[T-1] = Ids[T-1]``, and going back each
    (batch, beam) follows its parents, ``Out[t, b, k] = Ids[t, b, p_t]`` with
    ``p_{T-1} = Parents[T-1, b, k]`` and ``p_{t-1} = Parents[t, b, p_t]``. Ids and Parents are
    [max_time, batch, beam]. A parent outside [0, beam) is an error in Paddle; here it is clipped,
    and ``FLAGS_check_index`` reports it."""
    ids, parents = jnp.asarray(ctx.input("Ids")), jnp.asarray(ctx.input("Parents"))
    if ids.shape[0] == 0:
        return {"Out": ids}
    beam = ids.shape[2]

    def back(parent, step):
        step_ids, step_parents = step
        index = jnp.clip(parent, 0, beam - 1).astype(jnp.int32)
        return (jnp.take_along_axis(step_parents, index, axis=1),
                jnp.take_along_axis(step_ids, index, axis=1))

    _, earlier = jax.lax.scan(back, parents[-1], (ids[:-1], parents[:-1]), reverse=True)
    return {"Out": jnp.concatenate([earlier, ids[-1:]], axis=0)}


@index_inputs("gather_tree")
def _gather_tree_indices(attr, shape):
    beam = shape("Ids")[-1]
    return [IndexInput("Parents", beam)] if beam >= 0 else []
