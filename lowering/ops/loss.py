"""Losses and metrics: softmax_with_cross_entropy, cross_entropy2, huber_loss, Fluid 1.x's kldiv_loss, log_loss,
teacher_student_sigmoid_loss, rank_loss, margin_rank_loss, bpr_loss, smooth_l1_loss, sigmoid_focal_loss,
sigmoid_cross_entropy_with_logits, accuracy, auc (ROC area from bucketed counts), and label_smooth (the labels a loss compares
with, smoothed)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...ir.registry import op
from ...ir.shape import InferShapeContext, same_as
from ..checks import IndexInput, index_inputs
from ..lod_value import LoDValue
from ..lower import lod_aware
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
    Correct and Total are the counts (int32), Accuracy = Correct / Total (float32). LoD-aware:
    of a LoD or counted input (padded rows: docs/lod.md) only the real rows count."""
    idx, label = ctx.input("Indices"), ctx.input("Label")
    real = [v.row_count().astype(jnp.int32) for v in (idx, label) if isinstance(v, LoDValue)]
    idx = idx.data if isinstance(idx, LoDValue) else idx
    label = label.data if isinstance(label, LoDValue) else label
    rows = min(idx.shape[0], label.shape[0])
    total = jnp.asarray(idx.shape[0], jnp.int32)
    if real:                      # padded rows (a bucket) past the real count take no part
        total = real[0] if len(real) == 1 else jnp.minimum(real[0], real[1])
        idx, label = idx[:rows], label[:rows]
    hit = jnp.any(idx == label.astype(idx.dtype), axis=1)
    if real:
        hit = hit & (jnp.arange(rows) < total)
    correct = jnp.sum(hit).astype(jnp.int32)
    acc = correct.astype(jnp.float32) / jnp.maximum(total, 1).astype(jnp.float32)
    return {"Accuracy": acc, "Correct": correct, "Total": total}


lod_aware("accuracy")


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
    ``(k + 1) * buckets + 1`` entries), and the AUC is over those k batches. LoD-aware: of a LoD
    or counted input (padded rows: docs/lod.md) only the real rows are counted."""
    predict, label = ctx.input("Predict"), ctx.input("Label")
    real = [v.row_count().astype(jnp.int32) for v in (predict, label) if isinstance(v, LoDValue)]
    predict = predict.data if isinstance(predict, LoDValue) else predict
    label = (label.data if isinstance(label, LoDValue) else label).reshape(-1)
    stat_pos, stat_neg = ctx.input("StatPos"), ctx.input("StatNeg")
    n, steps = int(ctx.attr("num_thresholds")), int(ctx.attr("slide_steps"))
    buckets = n + 1
    rows = min(predict.shape[0], label.shape[0])
    predict, label = predict[:rows], label[:rows]
    bins = (predict[:, -1] * jnp.asarray(n, predict.dtype)).astype(jnp.int32)  # in its dtype, as the kernel
    if real:                      # padded rows (a bucket) past the real count take no part
        total = real[0] if len(real) == 1 else jnp.minimum(real[0], real[1])
        bins = jnp.where(jnp.arange(rows) < total, bins, buckets)        # out of range: dropped
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


lod_aware("auc")


# -- Fluid 1.x's pointwise and ranking losses ---------------------------------------------------------
def _same_rows_shape(*slots: str, out: str = "Out"):
    """Out is [N, 1] (or X's shape) for inputs of one shape, the first of ``slots`` giving it."""
    def rule(ctx: InferShapeContext) -> None:
        xs = [ctx.input(s) for s in slots]
        first = xs[0]
        for name, x in zip(slots[1:], xs[1:]):
            ctx.check(x.ndim == first.ndim and all(dims_equal(a, b) for a, b in zip(x.shape, first.shape)),
                      f"{name} {x.shape} must have {slots[0]}'s shape {first.shape}")
        ctx.set_output(out, first.shape, first.dtype, first.lod_level)
    return rule


def _kldiv_shape(ctx: InferShapeContext) -> None:
    x, target = ctx.input("X"), ctx.input("Target")
    reduction = ctx.attr("reduction")
    ctx.check(reduction in ("none", "batchmean", "mean", "sum"),
              f"reduction must be 'none', 'batchmean', 'mean' or 'sum', got {reduction!r}")
    ctx.check(x.ndim == target.ndim, f"X {x.shape} and Target {target.shape} must have one rank")
    ctx.set_output("Loss", x.shape if reduction == "none" else (), x.dtype, 0)


@op("kldiv_loss", inputs="X Target", outputs="Loss", attrs={"reduction": "mean"},
    infer_shape=_kldiv_shape, no_grad_inputs=["Target"])
def kldiv_loss(ctx):
    """Kullback-Leibler divergence of Target from the log-probabilities X: Target·(log Target - X)
    where Target > 0 (0 elsewhere), reduced by ``reduction`` ('batchmean' divides the sum by X's
    first dim)."""
    x, target = ctx.input("X"), ctx.input("Target")
    safe = jnp.where(target > 0, target, 1)
    loss = jnp.where(target > 0, target * (jnp.log(safe) - x), 0).astype(x.dtype)
    reduction = ctx.attr("reduction")
    if reduction == "mean":
        loss = jnp.mean(loss)
    elif reduction == "sum":
        loss = jnp.sum(loss)
    elif reduction == "batchmean":
        loss = jnp.sum(loss) / x.shape[0] if x.ndim else jnp.sum(loss)
    return {"Loss": loss}


@op("log_loss", inputs="Predicted Labels", outputs="Loss", attrs={"epsilon": 1e-4},
    infer_shape=_same_rows_shape("Predicted", "Labels", out="Loss"), no_grad_inputs=["Labels"])
def log_loss(ctx):
    """Binary log loss of probabilities: -Labels·log(P + ε) - (1 - Labels)·log(1 - P + ε)."""
    p, y = ctx.input("Predicted"), ctx.input("Labels")
    eps = jnp.asarray(ctx.attr("epsilon"), p.dtype)
    return {"Loss": -y * jnp.log(p + eps) - (1 - y) * jnp.log(1 - p + eps)}


def _softplus(x):
    """log(1 + exp(x)) computed as max(x, 0) + log(1 + exp(-|x|))."""
    return jnp.maximum(x, 0) + jnp.log1p(jnp.exp(-jnp.abs(x)))


@op("teacher_student_sigmoid_loss", inputs="X Label", outputs="Y",
    attrs={"soft_max_up_bound": 15.0, "soft_max_lower_bound": -15.0},
    infer_shape=_same_rows_shape("X", "Label", out="Y"), no_grad_inputs=["Label"])
def teacher_student_sigmoid_loss(ctx):
    """Sigmoid cross entropy against a click z and, where given, a teacher's value z' packed in
    Label: -2 (z = 0, no z'), -1 (z = 1, no z'), z' in [0, 1) (z = 0), 1 + z' (z = 1). The gradient
    is 0 where X lies outside (soft_max_lower_bound, soft_max_up_bound), as Paddle's kernel."""
    x, label = ctx.input("X"), ctx.input("Label")
    inside = (x > ctx.attr("soft_max_lower_bound")) & (x < ctx.attr("soft_max_up_bound"))
    x = jnp.where(inside, x, jax.lax.stop_gradient(x))
    click = jnp.where(label < -1, 0.0, jnp.where(label < 0, 1.0, jnp.where(label < 1, 0.0, 1.0))).astype(x.dtype)
    teacher = jnp.where(label < 0, 0.0, label - click)
    with_teacher = (label >= 0).astype(x.dtype)
    y = _softplus(x) - x * click + with_teacher * (_softplus(x) - x * teacher)
    return {"Y": y}


@op("rank_loss", inputs="Label Left Right", outputs="Out", infer_shape=_same_rows_shape("Left", "Right", "Label"),
    no_grad_inputs=["Label"])
def rank_loss(ctx):
    """RankNet's pairwise loss: log(1 + exp(Left - Right)) - Label·(Left - Right)."""
    d = ctx.input("Left") - ctx.input("Right")
    return {"Out": _softplus(d) - ctx.input("Label") * d}


def _margin_rank_shape(ctx: InferShapeContext) -> None:
    _same_rows_shape("X1", "X2", "Label")(ctx)
    x = ctx.input("X1")
    ctx.set_output("Activated", x.shape, x.dtype, x.lod_level)


@op("margin_rank_loss", inputs="X1 X2 Label", outputs="Out Activated", attrs={"margin": 0.1},
    infer_shape=_margin_rank_shape, no_grad_inputs=["Label"], no_grad_outputs=["Activated"])
def margin_rank_loss(ctx):
    """max(0, -Label·(X1 - X2) + margin); Activated marks where that is positive (Fluid 1.x's op,
    which Paddle 2.6 no longer has)."""
    x1, x2, label = ctx.input("X1"), ctx.input("X2"), ctx.input("Label")
    value = -label * (x1 - x2) + jnp.asarray(ctx.attr("margin"), x1.dtype)
    return {"Out": jnp.maximum(value, 0), "Activated": (value > 0).astype(x1.dtype)}


def _bpr_shape(ctx: InferShapeContext) -> None:
    x, label = ctx.input("X"), ctx.input("Label")
    ctx.check(x.ndim == 2, f"X must be [N, classes], got {x.shape}")
    ctx.check(label.dtype in _INT_LABELS and label.ndim == 2 and label.shape[1] in (1, -1),
              f"Label must be [N, 1] int64, got {label.shape} {label.dtype}")
    ctx.set_output("Y", (x.shape[0], 1), x.dtype, x.lod_level)


@op("bpr_loss", inputs="X Label", outputs="Y", infer_shape=_bpr_shape, no_grad_inputs=["Label"])
def bpr_loss(ctx):
    """Bayesian personalised ranking: the mean over the other classes j of
    log(1 + exp(X[j] - X[label])), per row."""
    x, label = ctx.input("X"), ctx.input("Label")
    positive = _pick(x, label, 1)
    others = jnp.arange(x.shape[1])[None, :] != label.astype(jnp.int32)
    terms = jnp.where(others, _softplus(x - positive), 0)
    return {"Y": jnp.sum(terms, axis=1, keepdims=True) / max(x.shape[1] - 1, 1)}


def _smooth_l1_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    _same_rows_shape("X", "Y", out="Diff")(ctx)
    ctx.check(x.ndim >= 2, f"X must have a batch dim and at least one more, got {x.shape}")
    ctx.set_output("Out", (x.shape[0], 1), x.dtype, 0)


@op("smooth_l1_loss", inputs="X Y InsideWeight? OutsideWeight?", outputs="Diff Out", attrs={"sigma": 1.0},
    infer_shape=_smooth_l1_shape, no_grad_inputs=["InsideWeight", "OutsideWeight"], no_grad_outputs=["Diff"])
def smooth_l1_loss(ctx):
    """Fluid 1.x's smooth L1 (Paddle 2.6 has no such op): d = InsideWeight·(X - Y) (saved as Diff);
    0.5·(σd)² where |d| < 1/σ², |d| - 0.5/σ² elsewhere; times OutsideWeight, summed per row ([N, 1])."""
    x, y = ctx.input("X"), ctx.input("Y")
    inside, outside = ctx.input("InsideWeight"), ctx.input("OutsideWeight")
    diff = x - y if inside is None else (x - y) * inside
    s2 = jnp.asarray(ctx.attr("sigma"), x.dtype) ** 2
    a = jnp.abs(diff)
    loss = jnp.where(a < 1 / s2, 0.5 * s2 * diff * diff, a - 0.5 / s2)
    if outside is not None:
        loss = loss * outside
    return {"Diff": diff, "Out": jnp.sum(loss.reshape(x.shape[0], -1), axis=1, keepdims=True)}


def _focal_shape(ctx: InferShapeContext) -> None:
    x, label, fg = ctx.input("X"), ctx.input("Label"), ctx.input("FgNum")
    ctx.check(x.ndim == 2, f"X must be [N, classes], got {x.shape}")
    ctx.check(label.ndim == 2 and label.shape[1] in (1, -1) and label.dtype in ("int32", "int64"),
              f"Label must be [N, 1] int32, got {label.shape} {label.dtype}")
    ctx.check(fg.dtype in ("int32", "int64"), f"FgNum must be int32, got {fg.dtype}")
    ctx.set_output("Out", x.shape, x.dtype, x.lod_level)


@op("sigmoid_focal_loss", inputs="X Label FgNum", outputs="Out", attrs={"gamma": 2.0, "alpha": 0.25},
    infer_shape=_focal_shape, no_grad_inputs=["Label", "FgNum"])
def sigmoid_focal_loss(ctx):
    """Fluid 1.x's focal loss (Paddle 2.6 has no such op): for class c (1-based: Label 0 is
    background, -1 ignored) with p = sigmoid(X), -α(1-p)^γ log p where c is the label, -(1-α)p^γ
    log(1-p) elsewhere (nothing for ignored rows), divided by max(FgNum, 1)."""
    x, label = ctx.input("X"), ctx.input("Label").astype(jnp.int32)
    fg = jnp.maximum(ctx.input("FgNum").reshape(()).astype(x.dtype), 1)
    gamma, alpha = ctx.attr("gamma"), ctx.attr("alpha")
    classes = jnp.arange(1, x.shape[1] + 1)[None, :]
    pos = (label == classes).astype(x.dtype)
    neg = ((label != classes) & (label >= 0)).astype(x.dtype)
    p = jax.nn.sigmoid(x)
    log_p, log_1p = jax.nn.log_sigmoid(x), jax.nn.log_sigmoid(-x)
    loss = -pos * alpha * (1 - p) ** gamma * log_p - neg * (1 - alpha) * p ** gamma * log_1p
    return {"Out": loss / fg}
