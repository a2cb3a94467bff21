"""Structured prediction and evaluation over sequences: ``linear_chain_crf``, ``crf_decoding``,
``chunk_eval`` and ``edit_distance``.

Each op takes its sequences either as LoD rows (one LoD level; inside a step the rows are padded
to a bucket, ``lowering/lod_value.py``) or, as Paddle 2.x also allows, as a padded batch
``[batch, max_len, ...]`` with a ``Length`` input. Both become one *row layout*: the rows of all
sequences, where sequence ``n`` holds rows ``starts[n] .. starts[n] + lengths[n] - 1``.

The CRF recursions are sequential in time. They run as ``lax.while_loop`` over the positions
``t < max(lengths)`` — a traced bound, so the loop costs the longest real sequence, not the row
bucket — over all sequences at once, gathering row ``starts + t`` of each. Rows past a
sequence's end are never read, and writes for them go to an out-of-range index that is dropped,
so padding reaches no result and no gradient. The forward algorithm works in log space,
normalizing every step as Paddle does (its outputs are the same quantities: ``Alpha`` is the
normalized forward vector). A while loop with a traced bound has no reverse-mode derivative,
so the log partition function carries its gradient explicitly (``jax.custom_vjp``): the
forward-backward marginals, which is what Paddle's ``linear_chain_crf_grad`` computes.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ...ir.registry import op
from ...ir.shape import InferShapeContext
from ..checks import IndexInput, index_inputs
from ..lod_value import LoDValue, counted_rows, sequence_count
from ..lower import lod_aware

# Rows 0 and 1 of a CRF's Transition are the start and end weights; transitions follow.
_TRANSITION_BASE = 2


# -- the row layout ---------------------------------------------------------------------------
class _Rows(NamedTuple):
    """Sequences as rows: ``starts``/``lengths`` per sequence, ``seg``/``pos``/``real`` per row."""

    starts: jax.Array     # [N] int32: first row of each sequence
    lengths: jax.Array    # [N] int32
    seg: jax.Array        # [R] int32: the row's sequence (clipped to a valid index)
    pos: jax.Array        # [R] int32: the row's position within its sequence
    real: jax.Array       # [R] bool: the row belongs to a sequence

    @property
    def n_seqs(self) -> int:
        return self.starts.shape[0]

    @property
    def is_last(self) -> jax.Array:
        return self.real & (self.pos == self.lengths[self.seg] - 1)


def _lod_rows(offsets, rows: int) -> _Rows:
    offsets = offsets.astype(jnp.int32)
    count = offsets.shape[0] - 1
    r = jnp.arange(rows, dtype=jnp.int32)
    seg = jnp.searchsorted(offsets[1:], r, side="right").astype(jnp.int32)
    real = seg < count
    seg = jnp.minimum(seg, max(count - 1, 0))
    pos = r - offsets[seg]
    return _Rows(offsets[:-1], offsets[1:] - offsets[:-1], seg, pos, real)


def _padded_rows(lengths, batch: int, width: int) -> _Rows:
    """Rows of a padded [batch, width, ...] input: sequence n is rows n*width .. n*width+len-1."""
    lengths = jnp.clip(jnp.asarray(lengths).reshape(-1).astype(jnp.int32), 0, width)
    r = jnp.arange(batch * width, dtype=jnp.int32)
    seg, pos = r // width, r % width
    return _Rows(jnp.arange(batch, dtype=jnp.int32) * width, lengths, seg, pos, pos < lengths[seg])


def _data(value):
    return value.data if value.__class__ is LoDValue else value


def _at_position(rows: _Rows, t, total: int):
    """For every sequence: whether position t exists, and its row (``total``, dropped on write,
    where it does not)."""
    valid = t < rows.lengths
    return valid, jnp.where(valid, rows.starts + t, total)


def _gather(table, index):
    return table[jnp.minimum(index, table.shape[0] - 1)]


def _logsumexp(x, axis):
    return jax.nn.logsumexp(x, axis=axis)


def _shifted_exp(x, axis):
    """(exp(x - max), max) along ``axis``: exponentials that neither overflow nor all vanish."""
    peak = lax.stop_gradient(jnp.max(x, axis=axis, keepdims=True))
    return jnp.exp(x - peak), peak


def _small(dtype):
    """Below this a sum of shifted exponentials has lost precision to underflow: the exact
    log-space form takes over (only for scores whose spread is in the hundreds)."""
    return float(jnp.finfo(dtype).tiny) ** 0.5


def _log_matmul(a, w):
    """log(exp(a) @ exp(w)) for a [N, D] and w [D, D]: one matmul between shifted exponentials
    (a log-space sum over an [N, D, D] tensor costs D times more exponentials), or that exact
    sum when the matmul underflows."""
    ea, a_peak = _shifted_exp(a, 1)
    ew, w_peak = _shifted_exp(w, 0)
    total = ea @ ew
    return lax.cond(jnp.min(total) > _small(a.dtype),
                    lambda: jnp.log(total) + a_peak + w_peak,
                    lambda: _logsumexp(a[:, :, None] + w[None], axis=1))


# -- the CRF forward algorithm and its gradient ------------------------------------------------
def _forward(x, trans, rows: _Rows):
    """log Z per sequence and the normalized log forward vectors per row (0 where none)."""
    total, tags = x.shape
    start, end, w = trans[0], trans[1], trans[_TRANSITION_BASE:]
    max_len = jnp.max(rows.lengths, initial=0)
    valid, index = _at_position(rows, 0, total)
    alpha = start + _gather(x, index)
    norm = _logsumexp(alpha, -1)
    alpha = alpha - norm[:, None]
    buf = jnp.zeros_like(x).at[index].set(alpha, mode="drop")

    def step(state):
        t, alpha, log_z, buf = state
        valid, index = _at_position(rows, t, total)
        new = _gather(x, index) + _log_matmul(alpha, w)
        norm = _logsumexp(new, -1)
        new = new - norm[:, None]
        return (t + 1, jnp.where(valid[:, None], new, alpha), jnp.where(valid, log_z + norm, log_z),
                buf.at[index].set(new, mode="drop"))

    _, alpha, log_z, buf = lax.while_loop(lambda s: s[0] < max_len, step, (jnp.int32(1), alpha, norm, buf))
    log_z = log_z + _logsumexp(alpha + end, -1)
    return jnp.where(rows.lengths > 0, log_z, jnp.zeros((), x.dtype)), buf


def _backward(x, trans, rows: _Rows, log_alpha, g):
    """d(sum_n g_n log Z_n) / d(x, trans): g times the forward-backward marginals."""
    total, tags = x.shape
    end, w = trans[1], trans[_TRANSITION_BASE:]
    zero = jnp.zeros((), x.dtype)
    max_len = jnp.max(rows.lengths, initial=0)
    ew = jnp.exp(w - jnp.max(w))

    def step(state):
        t, beta_next, x_next, dx, d_start, d_end, d_w = state
        valid, index = _at_position(rows, t, total)
        last = t == rows.lengths - 1
        inner = t < rows.lengths - 1
        xt, alpha = _gather(x, index), _gather(log_alpha, index)
        ahead = x_next + beta_next                                  # log (x_{t+1} beta_{t+1})
        # The pair marginals P_n(i, j) ∝ alpha_n(i) w(i, j) ahead_n(j) (probability space), summed
        # over sequences with weights g_n: one [D, N] @ [N, D] product.
        ea, _ = _shifted_exp(alpha, 1)
        eh, _ = _shifted_exp(ahead, 1)
        mass = jnp.sum((ea @ ew) * eh, axis=1)
        weight = jnp.where(inner, g, zero)

        def fast():
            return ew * (ea.T @ ((weight / jnp.where(inner, mass, 1))[:, None] * eh))

        def exact():
            pair = alpha[:, :, None] + w[None] + ahead[:, None, :]      # [N, from, to]
            pair = jnp.exp(pair - _logsumexp(pair, (1, 2))[:, None, None])
            return jnp.einsum("n,nij->ij", weight, jnp.where(inner[:, None, None], pair, zero))

        d_w = d_w + lax.cond(jnp.min(jnp.where(inner, mass, 1)) > _small(x.dtype), fast, exact)
        beta = jnp.where(last[:, None], end[None], _log_matmul(ahead, w.T))
        beta = beta - _logsumexp(beta, -1)[:, None]
        marginal = jax.nn.softmax(alpha + beta, axis=-1)
        weighted = jnp.where(valid[:, None], g[:, None] * marginal, zero)
        d_start = d_start + jnp.where((t == 0) & valid, 1, 0).astype(x.dtype) @ weighted
        d_end = d_end + jnp.where(last, 1, 0).astype(x.dtype) @ weighted
        return (t - 1, jnp.where(valid[:, None], beta, beta_next), jnp.where(valid[:, None], xt, x_next),
                dx.at[index].set(weighted, mode="drop"), d_start, d_end, d_w)

    n = rows.n_seqs
    state = (max_len - 1, jnp.zeros((n, tags), x.dtype), jnp.zeros((n, tags), x.dtype), jnp.zeros_like(x),
             jnp.zeros((tags,), x.dtype), jnp.zeros((tags,), x.dtype), jnp.zeros((tags, tags), x.dtype))
    _, _, _, dx, d_start, d_end, d_w = lax.while_loop(lambda s: s[0] >= 0, step, state)
    return dx, jnp.concatenate([d_start[None], d_end[None], d_w])


@jax.custom_vjp
def _log_partition(x, trans, rows: _Rows):
    return _forward(x, trans, rows)


def _log_partition_fwd(x, trans, rows):
    log_z, log_alpha = _forward(x, trans, rows)
    return (log_z, log_alpha), (x, trans, rows, log_alpha)


def _log_partition_bwd(residuals, cotangents):
    x, trans, rows, log_alpha = residuals
    g, _ = cotangents                # Alpha is an intermediate: no gradient flows back through it
    dx, d_trans = _backward(x, trans, rows, log_alpha, g)
    return dx, d_trans, jax.tree_util.tree_map(lambda _: None, rows)


_log_partition.defvjp(_log_partition_fwd, _log_partition_bwd)


def _label_score(x, trans, labels, rows: _Rows):
    """The unnormalized log score of each sequence's labelling (differentiated by JAX)."""
    start, end, w = trans[0], trans[1], trans[_TRANSITION_BASE:]
    zero = jnp.zeros((), x.dtype)
    emit = jnp.take_along_axis(x, labels[:, None], axis=1)[:, 0]
    previous = jnp.roll(labels, 1)
    step = jnp.where(rows.pos == 0, start[labels], w[previous, labels])
    score = emit + step + jnp.where(rows.is_last, end[labels], zero)
    return jax.ops.segment_sum(jnp.where(rows.real, score, zero), rows.seg, num_segments=rows.n_seqs)


# -- linear_chain_crf --------------------------------------------------------------------------
def _check_transition(ctx: InferShapeContext, tags: int) -> None:
    t = ctx.input("Transition")
    ctx.check(t.ndim == 2, f"Transition must be [tags + 2, tags], got shape {t.shape}")
    if tags > 0 and t.shape[1] > 0:
        ctx.check(t.shape[1] == tags and (t.shape[0] < 0 or t.shape[0] == tags + 2),
                  f"Transition must be [tags + 2, tags] = [{tags + 2}, {tags}] for {tags} tags "
                  f"(start weights, end weights, then transitions); got {t.shape}")


def _crf_shape(ctx: InferShapeContext) -> None:
    e, label = ctx.input("Emission"), ctx.input("Label")
    if ctx.input("Length") is not None:
        ctx.check(e.ndim == 3, f"with Length, Emission must be a padded [batch, max_len, tags] tensor, got {e.shape}")
        shape, count = tuple(e.shape), e.shape[0]
    else:
        ctx.check(e.ndim == 2, f"Emission must be [rows, tags] (a LoD tensor), got shape {e.shape}")
        ctx.check(label.lod_level >= 1, "Label must be a LoD tensor (lod_level 1) holding the tag of every row, "
                                        "or give Length with padded inputs; got lod_level 0")
        shape, count = tuple(e.shape), -1
    _check_transition(ctx, shape[-1])
    ctx.check(str(label.dtype) == "int64", f"Label must be int64, got {label.dtype}")
    ctx.set_output("Alpha", shape, e.dtype, 0)
    ctx.set_output("EmissionExps", shape, e.dtype, 0)
    ctx.set_output("TransitionExps", ctx.input("Transition").shape, e.dtype, 0)
    ctx.set_output("LogLikelihood", (count, 1), e.dtype, 0)


def _sequences(ctx, slot: str, length_slot: str, like_slot: str | None = None):
    """(rows of input ``slot`` as [R, ...], the row layout, padded shape or None) for a LoD input
    or a padded one with a ``length_slot`` input. ``like_slot``: another LoD input whose offsets
    Paddle uses instead (linear_chain_crf takes the Label's)."""
    value = ctx.input(slot)
    length = ctx.input(length_slot)
    if length is not None:
        data = _data(value)
        batch, width = data.shape[0], data.shape[1]
        return data.reshape((batch * width,) + data.shape[2:]), _padded_rows(length, batch, width), (batch, width)
    source = ctx.input(like_slot) if like_slot is not None else None
    source = source if source.__class__ is LoDValue else value
    if source.__class__ is not LoDValue:
        raise TypeError(f"{ctx.opdef.type}: {slot} must be a LoD tensor (fed as a LoDTensor) or come with "
                        f"{length_slot}")
    data = _data(value)
    return data, _lod_rows(source.offsets[-1], data.shape[0]), None


def _flat_labels(label, rows: int, tags: int | None = None):
    flat = _data(label).reshape(-1)[:rows].astype(jnp.int32)
    if flat.shape[0] < rows:                       # a LoD label padded to fewer rows than the emission
        flat = jnp.concatenate([flat, jnp.zeros(rows - flat.shape[0], jnp.int32)])
    return flat if tags is None else jnp.clip(flat, 0, tags - 1)


@op("linear_chain_crf", inputs="Emission Transition Label Length?",
    outputs="Alpha EmissionExps TransitionExps LogLikelihood", infer_shape=_crf_shape,
    no_grad_inputs=["Label", "Length"], no_grad_outputs=["Alpha", "EmissionExps", "TransitionExps"])
def linear_chain_crf(ctx):
    """The negative log-likelihood of each sequence's labelling under a linear-chain CRF.

    Emission: [rows, tags] with one LoD level (or [batch, max_len, tags] with Length);
    Transition: [tags + 2, tags] — start weights, end weights, then ``w[i, j]`` for tag i → j;
    Label: int64, one tag per row. LogLikelihood is [sequences, 1] and, as in Paddle, holds
    ``log Z - score(label)`` (the *negative* log-likelihood, the cost to minimize); an empty
    sequence gives 0. Alpha holds the normalized forward vectors, EmissionExps
    ``exp(x - max(x))`` per row, TransitionExps ``exp(Transition)``.
    """
    x, rows, padded = _sequences(ctx, "Emission", "Length", like_slot="Label")
    trans = jnp.asarray(ctx.input("Transition")).astype(x.dtype)
    tags = x.shape[-1]
    labels = _flat_labels(ctx.input("Label"), x.shape[0], tags)
    log_z, log_alpha = _log_partition(x, trans, rows)
    nll = log_z - _label_score(x, trans, labels, rows)
    zero = jnp.zeros((), x.dtype)
    alpha = jnp.where(rows.real[:, None], jnp.exp(log_alpha), zero)
    emission_exps = jnp.exp(x - jnp.max(x, axis=1, keepdims=True))
    if padded is None:
        emission_exps = jnp.where(rows.real[:, None], emission_exps, zero)
    else:      # Paddle fills EmissionExps for every padded position too
        alpha, emission_exps = alpha.reshape(padded + (tags,)), emission_exps.reshape(padded + (tags,))
    nll = nll[:, None]
    emission = ctx.input("Emission")
    if emission.__class__ is LoDValue:     # one row per sequence: padding sequences not counted
        nll = counted_rows(nll, emission.offsets[0])
    return {"Alpha": alpha, "EmissionExps": emission_exps, "TransitionExps": jnp.exp(trans),
            "LogLikelihood": nll}


# -- crf_decoding ------------------------------------------------------------------------------
def _viterbi(x, trans, rows: _Rows):
    """The best tag of every row (0 for rows of no sequence), ties to the lowest tag as Paddle."""
    total, tags = x.shape
    start, end, w = trans[0], trans[1], trans[_TRANSITION_BASE:]
    max_len = jnp.max(rows.lengths, initial=0)
    _, index = _at_position(rows, 0, total)
    score = start + _gather(x, index)

    def forward(state):
        t, score, track = state
        valid, index = _at_position(rows, t, total)
        candidates = score[:, :, None] + w[None]                    # [N, from, to]
        new = jnp.max(candidates, axis=1) + _gather(x, index)
        return (t + 1, jnp.where(valid[:, None], new, score),
                track.at[index].set(jnp.argmax(candidates, axis=1).astype(jnp.int32), mode="drop"))

    track = jnp.zeros((total, tags), jnp.int32)
    _, score, track = lax.while_loop(lambda s: s[0] < max_len, forward, (jnp.int32(1), score, track))
    best_last = jnp.argmax(score + end, axis=-1).astype(jnp.int32)

    def backward(state):
        t, tag, path = state
        valid, index = _at_position(rows, t, total)
        tag = jnp.where(t == rows.lengths - 1, best_last, tag)
        path = path.at[index].set(tag, mode="drop")
        before = _gather(track, index)[jnp.arange(tag.shape[0]), tag]
        return t - 1, jnp.where(valid, before, tag), path

    path = jnp.zeros((total,), jnp.int32)
    _, _, path = lax.while_loop(lambda s: s[0] >= 0, backward, (max_len - 1, best_last, path))
    return path


def _decoding_shape(ctx: InferShapeContext) -> None:
    e = ctx.input("Emission")
    if ctx.input("Length") is not None:
        ctx.check(e.ndim == 3, f"with Length, Emission must be a padded [batch, max_len, tags] tensor, got {e.shape}")
        ctx.set_output("ViterbiPath", (e.shape[0], e.shape[1]), "int64", 0)
    else:
        ctx.check(e.ndim == 2 and e.lod_level == 1,
                  f"Emission must be a [rows, tags] LoD tensor with one level (or give Length with a padded "
                  f"[batch, max_len, tags] Emission); got shape {e.shape}, lod_level {e.lod_level}")
        ctx.set_output("ViterbiPath", (-1, 1), "int64", 1)
    _check_transition(ctx, e.shape[-1])


@op("crf_decoding", inputs="Emission Transition Label? Length?", outputs="ViterbiPath",
    infer_shape=_decoding_shape, grad=None)
def crf_decoding(ctx):
    """The Viterbi path of each sequence under the CRF (Transition as for linear_chain_crf).

    Without Label: ViterbiPath holds the best tag of every row (int64, [rows, 1] with Emission's
    LoD, or [batch, max_len] with Length, 0 past each length). With Label: 1 where the best tag
    equals the label, else 0 (the input chunk_eval expects during training), as in Paddle.
    """
    x, rows, padded = _sequences(ctx, "Emission", "Length")
    trans = jnp.asarray(ctx.input("Transition")).astype(x.dtype)
    path = _viterbi(x, trans, rows)
    label = ctx.input("Label")
    if label is not None:
        path = (path == _flat_labels(label, x.shape[0])).astype(jnp.int32)
    path = jnp.where(rows.real, path, 0).astype(jnp.int64)
    if padded is not None:
        return {"ViterbiPath": path.reshape(padded)}
    return {"ViterbiPath": LoDValue(path[:, None], ctx.input("Emission").offsets)}


# -- chunk_eval --------------------------------------------------------------------------------
# scheme -> (tag types, begin, inside, end, single); -1: the scheme has no such tag.
_SCHEMES = {"IOB": (2, 0, 1, -1, -1), "IOE": (2, -1, 0, 1, -1), "IOBES": (4, 0, 1, 2, 3),
            "plain": (1, -1, -1, -1, -1)}


def _chunks(labels, rows: _Rows, scheme: str, num_chunk_types: int):
    """Per row: whether a chunk ends there, the row its chunk began at, and its chunk type.

    Paddle's chunk parser is a left-to-right state machine; its state after a row is simply
    "inside a chunk" iff the row's type is not the "other" type (every tag of a chunk type either
    continues the open chunk or ends it and begins another), so each row's begin/end decisions
    depend only on it and the row before, and the whole batch is parsed at once.
    """
    n_tags, t_begin, t_inside, t_end, t_single = _SCHEMES[scheme]
    other = num_chunk_types
    tag, kind = labels % n_tags, labels // n_tags
    first = rows.pos == 0
    prev_tag = jnp.where(first, -1, jnp.roll(tag, 1))
    prev_kind = jnp.where(first, other, jnp.roll(kind, 1))
    same = kind == prev_kind
    ends_before = (prev_kind != other) & ((kind == other) | ~same
                                          | (((prev_tag == t_begin) | (prev_tag == t_inside))
                                             & ((tag == t_begin) | (tag == t_single)))
                                          | (prev_tag == t_end) | (prev_tag == t_single))
    begins = jnp.where(prev_kind == other, kind != other,
                       (kind != other) & (~same | (tag == t_begin) | (tag == t_single)
                                          | (((tag == t_inside) | (tag == t_end))
                                             & ((prev_tag == t_end) | (prev_tag == t_single)))))
    next_ends = jnp.roll(ends_before, -1)
    ends = rows.real & (kind != other) & (rows.is_last | next_ends)
    r = jnp.arange(labels.shape[0], dtype=jnp.int32)
    began_at = lax.cummax(jnp.where(begins & rows.real, r, -1), axis=0)
    return ends, began_at, kind


def _chunk_eval_shape(ctx: InferShapeContext) -> None:
    inference, label = ctx.input("Inference"), ctx.input("Label")
    ctx.check(tuple(inference.shape) == tuple(label.shape),
              f"Inference and Label must have the same shape, got {inference.shape} and {label.shape}")
    ctx.check(str(ctx.attr("chunk_scheme")) in _SCHEMES,
              f"chunk_scheme must be one of {list(_SCHEMES)}, got {ctx.attr('chunk_scheme')!r}")
    if ctx.input("SeqLength") is None:
        ctx.check(label.lod_level == 1, "Label must be a LoD tensor with one level, or give SeqLength with padded "
                                        f"[batch, max_len] inputs; got lod_level {label.lod_level}")
    for slot in ("Precision", "Recall", "F1-Score"):
        ctx.set_output(slot, (1,), "float32", 0)
    for slot in ("NumInferChunks", "NumLabelChunks", "NumCorrectChunks"):
        ctx.set_output(slot, (1,), "int64", 0)


@op("chunk_eval", inputs="Inference Label SeqLength?",
    outputs="Precision Recall F1-Score NumInferChunks NumLabelChunks NumCorrectChunks",
    attrs={"num_chunk_types": 0, "chunk_scheme": "IOB", "excluded_chunk_types": []},
    infer_shape=_chunk_eval_shape, grad=None)
def chunk_eval(ctx):
    """Precision, recall and F1 of the chunks found in Inference against those in Label (int64
    tag ids, ``tag = id % tag_types``, ``type = id // tag_types``; the type ``num_chunk_types``
    is "outside"), with the chunk counts, over the whole batch; chunks of
    ``excluded_chunk_types`` are not counted."""
    labels, rows, _ = _sequences(ctx, "Label", "SeqLength")
    inference = _flat_labels(ctx.input("Inference"), labels.shape[0]).astype(jnp.int64)
    labels = labels.reshape(-1).astype(jnp.int64)
    scheme, types = str(ctx.attr("chunk_scheme")), int(ctx.attr("num_chunk_types"))
    excluded = jnp.asarray(sorted(set(int(v) for v in ctx.attr("excluded_chunk_types") or ())) or [-1], jnp.int64)
    ends_i, begin_i, kind_i = _chunks(inference, rows, scheme, types)
    ends_l, begin_l, kind_l = _chunks(labels, rows, scheme, types)
    counted_i = ends_i & ~jnp.isin(kind_i, excluded)
    counted_l = ends_l & ~jnp.isin(kind_l, excluded)
    correct = counted_i & ends_l & (begin_i == begin_l) & (kind_i == kind_l)
    n_infer, n_label, n_correct = (jnp.sum(v, dtype=jnp.int64) for v in (counted_i, counted_l, correct))
    f32 = jnp.float32
    precision = jnp.where(n_infer > 0, n_correct.astype(f32) / jnp.maximum(n_infer, 1).astype(f32), f32(0))
    recall = jnp.where(n_label > 0, n_correct.astype(f32) / jnp.maximum(n_label, 1).astype(f32), f32(0))
    f1 = jnp.where(n_correct > 0, 2 * precision * recall / jnp.where(n_correct > 0, precision + recall, f32(1)),
                   f32(0))
    return {"Precision": precision[None], "Recall": recall[None], "F1-Score": f1[None],
            "NumInferChunks": n_infer[None], "NumLabelChunks": n_label[None], "NumCorrectChunks": n_correct[None]}


# -- edit_distance -----------------------------------------------------------------------------
def _edit_distance_shape(ctx: InferShapeContext) -> None:
    hyps, refs = ctx.input("Hyps"), ctx.input("Refs")
    with_lengths = ctx.input("HypsLength") is not None
    ctx.check(with_lengths == (ctx.input("RefsLength") is not None),
              "give both HypsLength and RefsLength (padded inputs) or neither (LoD inputs)")
    if with_lengths:
        count = hyps.shape[0]
    else:
        ctx.check(hyps.lod_level >= 1 and refs.lod_level >= 1,
                  f"Hyps and Refs must be LoD tensors (or give HypsLength/RefsLength with padded inputs); "
                  f"got lod_level {hyps.lod_level} and {refs.lod_level}")
        count = -1
    ctx.set_output("SequenceNum", (1,), "int64", 0)
    ctx.set_output("Out", (count, 1), "float32", 0)


def _tokens(ctx, slot: str, length_slot: str):
    """([N, width] tokens of each sequence, [N] lengths), width a static bound."""
    value, length = ctx.input(slot), ctx.input(length_slot)
    if length is not None:
        data = _data(value)
        tokens = data.reshape(data.shape[0], -1)
        return tokens, jnp.clip(jnp.asarray(length).reshape(-1).astype(jnp.int32), 0, tokens.shape[1])
    if value.__class__ is not LoDValue:
        raise TypeError(f"edit_distance: {slot} must be a LoD tensor (fed as a LoDTensor) or come with {length_slot}")
    offsets = value.offsets[-1].astype(jnp.int32)
    flat = value.data.reshape(-1)
    width = flat.shape[0]
    index = offsets[:-1, None] + jnp.arange(width, dtype=jnp.int32)[None]
    return _gather(flat, index), offsets[1:] - offsets[:-1]


@op("edit_distance", inputs="Hyps Refs HypsLength? RefsLength?", outputs="SequenceNum Out",
    attrs={"normalized": False}, infer_shape=_edit_distance_shape, grad=None)
def edit_distance(ctx):
    """The Levenshtein distance between each hypothesis and its reference (int64 token
    sequences), divided by the reference's length when ``normalized``; SequenceNum is the number
    of pairs. Paddle refuses an empty reference when normalized; here it gives inf (or NaN for
    two empty sequences): the check would need the host.
    """
    hyps, hyp_len = _tokens(ctx, "Hyps", "HypsLength")
    refs, ref_len = _tokens(ctx, "Refs", "RefsLength")
    count, width = refs.shape
    j = jnp.arange(width + 1, dtype=jnp.int32)
    # Row i of the DP table over reference positions; row 0 is 0, 1, 2, ...
    first = jnp.broadcast_to(j, (count, width + 1))
    done = jnp.take_along_axis(first, ref_len[:, None], axis=1)[:, 0]

    def step(state):
        i, row, done = state
        token = _gather(hyps.T, i)                                   # [N]: the i-th hypothesis token
        cost = (refs != token[:, None]).astype(jnp.int32)
        # Without insertions, row i is min(deletion, substitution); an insertion chain from k to
        # j adds j - k, so the full row is j + cummin_k(best[k] - k).
        best = jnp.concatenate([jnp.full((count, 1), i + 1, jnp.int32),
                                jnp.minimum(row[:, 1:] + 1, row[:, :-1] + cost)], axis=1)
        new = j + lax.cummin(best - j, axis=1)
        reached = i + 1 == hyp_len
        return i + 1, new, jnp.where(reached, jnp.take_along_axis(new, ref_len[:, None], axis=1)[:, 0], done)

    steps = jnp.max(hyp_len, initial=0)
    _, _, distance = lax.while_loop(lambda s: s[0] < steps, step, (jnp.int32(0), first, done))
    out = distance.astype(jnp.float32)
    if ctx.attr("normalized"):
        out = out / ref_len.astype(jnp.float32)
    out = out[:, None]
    hyps_in = ctx.input("Hyps")
    real = sequence_count(hyps_in.offsets[0]) if hyps_in.__class__ is LoDValue else None
    if real is not None:                   # padding sequences (FLAGS_bucket_sequences) not counted
        out, count = counted_rows(out, hyps_in.offsets[0]), real
    return {"SequenceNum": jnp.reshape(jnp.asarray(count, jnp.int64), (1,)), "Out": out}


lod_aware("linear_chain_crf", "crf_decoding", "chunk_eval", "edit_distance")


@index_inputs("linear_chain_crf")
def _crf_label_indices(attr, shape):
    tags = shape("Transition")[1] if len(shape("Transition") or ()) == 2 else -1
    return [IndexInput("Label", tags)] if tags > 0 else []


@index_inputs("chunk_eval")
def _chunk_eval_indices(attr, shape):
    scheme = str(attr("chunk_scheme"))
    if scheme not in _SCHEMES:
        return []
    size = int(attr("num_chunk_types")) * _SCHEMES[scheme][0] + 1       # the last id is "outside"
    return [IndexInput("Inference", size), IndexInput("Label", size)]
