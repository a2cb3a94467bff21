"""Connectionist temporal classification: ``warpctc`` (the CTC loss) and ``ctc_align`` (greedy
decoding's collapse: merge repeated tokens, drop blanks).

Both take Paddle's two layouts: LoD sequences (``Logits`` [rows, classes] with a LoD ``Label``
[label rows, 1]; ``Input`` [rows, 1] ids), or padded tensors with lengths (``Logits``
[max_time, batch, classes] time-major with ``LogitsLength`` / ``LabelLength`` [batch], ``Label``
[batch, max_label]; ``Input`` [batch, time] with ``InputLength`` [batch, 1]).

``warpctc`` is warp-ctc's loss: the negative log-likelihood of the label under the softmax of the
logits (the softmax is inside the op), summed over every alignment by the forward algorithm in log
space (one ``lax.scan`` over time). Its gradient is the one Paddle's kernel gives: d loss / d
logits, divided by the sequence's length when ``norm_by_times`` (the loss itself is not); the op
writes it to ``WarpCTCGrad`` as Paddle does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ...ir.registry import op
from ...ir.shape import InferShapeContext
from ..lod_value import LoDValue, counted_rows, same_sequences
from ..lower import lod_aware

_NEG = -1e30  # log(0) that keeps gradients finite


def _lengths(offsets):
    return (offsets[1:] - offsets[:-1]).astype(jnp.int32)


def _lod_to_padded(value: LoDValue):
    """[sequences, rows, ...] from a LoD value (rows: its padded row count), and the lengths."""
    offsets = value.offsets[-1]
    lengths = _lengths(offsets)
    rows = value.data.shape[0]
    t = jnp.arange(rows, dtype=offsets.dtype)
    index = jnp.minimum(offsets[:-1, None] + t[None, :], rows - 1)
    return value.data[index], lengths


def _ctc_nll(log_probs, logit_lengths, labels, label_lengths, blank: int):
    """-log p(label | log_probs) per sequence; log_probs [batch, time, classes], labels [batch, S]."""
    batch, time, _ = log_probs.shape
    s = labels.shape[1]
    width = 2 * s + 1
    ext = jnp.full((batch, width), blank, labels.dtype).at[:, 1::2].set(labels)
    before_previous = jnp.concatenate([jnp.full((batch, 2), blank, ext.dtype), ext[:, :-2]], axis=1)
    can_skip = (ext != blank) & (ext != before_previous) & (jnp.arange(width) >= 2)[None, :]
    ext_len = 2 * label_lengths + 1
    inside = jnp.arange(width)[None, :] < ext_len[:, None]
    emit = jnp.take_along_axis(log_probs, jnp.broadcast_to(ext[:, None, :], (batch, time, width)).astype(jnp.int32),
                               axis=2)                                    # [batch, time, width]
    neg = jnp.asarray(_NEG, log_probs.dtype)
    start = jnp.where((jnp.arange(width) < 2)[None, :] & inside, emit[:, 0], neg)

    def step(alpha, t):
        one = jnp.concatenate([jnp.full((batch, 1), neg), alpha[:, :-1]], axis=1)
        two = jnp.where(can_skip, jnp.concatenate([jnp.full((batch, 2), neg), alpha[:, :-2]], axis=1), neg)
        new = jnp.logaddexp(jnp.logaddexp(alpha, one), two) + emit[:, t]
        new = jnp.where(inside, new, neg)
        return jnp.where((t < logit_lengths)[:, None], new, alpha), None

    alpha, _ = lax.scan(step, start, jnp.arange(1, time))
    last = jnp.take_along_axis(alpha, (ext_len - 1)[:, None], axis=1)[:, 0]
    before_last = jnp.take_along_axis(alpha, jnp.maximum(ext_len - 2, 0)[:, None], axis=1)[:, 0]
    total = jnp.where(label_lengths > 0, jnp.logaddexp(last, before_last), last)
    return -total


def _with_gradient(logits, losses, gradient, per_sequence):
    """``losses`` whose gradient with respect to ``logits`` is ``gradient`` (times each sequence's
    incoming gradient): the value is ``losses`` exactly, since ``logits - stop_gradient(logits)`` is
    zero; ``per_sequence`` sums a [rows or time-major, classes] array to one value per sequence."""
    delta = (logits - lax.stop_gradient(logits)) * lax.stop_gradient(gradient)
    return lax.stop_gradient(losses) + per_sequence(delta)


def _warpctc_shape(ctx: InferShapeContext) -> None:
    logits, label = ctx.input("Logits"), ctx.input("Label")
    padded = ctx.input("LogitsLength") is not None
    if padded:
        ctx.check(logits.ndim == 3, f"Logits with LogitsLength must be [max_time, batch, classes], got {logits.shape}")
        ctx.check(ctx.input("LabelLength") is not None, "LogitsLength needs LabelLength")
        ctx.check(label.ndim == 2, f"Label with LabelLength must be [batch, max_label], got {label.shape}")
        batch, grad_shape = logits.shape[1], logits.shape
    else:
        ctx.check(logits.lod_level >= 1 and label.lod_level >= 1,
                  "Logits and Label must be LoD tensors (or give LogitsLength and LabelLength)")
        ctx.check(logits.ndim == 2, f"Logits must be [rows, classes], got {logits.shape}")
        batch, grad_shape = -1, (-1, -1, logits.shape[-1])
    blank = int(ctx.attr("blank"))
    ctx.check(logits.shape[-1] < 0 or 0 <= blank < logits.shape[-1],
              f"blank {blank} must be a class of Logits' {logits.shape[-1]}")
    ctx.set_output("Loss", (batch, 1), logits.dtype, 0)
    ctx.set_output("WarpCTCGrad", grad_shape, logits.dtype, 0)


@op("warpctc", inputs="Logits Label LogitsLength? LabelLength?", outputs="Loss WarpCTCGrad",
    attrs={"blank": 0, "norm_by_times": False}, infer_shape=_warpctc_shape,
    no_grad_inputs=["Label", "LogitsLength", "LabelLength"], no_grad_outputs=["WarpCTCGrad"])
def warpctc(ctx):
    """The CTC loss of each sequence, [batch, 1] (see the module docstring)."""
    logits, label = ctx.input("Logits"), ctx.input("Label")
    blank = int(ctx.attr("blank"))
    if ctx.has_input("LogitsLength"):
        batch_major = jnp.swapaxes(logits, 0, 1)
        logit_lengths = ctx.input("LogitsLength").reshape(-1).astype(jnp.int32)
        labels = label.astype(jnp.int32)
        label_lengths = ctx.input("LabelLength").reshape(-1).astype(jnp.int32)
    else:
        batch_major, logit_lengths = _lod_to_padded(logits)
        labels, label_lengths = _lod_to_padded(label)
        labels = labels.reshape(labels.shape[:2]).astype(jnp.int32)
    valid_time = jnp.arange(batch_major.shape[1])[None, :] < logit_lengths[:, None]

    def total(x):
        losses = _ctc_nll(jax.nn.log_softmax(x, axis=-1), logit_lengths, labels, label_lengths, blank)
        return jnp.sum(losses), losses

    gradient, losses = jax.grad(total, has_aux=True)(lax.stop_gradient(batch_major))
    gradient = jnp.where(valid_time[:, :, None], gradient, 0)
    if ctx.attr("norm_by_times"):
        gradient = gradient / jnp.maximum(logit_lengths, 1).astype(gradient.dtype)[:, None, None]
    time_major = jnp.swapaxes(gradient, 0, 1)
    if ctx.has_input("LogitsLength"):
        loss = _with_gradient(logits, losses, time_major, lambda d: jnp.sum(d, axis=(0, 2)))
    else:
        data, offsets = logits.data, logits.offsets[-1]
        sequences = offsets.shape[0] - 1
        seq = logits.segment_ids()
        real = seq < sequences
        seq = jnp.minimum(seq, sequences - 1)
        step = jnp.clip(jnp.arange(data.shape[0]) - offsets[seq], 0, gradient.shape[1] - 1)
        per_row = jnp.where(real[:, None], gradient[seq, step], 0)
        loss = _with_gradient(data, losses, per_row,
                              lambda d: jax.ops.segment_sum(jnp.sum(d, axis=1), seq, num_segments=sequences))
    loss = loss.reshape(-1, 1).astype(logits.dtype)
    if logits.__class__ is LoDValue:      # one row per sequence: padding sequences not counted
        loss = counted_rows(loss, logits.offsets[0])
    return {"Loss": loss, "WarpCTCGrad": time_major}


# -- ctc_align -------------------------------------------------------------------------------------
def _ctc_align_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("Input")
    ctx.check(x.dtype in ("int32", "int64"), f"Input must hold int32 or int64 ids, got {x.dtype}")
    if ctx.input("InputLength") is not None:
        ctx.check(x.ndim == 2, f"Input with InputLength must be [batch, time], got {x.shape}")
        ctx.set_output("Output", x.shape, x.dtype, 0)
        ctx.set_output("OutputLength", (x.shape[0], 1), ctx.input("InputLength").dtype, 0)
    else:
        ctx.check(x.lod_level >= 1, "Input must be a LoD tensor of ids (or give InputLength)")
        ctx.check(x.ndim == 2 and x.shape[1] in (1, -1), f"Input must be [rows, 1], got {x.shape}")
        ctx.set_output("Output", (-1, 1), x.dtype, 1)


def _kept(ids, valid, first, blank: int, merge: bool):
    keep = valid & (ids != blank)
    if merge:
        previous = jnp.concatenate([jnp.full(ids.shape[:-1] + (1,), -1, ids.dtype), ids[..., :-1]], axis=-1)
        keep = keep & (first | (ids != previous))
    return keep


@op("ctc_align", inputs="Input InputLength?", outputs="Output OutputLength?",
    attrs={"blank": 0, "merge_repeated": True, "padding_value": 0}, infer_shape=_ctc_align_shape, grad=None)
def ctc_align(ctx):
    """Each sequence with repeated tokens merged (``merge_repeated``) and then ``blank`` removed; in
    the padded layout the rest of each row is ``padding_value`` and OutputLength the kept count."""
    x = ctx.input("Input")
    blank, merge = int(ctx.attr("blank")), bool(ctx.attr("merge_repeated"))
    if ctx.has_input("InputLength"):
        lengths = ctx.input("InputLength").reshape(-1)
        time = jnp.arange(x.shape[1])
        keep = _kept(x, time[None, :] < lengths[:, None], (time == 0)[None, :], blank, merge)
        position = jnp.where(keep, jnp.cumsum(keep, axis=1) - 1, x.shape[1])
        out = jnp.full_like(x, int(ctx.attr("padding_value")))
        out = jax.vmap(lambda o, p, v: o.at[p].set(v, mode="drop"))(out, position, x)
        count = jnp.sum(keep, axis=1).astype(ctx.input("InputLength").dtype)
        return {"Output": out, "OutputLength": count.reshape(-1, 1)}
    rows = x.data.shape[0]
    ids = x.data.reshape(rows)
    offsets = x.offsets[-1]
    first = jnp.zeros(rows, bool).at[offsets[:-1]].set(True, mode="drop")
    keep = _kept(ids, x.row_mask(), first, blank, merge)
    before = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(keep.astype(jnp.int32))])
    out = jnp.zeros_like(ids).at[jnp.where(keep, before[:-1], rows)].set(ids, mode="drop")
    last = before[offsets]
    if len(x.offsets) == 1:               # the outermost level rebuilt: its real count kept
        last = same_sequences(last, offsets)
    return {"Output": LoDValue(out.reshape(rows, 1), x.offsets[:-1] + (last,))}


lod_aware("warpctc", "ctc_align")
