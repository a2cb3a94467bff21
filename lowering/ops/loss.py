"""Losses and metrics: softmax_with_cross_entropy, cross_entropy2, huber_loss,
sigmoid_cross_entropy_with_logits, accuracy, auc (ROC area from bucketed counts), and label_smooth (the labels a loss compares
with, smoothed)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...ir.registry import op
from ...ir.shape import InferShapeContext, same_as
from ..checks import IndexInput, index_inputs
from ._shapes import dims_equal

_INT_LABELS = ("int64", "int32")


def _pick(values, label, axis: int):
    """values[..., label, ...] along ``axis`` (label has size 1 there); labels are clipped into range."""
    idx = jnp.clip(label, 0, values.shape[axis] - 1).astype(jnp.int32)
    return jnp.take_along_axis(values, idx, axis=axis)


# -- softmax_with_cross_entropy ----------------------------------------------------------------------
def _swce_shape(ctx: InferShapeContext) -> None:
    logits, label = ctx.input("Logits"), ctx.input("Label")
    ctx.check(logits.ndim >= 1, f"Logits must have rank >= 1, got {logits.shape}")
    axis = ctx.attr("axis")
    axis = axis + logits.ndim if axis < 0 else axis
    ctx.check(0 <= axis < logits.ndim, f"axis={ctx.attr('axis')} is out of range for Logits {logits.shape}")
    ctx.check(label.ndim == logits.ndim, f"Label {label.shape} must have the rank of Logits {logits.shape}")
    for i, (a, b) in enumerate(zip(logits.shape, label.shape)):
        if i != axis:
            ctx.check(dims_equal(a, b), f"Logits {logits.shape} and Label {label.shape} differ in dim {i}")
    if ctx.attr("soft_label"):
        ctx.check(dims_equal(label.shape[axis], logits.shape[axis]),
                  f"soft_label=True needs Label {label.shape} shaped like Logits {logits.shape}")
        ctx.check(label.dtype == logits.dtype,
                  f"a soft Label must have Logits' dtype {logits.dtype}, got {label.dtype}")
    else:
        ctx.check(dims_equal(label.shape[axis], 1),
                  f"hard labels need size 1 on axis {axis}, got Label {label.shape}")
        ctx.check(label.dtype in _INT_LABELS, f"hard labels must be int64 or int32, got {label.dtype}")
    loss_shape = tuple(1 if i == axis else d for i, d in enumerate(logits.shape))
    ctx.set_output("Softmax", logits.shape, logits.dtype, logits.lod_level)
    ctx.set_output("Loss", loss_shape, logits.dtype, logits.lod_level)


@op("softmax_with_cross_entropy", inputs="Logits Label", outputs="Softmax Loss",
    attrs={"soft_label": False, "use_softmax": True, "numeric_stable_mode": True, "ignore_index": -100,
           "axis": -1},
    infer_shape=_swce_shape, no_grad_inputs=["Label"], no_grad_outputs=["Softmax"])
def softmax_with_cross_entropy(ctx):
    """Softmax of Logits along ``axis`` and the cross entropy against Label, computed stably.

    Hard labels (size 1 on ``axis``) give -log softmax[label], 0 where label == ``ignore_index``;
    soft labels give -sum(label · log softmax). ``use_softmax=False`` takes Logits as
    probabilities already. As in Paddle, the gradient flows from Loss only (not from Softmax).
    """
    logits, label = ctx.input("Logits"), ctx.input("Label")
    axis = ctx.attr("axis") % logits.ndim
    if ctx.attr("use_softmax"):
        log_p = jax.nn.log_softmax(logits, axis=axis)
        softmax = jnp.exp(log_p)
    else:
        log_p = jnp.log(logits)
        softmax = logits
    if ctx.attr("soft_label"):
        loss = -jnp.sum(label * log_p, axis=axis, keepdims=True)
    else:
        loss = -_pick(log_p, label, axis)
        loss = jnp.where(label == ctx.attr("ignore_index"), jnp.zeros((), loss.dtype), loss)
    return {"Softmax": softmax, "Loss": loss}


@index_inputs("softmax_with_cross_entropy")
def _swce_indices(attr, shape):
    if attr("soft_label"):
        return []
    logits = shape("Logits")
    return [IndexInput("Label", logits[attr("axis") % len(logits)], attr("ignore_index"))]


# -- cross_entropy2 -----------------------------------------------------------------------------------
def _cross_entropy2_shape(ctx: InferShapeContext) -> None:
    x, label = ctx.input("X"), ctx.input("Label")
    ctx.check(x.ndim == label.ndim, f"X {x.shape} and Label {label.shape} must have the same rank")
    for a, b in zip(x.shape[:-1], label.shape[:-1]):
        ctx.check(dims_equal(a, b), f"X {x.shape} and Label {label.shape} differ before the last dim")
    ctx.check(dims_equal(label.shape[-1], 1), f"Label's last dim must be 1 (class indices), got {label.shape}")
    ctx.check(label.dtype in _INT_LABELS, f"Label must be int64 or int32, got {label.dtype}")
    ctx.set_output("Y", x.shape[:-1] + (1,), x.dtype, x.lod_level)
    ctx.set_output("MatchX", x.shape[:-1] + (1,), x.dtype, x.lod_level)
    ctx.set_output("XShape", x.shape + (0,), x.dtype, 0)


@op("cross_entropy2", inputs="X Label", outputs="Y XShape MatchX", attrs={"ignore_index": -100},
    infer_shape=_cross_entropy2_shape, no_grad_inputs=["Label"], no_grad_outputs=["XShape", "MatchX"])
def cross_entropy2(ctx):
    """-log(X[label]) for probabilities X and hard labels; MatchX is X[label] (0 where label ==
    ``ignore_index``, whose loss is 0 too); XShape only records X's shape (it holds no data)."""
    x, label = ctx.input("X"), ctx.input("Label")
    ignored = label == ctx.attr("ignore_index")
    match = jnp.where(ignored, jnp.zeros((), x.dtype), _pick(x, label, -1))
    y = jnp.where(ignored, jnp.zeros((), x.dtype), -jnp.log(jnp.where(ignored, jnp.ones((), x.dtype), match)))
    return {"Y": y, "MatchX": match, "XShape": jnp.zeros(tuple(x.shape) + (0,), x.dtype)}


@index_inputs("cross_entropy2")
def _cross_entropy2_indices(attr, shape):
    return [IndexInput("Label", shape("X")[-1], attr("ignore_index"))]


# -- huber_loss ---------------------------------------------------------------------------------------
def _huber_shape(ctx: InferShapeContext) -> None:
    x, y = ctx.input("X"), ctx.input("Y")
    ctx.check(x.ndim == y.ndim and all(dims_equal(a, b) for a, b in zip(x.shape, y.shape)),
              f"X {x.shape} and Y {y.shape} must have the same shape")
    ctx.check(x.dtype == y.dtype, f"X is {x.dtype} but Y is {y.dtype}")
    shape = tuple(a if a >= 0 else b for a, b in zip(x.shape, y.shape))
    ctx.set_output("Out", shape, x.dtype, x.lod_level)
    ctx.set_output("Residual", shape, x.dtype, x.lod_level)


@op("huber_loss", inputs="X Y", outputs="Out Residual", attrs={"delta": 1.0}, infer_shape=_huber_shape,
    no_grad_outputs=["Residual"])
def huber_loss(ctx):
    """With r = Y - X (saved as Residual): r²/2 where |r| <= delta, delta·(|r| - delta/2) elsewhere."""
    x, y = ctx.input("X"), ctx.input("Y")
    delta = jnp.asarray(ctx.attr("delta"), x.dtype)
    r = y - x
    a = jnp.abs(r)
    out = jnp.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))
    return {"Out": out, "Residual": r}


# -- sigmoid_cross_entropy_with_logits ------------------------------------------------------------------
def _sigmoid_ce_shape(ctx: InferShapeContext) -> None:
    x, label = ctx.input("X"), ctx.input("Label")
    ctx.check(x.ndim == label.ndim and all(dims_equal(a, b) for a, b in zip(x.shape, label.shape)),
              f"X {x.shape} and Label {label.shape} must have the same shape")
    pw = ctx.input("pos_weight")
    if pw is not None:
        ctx.check(pw.ndim == x.ndim and all(dims_equal(a, b) for a, b in zip(x.shape, pw.shape)),
                  f"pos_weight {pw.shape} must have X's shape {x.shape}")
    ctx.set_output("Out", x.shape, x.dtype, x.lod_level)


@op("sigmoid_cross_entropy_with_logits", inputs="X Label pos_weight?", outputs="Out",
    attrs={"normalize": False, "ignore_index": -100}, infer_shape=_sigmoid_ce_shape,
    no_grad_inputs=["Label", "pos_weight"])
def sigmoid_cross_entropy_with_logits(ctx):
    """Element-wise binary cross entropy of logits X against probabilities Label, computed stably:
    max(X, 0) - X·Label + log(1 + exp(-|X|)) (``pos_weight`` multiplies the log term). Elements
    whose label is ``ignore_index`` give 0; ``normalize`` divides by the number of the others."""
    x, label = ctx.input("X"), ctx.input("Label")
    label = label.astype(x.dtype)
    pw = ctx.input("pos_weight")
    softplus_neg = jnp.log1p(jnp.exp(-jnp.abs(x)))
    if pw is not None:
        # Paddle 2.6's kernel weighs only the log term (not the textbook pos_weight formula).
        softplus_neg = softplus_neg * pw.astype(x.dtype)
    out = jnp.maximum(x, 0) - x * label + softplus_neg
    kept = label != ctx.attr("ignore_index")
    out = jnp.where(kept, out, jnp.zeros((), x.dtype))
    if ctx.attr("normalize"):
        count = jnp.sum(kept).astype(x.dtype)
        out = out / jnp.maximum(count, jnp.asarray(1e-5, x.dtype))
    return {"Out": out}


# -- accuracy ---------------------------------------------------------------------------------------------
def _accuracy_shape(ctx: InferShapeContext) -> None:
    out, idx, label = ctx.input("Out"), ctx.input("Indices"), ctx.input("Label")
    ctx.check(idx.ndim == 2, f"Indices must be [N, k] (top-k indices), got {idx.shape}")
    ctx.check(label.ndim == 2 and dims_equal(label.shape[1], 1), f"Label must be [N, 1], got {label.shape}")
    ctx.check(dims_equal(idx.shape[0], label.shape[0]),
              f"Indices {idx.shape} and Label {label.shape} have different batch sizes")
    ctx.check(out.ndim == idx.ndim and all(dims_equal(a, b) for a, b in zip(out.shape, idx.shape)),
              f"Out {out.shape} and Indices {idx.shape} must have the same shape")
    ctx.set_output("Accuracy", (), "float32", 0)
    ctx.set_output("Correct", (), "int32", 0)
    ctx.set_output("Total", (), "int32", 0)


@op("accuracy", inputs="Out Indices Label", outputs="Accuracy Correct Total", infer_shape=_accuracy_shape,
    grad=None)
def accuracy(ctx):
    """Top-k accuracy: the fraction of rows whose Label is among their k Indices (from top_k).
    Correct and Total are the counts (int32), Accuracy = Correct / Total (float32)."""
    idx, label = ctx.input("Indices"), ctx.input("Label")
    hit = jnp.any(idx == label.astype(idx.dtype), axis=1)
    correct = jnp.sum(hit).astype(jnp.int32)
    total = jnp.asarray(idx.shape[0], jnp.int32)
    acc = correct.astype(jnp.float32) / jnp.maximum(total, 1).astype(jnp.float32)
    return {"Accuracy": acc, "Correct": correct, "Total": total}


# -- label_smooth -----------------------------------------------------------------------------------
@op("label_smooth", inputs="X PriorDist?", outputs="Out", attrs={"epsilon": 0.0}, infer_shape=same_as("X"),
    no_grad_inputs=["PriorDist"])
def label_smooth(ctx):
    """(1 - epsilon) · X + epsilon · PriorDist (or epsilon / classes, classes being X's last dim)."""
    x, prior = ctx.input("X"), ctx.input("PriorDist")
    eps = jnp.asarray(ctx.attr("epsilon"), x.dtype)
    other = prior.reshape(-1).astype(x.dtype) if prior is not None else 1.0 / x.shape[-1]
    return {"Out": (1 - eps) * x + eps * other}


# -- auc --------------------------------------------------------------------------------------------
def _auc_shape(ctx: InferShapeContext) -> None:
    predict, label = ctx.input("Predict"), ctx.input("Label")
    ctx.check(predict.ndim == 2, f"Predict must be [batch, 1 or 2] probabilities, got {predict.shape}")
    ctx.check(label.dtype in _INT_LABELS, f"Label must hold int32 or int64 labels, got {label.dtype}")
    ctx.check(str(ctx.attr("curve")) == "ROC", f"curve must be 'ROC' (Paddle's kernel computes it only), "
                                               f"got {ctx.attr('curve')!r}")
    ctx.set_output("AUC", (), "float64", 0)  # 0-d, as Paddle 2.6 (Fluid 1.x: [1])
    for slot in ("StatPos", "StatNeg"):
        stat = ctx.input(slot)
        ctx.set_output(slot + "Out", stat.shape, stat.dtype, 0)


def _area_under_roc(pos, neg):
    """The trapezoid area under the ROC curve of per-bucket counts (highest bucket first)."""
    pos, neg = pos[::-1].astype(jnp.float64), neg[::-1].astype(jnp.float64)
    tot_pos, tot_neg = jnp.cumsum(pos), jnp.sum(neg)
    previous = jnp.concatenate([jnp.zeros(1, jnp.float64), tot_pos[:-1]])
    area = jnp.sum(neg * (tot_pos + previous) / 2)
    both = (tot_pos[-1] > 0) & (tot_neg > 0)
    return jnp.where(both, area / jnp.where(both, tot_pos[-1] * tot_neg, 1.0), area)


@op("auc", inputs="Predict Label StatPos StatNeg InsTagWeight?", outputs="AUC StatPosOut StatNegOut",
    attrs={"curve": "ROC", "num_thresholds": 4095, "slide_steps": 1}, infer_shape=_auc_shape, grad=None)
def auc(ctx):
    """The ROC AUC of the positive-class probability (Predict's last column) against Label > 0,
    from per-bucket counts of positives and negatives (``num_thresholds + 1`` buckets). With
    ``slide_steps`` = 0 the counts StatPos/StatNeg accumulate over every batch; with k > 0 they hold
    the last k batches' buckets, their sum, and a step counter (Paddle's layout:
    ``(k + 1) * buckets + 1`` entries), and the AUC is over those k batches."""
    predict, label = ctx.input("Predict"), ctx.input("Label").reshape(-1)
    stat_pos, stat_neg = ctx.input("StatPos"), ctx.input("StatNeg")
    n, steps = int(ctx.attr("num_thresholds")), int(ctx.attr("slide_steps"))
    buckets = n + 1
    bins = (predict[:, -1] * jnp.asarray(n, predict.dtype)).astype(jnp.int32)  # in its dtype, as the kernel
    batch_pos = jnp.zeros(buckets, jnp.int64).at[bins].add((label > 0).astype(jnp.int64), mode="drop")
    batch_neg = jnp.zeros(buckets, jnp.int64).at[bins].add((label == 0).astype(jnp.int64), mode="drop")
    pos, neg = stat_pos.reshape(-1).astype(jnp.int64), stat_neg.reshape(-1).astype(jnp.int64)
    if steps == 0:
        pos, neg = pos.at[:buckets].add(batch_pos), neg.at[:buckets].add(batch_neg)
        area = _area_under_roc(pos[:buckets], neg[:buckets])
    else:
        counter = (steps + 1) * buckets
        begin = (pos[counter] % steps).astype(jnp.int32) * buckets
        total = steps * buckets

        def slide(stat, batch):
            window = jax.lax.dynamic_slice(stat, (begin,), (buckets,))
            summed = stat[total:total + buckets] - window + batch
            stat = jax.lax.dynamic_update_slice(stat, batch, (begin,))
            return stat.at[total:total + buckets].set(summed).at[counter].add(1)

        pos, neg = slide(pos, batch_pos), slide(neg, batch_neg)
        area = _area_under_roc(pos[total:total + buckets], neg[total:total + buckets])
    return {"AUC": area, "StatPosOut": pos.reshape(stat_pos.shape).astype(stat_pos.dtype),
            "StatNegOut": neg.reshape(stat_neg.shape).astype(stat_neg.dtype)}
