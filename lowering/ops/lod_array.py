"""LoD tensor arrays: ``lod_rank_table``, ``max_sequence_len``, ``lod_tensor_to_array``,
``array_to_lod_tensor``, ``reorder_lod_tensor_by_rank``, ``shrink_rnn_memory`` (what Fluid 1.x's
``DynamicRNN`` builds), with Paddle 2.6.2's semantics.

Inside a compiled step (docs/control_flow.md, "LoD tensor arrays"):

- a rank table is a :class:`RankTable` pytree: ``index`` [N] (sequence indices sorted by length,
  descending, stable as Paddle's ``std::stable_sort``), ``length`` [N] (their lengths), and the
  ranked level's ``offsets`` [N + 1] (to put sequences back in their order); N is static (the
  number of sequences of that level, padded with empty ones for inner levels);
- ``lod_tensor_to_array`` gives a ``TensorArray`` whose element ``t`` holds, in rank order, the
  ``t``-th row of every sequence longer than ``t``. Paddle's element has that many rows, a number
  that is data; here every element has N rows (a static shape) and the rows past the count are
  zeros. Because sequences are in rank order, the real rows are always a prefix;
- ``shrink_rnn_memory`` keeps that prefix (rows past it are zeroed, the gradient is zero there,
  Paddle's zero-padded gradient) instead of cutting it;
- ``array_to_lod_tensor`` gathers the rows back into sequence order: a LoD value with the ranked
  level's offsets.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ...ir.errors import OpRuntimeError
from ...ir.names import OP_ROLE_BACKWARD
from ...ir.registry import op
from ...ir.shape import InferShapeContext
from .. import flags
from ..checks import bound_checked
from ..lod_value import LoDValue, bucket, counted_rows, longest_of, same_sequences
from ..lower import lod_aware
from .tensor_array import TensorArray, _pad_axis

LOD_RANK_TABLE = 12      # Paddle's VarType.LOD_RANK_TABLE


@jax.tree_util.register_pytree_node_class
class RankTable:
    """``index`` / ``length`` [N] int32 in rank order, ``offsets`` [N + 1] of the ranked level;
    ``rows`` (static): the padded row count of the ranked tensor; ``longest`` (static): a bound on
    the longest sequence — a bucket of it when the ranked level came from a feed as it is
    (``lod_value.longest_of``), else ``rows``."""

    __slots__ = ("index", "length", "offsets", "rows", "longest")

    def __init__(self, index, length, offsets, rows: int, longest: int | None = None) -> None:
        self.index, self.length, self.offsets, self.rows = index, length, offsets, rows
        self.longest = rows if longest is None else longest

    def tree_flatten(self):
        return (self.index, self.length, self.offsets), (self.rows, self.longest)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, *aux)

    @property
    def size(self) -> int:
        return int(self.index.shape[0])

    def count_longer_than(self, t):
        """How many sequences are longer than ``t`` (those active at time step ``t``)."""
        return jnp.sum(self.length > t).astype(jnp.int32)

    def __array__(self, *args, **kwargs):
        raise TypeError("a rank table cannot be fetched; fetch max_sequence_len or the reordered tensor")

    def __repr__(self) -> str:
        return f"RankTable(sequences={self.size}, rows={self.rows}, longest<={self.longest})"


def _where(ctx) -> str:
    return f"op {ctx.op.type!r} at {ctx.op.location}"


def _table(ctx) -> RankTable:
    table = ctx.input("RankTable")
    if not isinstance(table, RankTable):
        raise OpRuntimeError(f"{_where(ctx)}: RankTable is not a rank table (made by lod_rank_table)")
    return table


def _counted_rows_input(ctx, x, slot: str = "X") -> bool:
    """Whether ``x`` is counted rows (a LoDValue of a variable declared without LoD: one row per
    sequence, its real count carried; FLAGS_bucket_sequences' per-sequence rows), not a sequence."""
    if x.__class__ is not LoDValue:
        return False
    names = ctx.op.inputs.get(slot) or ()
    var = ctx.op.block.find_var(names[0]) if names else None
    return var is not None and not var.lod_level


def _one_level(ctx, x, slot: str = "X") -> LoDValue:
    if not isinstance(x, LoDValue):
        raise OpRuntimeError(f"{_where(ctx)}: {slot} must be a LoD tensor (lod_level >= 1)")
    if x.lod_level != 1:
        raise OpRuntimeError(f"{_where(ctx)}: {slot} has {x.lod_level} LoD levels; fluidjax splits "
                             "one-level LoD tensors into time steps (its rows are the steps)")
    return x


# -- lod_rank_table, max_sequence_len ----------------------------------------------------------------
def _rank_table_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    level = int(ctx.attr("level") or 0)
    ctx.check(x.lod_level > level, f"lod_rank_table: level {level} needs X with more than {level} LoD "
                                   f"levels, X has lod_level {x.lod_level}")


@op("lod_rank_table", inputs="X", outputs="Out", attrs={"level": 0}, infer_shape=_rank_table_shape, grad=None)
def lod_rank_table(ctx):
    """The sequences of X's LoD level ``level`` sorted by length, longest first (stable)."""
    x = ctx.input("X")
    level = int(ctx.attr("level"))
    if not isinstance(x, LoDValue) or not 0 <= level < x.lod_level:
        have = x.lod_level if isinstance(x, LoDValue) else 0
        raise OpRuntimeError(f"{_where(ctx)}: cannot rank LoD level {level} of X, which has {have} level(s)")
    longest = longest_of(x.offsets[level])
    offsets = same_sequences(jnp.asarray(x.offsets[level], jnp.int32), x.offsets[level])
    lengths = offsets[1:] - offsets[:-1]
    index = jnp.argsort(-lengths, stable=True).astype(jnp.int32)
    rows = int(x.data.shape[0])
    return {"Out": RankTable(index, lengths[index], offsets, rows, None if longest is None else min(longest, rows))}


def _max_len_shape(ctx: InferShapeContext) -> None:
    ctx.set_output("Out", (1,), "int64", 0)


@op("max_sequence_len", inputs="RankTable", outputs="Out", infer_shape=_max_len_shape, grad=None)
def max_sequence_len(ctx):
    """The longest sequence's length, int64 [1]."""
    table = _table(ctx)
    longest = table.length[0] if table.size else jnp.zeros((), jnp.int32)
    return {"Out": longest.astype(jnp.int64).reshape(1)}


# -- lod_tensor_to_array, array_to_lod_tensor --------------------------------------------------------
def _to_array_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", (-1,) + tuple(x.shape[1:]), x.dtype, max(x.lod_level - 1, 0))


def _to_array_grad(op_, out_grads, in_grads):
    # Paddle's: the gradient of the split is the merge of the array's gradient (and back).
    return [("array_to_lod_tensor", {"X": out_grads["Out"], "RankTable": op_.input("RankTable")},
             {"Out": in_grads["X"]}, {})]


def _to_tensor_grad(op_, out_grads, in_grads):
    return [("lod_tensor_to_array", {"X": out_grads["Out"], "RankTable": op_.input("RankTable")},
             {"Out": in_grads["X"]}, {})]


@op("lod_tensor_to_array", inputs="X RankTable", outputs="Out", infer_shape=_to_array_shape,
    no_grad_inputs=["RankTable"], grad_maker=_to_array_grad)
def lod_tensor_to_array(ctx):
    """Element t: the t-th row of every sequence longer than t, in rank order. Each element has
    N rows (N sequences), the real ones first, zeros after; the array's length is the longest
    sequence's length."""
    x = _one_level(ctx, ctx.input("X"))
    table = _table(ctx)
    data, rows = x.data, x.data.shape[0]
    # the longest sequence has at most every row; a fed one's bucket is known (RankTable.longest)
    steps = max(min(rows, table.longest), 1)
    starts = table.offsets[table.index]        # [N] first row of each ranked sequence
    t = jnp.arange(steps, dtype=jnp.int32)[:, None]
    valid = t < table.length[None, :]          # [T, N]
    gathered = data[jnp.clip(starts[None, :] + t, 0, rows - 1)]
    mask = valid.reshape(valid.shape + (1,) * (data.ndim - 1))
    buffer = jnp.where(mask, gathered, jnp.zeros_like(gathered))
    longest = table.length[0] if table.size else jnp.zeros((), jnp.int32)
    return {"Out": TensorArray(buffer, longest.astype(jnp.int32))}


def _to_tensor_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", (-1,) + tuple(x.shape[1:]), x.dtype, x.lod_level + 1)


@op("array_to_lod_tensor", inputs="X RankTable", outputs="Out", infer_shape=_to_tensor_shape,
    no_grad_inputs=["RankTable"], grad_maker=_to_tensor_grad)
def array_to_lod_tensor(ctx):
    """The inverse of ``lod_tensor_to_array``: sequence s's row t is element t's row at s's rank;
    the LoD is the ranked level's (the sequences in their original order)."""
    array = ctx.input("X")
    table = _table(ctx)
    if isinstance(array, LoDValue):            # a gradient arriving as a LoD value: its rows
        raise OpRuntimeError(f"{_where(ctx)}: X must be a tensor array")
    if not isinstance(array, TensorArray):
        raise OpRuntimeError(f"{_where(ctx)}: X is not a tensor array with elements (was it written?)")
    buffer = array.buffer
    if buffer.__class__ is LoDValue and buffer.lod_level == 1:
        # elements written as counted rows (one per sequence, FLAGS_bucket_sequences): the rows at
        # the padding sequences' ranks are never picked (those sequences are empty)
        buffer = buffer.data
    if buffer.ndim < 2 or buffer.shape[1] < table.size:
        raise OpRuntimeError(f"{_where(ctx)}: the array's elements have {buffer.shape[1:2]} rows, fewer "
                             f"than the rank table's {table.size} sequences")
    if ctx.checks is not None and not int(ctx.op.attrs.get("op_role", 0) or 0) & OP_ROLE_BACKWARD:
        # every step a sequence has must have been written (the gradient pass reads zeros there)
        longest = table.length[0] if table.size else jnp.zeros((), jnp.int32)
        ctx.checks.check_bound(ctx.op, longest <= array.length, longest, {
            "kind": "bound", "bound": None,
            "message": f"array {ctx.op.input('X')[0]!r} has fewer elements (time steps) than the longest "
                       "sequence of the rank table: its steps past the array's length were never written "
                       "(Paddle reads past the array there). Write one element per step of the longest "
                       "sequence; longest sequence"})
    rows = table.rows
    offsets = table.offsets
    r = jnp.arange(rows, dtype=jnp.int32)
    seq = jnp.searchsorted(offsets[1:], r, side="right").astype(jnp.int32)   # padding rows: N
    real = seq < table.size
    seq_c = jnp.clip(seq, 0, max(table.size - 1, 0))
    step = r - offsets[seq_c]
    rank_of = jnp.zeros((table.size,), jnp.int32).at[table.index].set(jnp.arange(table.size, dtype=jnp.int32))
    valid = real & (step < array.buffer.shape[0])
    picked = buffer[jnp.clip(step, 0, buffer.shape[0] - 1), rank_of[seq_c]]
    mask = valid.reshape(valid.shape + (1,) * (picked.ndim - 1))
    data = jnp.where(mask, picked, jnp.zeros_like(picked))
    return {"Out": LoDValue(data, (same_sequences(offsets, table.offsets),))}


bound_checked("array_to_lod_tensor", lambda op_: not int(op_.attrs.get("op_role", 0) or 0) & OP_ROLE_BACKWARD)


# -- reorder_lod_tensor_by_rank, shrink_rnn_memory ---------------------------------------------------
def _same_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", x.shape, x.dtype, x.lod_level)


@op("reorder_lod_tensor_by_rank", inputs="X RankTable", outputs="Out", infer_shape=_same_shape,
    no_grad_inputs=["RankTable"])
def reorder_lod_tensor_by_rank(ctx):
    """X's sequences (a LoD X) or rows (a plain X, one row per sequence) in the rank table's order."""
    x = ctx.input("X")
    table = _table(ctx)
    if _counted_rows_input(ctx, x):      # one row per sequence, counted: the rows, reordered below
        x = x.data[:table.size] if x.data.shape[0] >= table.size else x.data
    if not isinstance(x, LoDValue):
        if flags.bucket_sequences and 0 < x.shape[0] < table.size:
            # the table's padding sequences (FLAGS_bucket_sequences) are empty and rank last among
            # the empty ones: their rows are zeros no step reads
            x = jnp.concatenate([x, jnp.zeros((table.size - x.shape[0],) + x.shape[1:], x.dtype)])
        if x.shape[0] != table.size:
            raise OpRuntimeError(f"{_where(ctx)}: X has {x.shape[0]} rows, the rank table {table.size} "
                                 "sequences (a plain X gives one row per sequence)")
        # padding sequences rank after every real one (length 0, stable): the real rows come first
        return {"Out": counted_rows(x[table.index], table.offsets)}
    x = _one_level(ctx, x)
    src = jnp.asarray(x.offsets[0], jnp.int32)
    if src.shape[0] - 1 != table.size:
        raise OpRuntimeError(f"{_where(ctx)}: X has {src.shape[0] - 1} sequences, the rank table {table.size}")
    lengths = (src[1:] - src[:-1])[table.index]
    new = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(lengths).astype(jnp.int32)])
    rows = x.data.shape[0]
    r = jnp.arange(rows, dtype=jnp.int32)
    seq = jnp.searchsorted(new[1:], r, side="right").astype(jnp.int32)
    seq_c = jnp.clip(seq, 0, max(table.size - 1, 0))
    source = src[table.index[seq_c]] + r - new[seq_c]
    valid = seq < table.size
    picked = x.data[jnp.clip(source, 0, rows - 1)]
    mask = valid.reshape(valid.shape + (1,) * (picked.ndim - 1))
    new = same_sequences(new, x.offsets[0])      # as many sequences: its real count kept
    return {"Out": LoDValue(jnp.where(mask, picked, jnp.zeros_like(picked)), (new,))}


def _shrink_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", (-1,) + tuple(x.shape[1:]), x.dtype, x.lod_level)


@op("shrink_rnn_memory", inputs="X RankTable I", outputs="Out", infer_shape=_shrink_shape,
    no_grad_inputs=["RankTable", "I"])
def shrink_rnn_memory(ctx):
    """X's first rows, one per sequence still running at step I (longer than I); for a LoD X,
    its first that many sequences (Paddle's). Rows keep their places (a static shape): the rows
    past them are zeros here, where Paddle cuts them, and a LoD X keeps its sequence count (the
    dropped sequences become empty)."""
    x = ctx.input("X")
    table = _table(ctx)
    i = jnp.asarray(ctx.input("I")).reshape(()).astype(jnp.int32)
    count = table.count_longer_than(i)
    counted_in = _counted_rows_input(ctx, x)
    if counted_in:                           # one row per running sequence, counted: kept counted
        keep = jnp.arange(x.data.shape[0]) < count
        out = jnp.where(keep.reshape(keep.shape + (1,) * (x.data.ndim - 1)), x.data, jnp.zeros_like(x.data))
        return {"Out": LoDValue(out, x.offsets)}
    data = x.data if isinstance(x, LoDValue) else x
    if isinstance(x, LoDValue):
        top = jnp.asarray(x.offsets[0], jnp.int32)
        cut = top[jnp.minimum(count, top.shape[0] - 1)]
        offsets = (jnp.minimum(top, cut),) + tuple(x.offsets[1:])
        if len(offsets) > 1:
            raise OpRuntimeError(f"{_where(ctx)}: X has {x.lod_level} LoD levels; one is supported")
        keep = jnp.arange(data.shape[0]) < cut
    else:
        keep = jnp.arange(data.shape[0]) < count
    out = jnp.where(keep.reshape(keep.shape + (1,) * (data.ndim - 1)), data, jnp.zeros_like(data))
    out = lax.convert_element_type(out, data.dtype)
    return {"Out": LoDValue(out, offsets) if isinstance(x, LoDValue) else out}


lod_aware("lod_rank_table", "lod_tensor_to_array", "array_to_lod_tensor", "reorder_lod_tensor_by_rank",
          "shrink_rnn_memory")


# -- beam_search_decode ------------------------------------------------------------------------------
def _decode_shape(ctx: InferShapeContext) -> None:
    scores = ctx.input("Scores")
    ctx.set_output("SentenceIds", (-1,), "int64", 2)
    ctx.set_output("SentenceScores", (-1,), scores.dtype, 2)


@op("beam_search_decode", inputs="Ids Scores", outputs="SentenceIds SentenceScores",
    attrs={"beam_size": 0, "end_id": 0}, infer_shape=_decode_shape, grad=None)
def beam_search_decode(ctx):
    """Paddle's backtrace through the arrays of per-step beam_search results: from its last step
    with candidates, each source sentence's candidates become ``beam_size`` sentences, followed
    back through their prefixes (an ``end_id`` is kept once, at the end); the sentences of a source
    sorted by their final score, descending. Out: ids and scores, LoD [sources -> sentences ->
    words]; the word count is data, so the rows are padded and counted."""
    ids_arr, scores_arr = ctx.input("Ids"), ctx.input("Scores")
    for name, arr in (("Ids", ids_arr), ("Scores", scores_arr)):
        if not isinstance(arr, TensorArray) or not isinstance(arr.buffer, LoDValue) or arr.buffer.lod_level != 2:
            raise OpRuntimeError(f"{_where(ctx)}: {name} must be an array of two-level LoD tensors "
                                 "(beam_search's selected ids / scores of each step)")
    beam, end_id = int(ctx.attr("beam_size")), int(ctx.attr("end_id"))
    if beam <= 0:
        raise OpRuntimeError(f"{_where(ctx)}: beam_size must be positive, got {beam}")
    ids_all = ids_arr.buffer.data.reshape(ids_arr.buffer.data.shape[:2] + (-1,))[:, :, 0].astype(jnp.int64)
    sc_all = scores_arr.buffer.data.reshape(scores_arr.buffer.data.shape[:2] + (-1,))[:, :, 0]
    rows = min(ids_all.shape[1], sc_all.shape[1])
    ids_all, sc_all = ids_all[:, :rows], sc_all[:, :rows]
    top, inner = ids_arr.buffer.offsets
    steps, sources = int(top.shape[0]), int(top.shape[1]) - 1
    length = ids_arr.length
    k = jnp.arange(beam, dtype=jnp.int32)[None, :]

    def step(j, state):
        started, pos, valid, words, wscores, count = state
        t = steps - 1 - j
        active = t < length
        o0, o1 = top[t], inner[t]
        first = o1[o0[:-1]]                                    # [S] first candidate of each source
        ncand = o1[o0[1:]] - first
        start = active & ~started & (ncand > 0)
        c = jnp.where(start[:, None], first[:, None] + k, pos)
        cc = jnp.clip(c, 0, rows - 1)
        wid, wsc = ids_all[t][cc], sc_all[t][cc]
        start_valid = k < ncand[:, None]
        going = active & started
        push = jnp.where(start[:, None], start_valid, going[:, None] & valid & (wid != end_id))
        at = jnp.clip(count, 0, steps - 1)
        one_hot = (jnp.arange(steps)[None, None, :] == at[:, :, None]) & push[:, :, None]
        words = jnp.where(one_hot, wid[:, :, None], words)
        wscores = jnp.where(one_hot, wsc[:, :, None], wscores)
        count = count + push.astype(jnp.int32)
        prefix = (jnp.searchsorted(o1, cc, side="right") - 1).astype(jnp.int32)
        moving = start[:, None] | going[:, None]
        pos = jnp.where(moving, prefix, pos)
        valid = jnp.where(start[:, None], start_valid, valid)
        return started | start, pos, valid, words, wscores, count

    init = (jnp.zeros((sources,), bool), jnp.zeros((sources, beam), jnp.int32), jnp.zeros((sources, beam), bool),
            jnp.zeros((sources, beam, steps), jnp.int64), jnp.zeros((sources, beam, steps), sc_all.dtype),
            jnp.zeros((sources, beam), jnp.int32))
    _, _, valid, words, wscores, count = lax.fori_loop(0, steps, step, init)
    # a source's sentences by their final score (the first one pushed), best first
    final = jnp.where(valid, wscores[:, :, 0], -jnp.inf)
    order = jnp.argsort(-final, axis=1, stable=True)
    words = jnp.take_along_axis(words, order[:, :, None], axis=1).reshape(sources * beam, steps)
    wscores = jnp.take_along_axis(wscores, order[:, :, None], axis=1).reshape(sources * beam, steps)
    count = jnp.take_along_axis(count, order, axis=1).reshape(-1)
    sentence_offsets = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(count).astype(jnp.int32)])
    capacity = bucket(max(sources * beam * steps, 1))
    r = jnp.arange(capacity, dtype=jnp.int32)
    sentence = jnp.clip(jnp.searchsorted(sentence_offsets[1:], r, side="right"), 0, sources * beam - 1)
    back = count[sentence] - 1 - (r - sentence_offsets[sentence])            # words are stored last-first
    real = r < sentence_offsets[-1]
    back = jnp.clip(back, 0, steps - 1)
    out_ids = jnp.where(real, words[sentence, back], 0)
    out_scores = jnp.where(real, wscores[sentence, back], 0)
    source_offsets = jnp.arange(sources + 1, dtype=jnp.int32) * beam
    inner_count = sources * beam
    sentence_offsets = _pad_axis(sentence_offsets, bucket(inner_count) + 1, 0, edge=True)
    lod = (source_offsets, sentence_offsets)
    return {"SentenceIds": LoDValue(out_ids, lod), "SentenceScores": LoDValue(out_scores.astype(sc_all.dtype), lod)}
