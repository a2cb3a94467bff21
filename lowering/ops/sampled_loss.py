"""Losses over many classes of Fluid 1.x: nce, sample_logits (sampled softmax), hierarchical_sigmoid,
center_loss.

``nce`` and ``sample_logits`` draw classes: with a non-zero ``seed`` attribute their draws are fixed,
otherwise they come from the Executor's key (the program's ``random_seed``), as for every random op.
Their gradients are ops of their own that read the drawn classes back from the forward outputs
(``SampleLabels`` / ``Samples``), as Paddle's do, so the backward pass sees the same draws.
``center_loss`` writes ``CentersOut`` — the centres variable itself in Fluid's layer — as a state
update (like batch_norm's ``MeanOut``); its gradient reads ``SampleCenterDiff``, not the centres the
forward pass has already moved.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir.registry import op
from ...ir.shape import InferShapeContext
from ._errors import _fail


def _grads_like(pairs):
    """A shape rule for a gradient op: each ``X@GRAD`` output gets input ``X``'s shape."""
    def rule(ctx: InferShapeContext) -> None:
        for src in pairs:
            v = ctx.input(src)
            if v is not None:
                ctx.set_output(src + "@GRAD", v.shape, v.dtype, v.lod_level)
    return rule


# -- samplers (Paddle's math::Sampler family) -------------------------------------------------------
def _log_uniform_draw(key, shape, classes: int, dtype):
    """Log-uniform over [0, classes): floor(exp(u·log(classes + 1))) - 1, wrapped into range."""
    u = jax.random.uniform(key, shape, dtype)
    value = jnp.floor(jnp.exp(u * jnp.log(jnp.asarray(classes + 1.0, dtype)))).astype(jnp.int64) - 1
    return jnp.mod(value, classes)


def _log_uniform_prob(values, classes: int, dtype):
    v = values.astype(dtype)
    return jnp.log((v + 2.0) / (v + 1.0)) / jnp.log(jnp.asarray(classes + 1.0, dtype))


# -- nce --------------------------------------------------------------------------------------------
_NCE_INPUTS = "Input Label Weight Bias? SampleWeight? CustomDistProbs? CustomDistAlias? CustomDistAliasProbs?"
_NCE_ATTRS = {"num_total_classes": 1, "num_neg_samples": 10, "sampler": 0, "seed": 0, "is_sparse": False,
              "remote_prefetch": False, "is_test": False}


def _nce_shape(ctx: InferShapeContext) -> None:
    x, label, w = ctx.input("Input"), ctx.input("Label"), ctx.input("Weight")
    k, neg, sampler = ctx.attr("num_total_classes"), ctx.attr("num_neg_samples"), ctx.attr("sampler")
    ctx.check(x.ndim == 2, f"Input must be 2-D [N, D], got {x.shape}")
    ctx.check(label.ndim == 2 and label.dtype in ("int64", "int32"), f"Label must be 2-D int64 [N, T], got "
                                                                     f"{label.shape} {label.dtype}")
    ctx.check(w.ndim == 2 and w.shape[0] in (k, -1), f"Weight must be [num_total_classes={k}, D], got {w.shape}")
    ctx.check(k > 0 and neg > 0, f"num_total_classes and num_neg_samples must be positive, got {k} and {neg}")
    ctx.check(sampler in (0, 1, 2), f"sampler must be 0 (uniform), 1 (log_uniform) or 2 (custom_dist), got {sampler}")
    if sampler == 2:
        for slot in ("CustomDistProbs", "CustomDistAlias", "CustomDistAliasProbs"):
            v = ctx.input(slot)
            ctx.check(v is not None and v.shape in ((k,), (-1,)), f"the custom_dist sampler needs {slot} [{k}]")
    b = ctx.input("Bias")
    ctx.check(b is None or b.shape[0] in (k, -1), f"Bias must have num_total_classes={k} rows, got {b and b.shape}")
    width = label.shape[1] + neg if label.shape[1] >= 0 else -1
    ctx.set_output("Cost", (x.shape[0], 1), x.dtype, 0)
    ctx.set_output("SampleLogits", (x.shape[0], width), x.dtype, 0)
    ctx.set_output("SampleLabels", (x.shape[0], width), "int64", 0)


def _nce_probability(ctx, labels, dtype):
    """The sampler's probability of each class in ``labels``."""
    k, sampler = int(ctx.attr("num_total_classes")), int(ctx.attr("sampler"))
    if sampler == 0:
        return jnp.full(labels.shape, 1.0 / k, dtype)
    if sampler == 1:
        return _log_uniform_prob(labels, k - 1, dtype)
    return jnp.take(ctx.input("CustomDistProbs").astype(dtype).reshape(-1), labels.astype(jnp.int32), mode="clip")


def _nce_negatives(ctx, rows: int, neg: int):
    custom = [int(v) for v in (ctx.attr("custom_neg_classes", None) or [])]
    if custom:                              # Paddle's test hook: these classes, for every row
        if len(custom) != neg:
            _fail(ctx, f"custom_neg_classes has {len(custom)} classes, num_neg_samples is {neg}")
        return jnp.broadcast_to(jnp.asarray(custom, jnp.int64), (rows, neg))
    k, sampler = int(ctx.attr("num_total_classes")), int(ctx.attr("sampler"))
    key = ctx.rng()
    if sampler == 0:
        return jax.random.randint(key, (rows, neg), 0, k, jnp.int64)
    if sampler == 1:
        return _log_uniform_draw(key, (rows, neg), k - 1, jnp.float32)
    k_index, k_coin = jax.random.split(key)
    index = jax.random.randint(k_index, (rows, neg), 0, k, jnp.int32)
    coin = jax.random.uniform(k_coin, (rows, neg), jnp.float32)
    alias = jnp.take(ctx.input("CustomDistAlias").reshape(-1).astype(jnp.int32), index)
    alias_prob = jnp.take(ctx.input("CustomDistAliasProbs").reshape(-1).astype(jnp.float32), index)
    return jnp.where((coin > alias_prob) & (alias >= 0), alias, index).astype(jnp.int64)


def _nce_cost(ctx, x, w, bias, samples):
    """(Cost [N, 1], SampleLogits [N, T + S]) for the classes ``samples`` (true ones first)."""
    num_true, neg = ctx.input("Label").shape[1], int(ctx.attr("num_neg_samples"))
    ids = samples.astype(jnp.int32)
    logits = jnp.einsum("nd,nsd->ns", x, jnp.take(w, ids, axis=0, mode="clip"))
    if bias is not None:
        logits = logits + jnp.take(bias.reshape(-1), ids, mode="clip")
    o = jax.nn.sigmoid(logits)
    b = _nce_probability(ctx, samples, x.dtype) * neg
    is_true = jnp.arange(samples.shape[1]) < num_true
    cost = jnp.where(is_true, -jnp.log(o / (o + b)), -jnp.log(b / (o + b)))
    weight = ctx.input("SampleWeight")
    if weight is not None:
        cost = cost * weight.reshape(-1, 1).astype(x.dtype)
    return cost.sum(axis=1, keepdims=True), o


@op("nce", inputs=_NCE_INPUTS, outputs="Cost SampleLogits SampleLabels", attrs=_NCE_ATTRS,
    infer_shape=_nce_shape, random=True, grad="custom",
    no_grad_inputs=["Label", "SampleWeight", "CustomDistProbs", "CustomDistAlias", "CustomDistAliasProbs"],
    no_grad_outputs=["SampleLogits", "SampleLabels"])
def nce(ctx):
    """Noise-contrastive estimation: each row's true classes (Label [N, T]) followed by
    num_neg_samples classes drawn by the sampler (0 uniform, 1 log-uniform, 2 the alias table of a
    custom distribution; with replacement, per row) form SampleLabels; SampleLogits is
    o = sigmoid(x·W[class] + Bias[class]) for each, and Cost [N, 1] the sum of -log(o / (o + b)) over
    the true classes and -log(b / (o + b)) over the drawn ones, b = num_neg_samples × the sampler's
    probability of the class, times SampleWeight. ``is_sparse`` is accepted and computed densely.
    Paddle's test-only attribute ``custom_neg_classes`` (a list of num_neg_samples classes) replaces
    the draws."""
    x, label = ctx.input("Input"), ctx.input("Label")
    neg = int(ctx.attr("num_neg_samples"))
    samples = jnp.concatenate([label.astype(jnp.int64), _nce_negatives(ctx, x.shape[0], neg)], axis=1)
    cost, o = _nce_cost(ctx, x, ctx.input("Weight"), ctx.input("Bias"), samples)
    return {"Cost": cost, "SampleLogits": o, "SampleLabels": samples}


@op("nce_grad", inputs=_NCE_INPUTS + " SampleLogits? SampleLabels Cost@GRAD",
    outputs="Input@GRAD? Weight@GRAD? Bias@GRAD?", attrs=_NCE_ATTRS,
    infer_shape=_grads_like(("Input", "Weight", "Bias")), grad=None)
def nce_grad(ctx):
    """The gradients of nce's Cost for the classes its forward pass drew (SampleLabels)."""
    x, w, bias = ctx.input("Input"), ctx.input("Weight"), ctx.input("Bias")
    samples, g = ctx.input("SampleLabels"), ctx.input("Cost@GRAD")

    def cost(x, w, bias):
        return _nce_cost(ctx, x, w, bias, samples)[0]

    _, vjp = jax.vjp(cost, x, w, bias)
    gx, gw, gb = vjp(g.reshape(-1, 1).astype(x.dtype))
    return {"Input@GRAD": gx, "Weight@GRAD": gw, "Bias@GRAD": gb}


# -- sample_logits ----------------------------------------------------------------------------------
_SAMPLE_ATTRS = {"use_customized_samples": False, "uniq": True, "remove_accidental_hits": True,
                 "num_samples": 1, "seed": 0}


def _sample_logits_shape(ctx: InferShapeContext) -> None:
    logits, labels = ctx.input("Logits"), ctx.input("Labels")
    s = ctx.attr("num_samples")
    ctx.check(logits.ndim == 2, f"Logits must be 2-D [N, K], got {logits.shape}")
    ctx.check(labels.ndim == 2 and labels.dtype in ("int64", "int32"),
              f"Labels must be 2-D int64 [N, T], got {labels.shape} {labels.dtype}")
    ctx.check(s > 0, f"num_samples must be positive, got {s}")
    ctx.check(logits.shape[1] < 0 or s <= logits.shape[1],
              f"num_samples ({s}) distinct classes cannot be drawn from {logits.shape[1]}")
    if ctx.attr("use_customized_samples"):
        for slot in ("CustomizedSamples", "CustomizedProbabilities"):
            v = ctx.input(slot)
            ctx.check(v is not None and v.ndim == 2, f"use_customized_samples needs a 2-D {slot}")
    width = labels.shape[1] + s if labels.shape[1] >= 0 else -1
    n = logits.shape[0]
    ctx.set_output("Samples", (n, width), "int64", 0)
    ctx.set_output("Probabilities", (n, width), logits.dtype, 0)
    ctx.set_output("SampledLogits", (n, width), logits.dtype, 0)
    ctx.set_output("SampledLabels", labels.shape, "int64", 0)
    ctx.set_output("LogitsDim", logits.shape, logits.dtype, 0)
    ctx.set_output("LabelsDim", labels.shape, logits.dtype, 0)


def _unique_log_uniform(key, classes: int, count: int, dtype):
    """``count`` distinct classes drawn log-uniformly one at a time (repeats rejected), as Paddle's
    CPU sampler, and the number of draws it took."""
    def cond(state):
        return state[2] < count

    def body(state):
        seen, picked, n, tries, key = state
        key, sub = jax.random.split(key)
        v = _log_uniform_draw(sub, (), classes, dtype).astype(jnp.int32)
        new = ~seen[v]
        picked = jnp.where(new, picked.at[n].set(v), picked)
        return seen.at[v].set(True), picked, n + new.astype(jnp.int32), tries + 1, key

    state = (jnp.zeros((classes,), bool), jnp.zeros((count,), jnp.int32), jnp.int32(0), jnp.int32(0), key)
    _, picked, _, tries, _ = lax.while_loop(cond, body, state)
    return picked, tries


def _tolerable(v):
    big = jnp.asarray(1e20, v.dtype)
    return jnp.where(v == jnp.inf, big, jnp.where(v == -jnp.inf, -big, v))


@op("sample_logits", inputs="Logits Labels CustomizedSamples? CustomizedProbabilities?",
    outputs="Samples Probabilities LogitsDim LabelsDim SampledLogits SampledLabels", attrs=_SAMPLE_ATTRS,
    infer_shape=_sample_logits_shape, random=True, grad="custom",
    no_grad_inputs=["Labels", "CustomizedSamples", "CustomizedProbabilities"],
    no_grad_outputs=["Samples", "Probabilities", "LogitsDim", "LabelsDim", "SampledLabels"])
def sample_logits(ctx):
    """Sampled softmax's gather: Samples [N, T + S] are each row's true labels followed by S distinct
    classes drawn log-uniformly (shared by the rows; P(k) = log((k+2)/(k+1)) / log(K+1)), and
    Probabilities their chance of being drawn in that many tries (1 - (1 - P)^tries, or S·P when
    there were no repeats); with ``use_customized_samples`` both come from the inputs instead.
    SampledLogits = Logits[row, sample] - log(probability), minus 1e20 where a drawn class is one of
    the row's true labels (``remove_accidental_hits``); SampledLabels are 0 … T-1. LogitsDim and
    LabelsDim carry the shapes for the gradient (zeros)."""
    logits, labels = ctx.input("Logits"), ctx.input("Labels")
    n, k = logits.shape
    t, s = labels.shape[1], int(ctx.attr("num_samples"))
    dt = logits.dtype
    if ctx.attr("use_customized_samples"):
        samples = ctx.input("CustomizedSamples").astype(jnp.int64)
        probs = ctx.input("CustomizedProbabilities").astype(dt)
    else:
        picked, tries = _unique_log_uniform(ctx.rng(), k, s, jnp.float32)
        samples = jnp.concatenate([labels.astype(jnp.int64),
                                   jnp.broadcast_to(picked.astype(jnp.int64), (n, s))], axis=1)
        p = _log_uniform_prob(samples, k, dt)
        probs = jnp.where(tries == s, p * s, -jnp.expm1(tries.astype(dt) * jnp.log1p(-p)))
    sampled = jnp.take_along_axis(logits, samples.astype(jnp.int32), axis=1)
    if ctx.attr("remove_accidental_hits"):
        hit = (samples[:, t:, None] == samples[:, None, :t]).any(-1)
        sampled = sampled.at[:, t:].add(jnp.where(hit, jnp.asarray(-1e20, dt), jnp.zeros((), dt)))
    sampled = _tolerable(sampled - _tolerable(jnp.log(probs)))
    return {"Samples": samples, "Probabilities": probs, "SampledLogits": sampled,
            "SampledLabels": jnp.broadcast_to(jnp.arange(t, dtype=jnp.int64), (n, t)),
            "LogitsDim": jnp.zeros(logits.shape, dt), "LabelsDim": jnp.zeros(labels.shape, dt)}


def _sample_logits_grad_shape(ctx: InferShapeContext) -> None:
    dims = ctx.input("LogitsDim")
    ctx.set_output("Logits@GRAD", dims.shape, dims.dtype, 0)


@op("sample_logits_grad", inputs="LogitsDim LabelsDim? Samples SampledLogits@GRAD", outputs="Logits@GRAD",
    attrs=_SAMPLE_ATTRS, infer_shape=_sample_logits_grad_shape, grad=None)
def sample_logits_grad(ctx):
    """Logits@GRAD: each SampledLogits gradient added back at its (row, sample) position."""
    dims, samples, g = ctx.input("LogitsDim"), ctx.input("Samples"), ctx.input("SampledLogits@GRAD")
    rows = jnp.arange(samples.shape[0])[:, None]
    out = jnp.zeros(dims.shape, g.dtype).at[rows, samples.astype(jnp.int32)].add(g)
    return {"Logits@GRAD": out}


# -- hierarchical_sigmoid ---------------------------------------------------------------------------
def _code_length(num_classes: int) -> int:
    return max(int(num_classes) - 1, 0).bit_length()


def _hsigmoid_shape(ctx: InferShapeContext) -> None:
    x, w, label = ctx.input("X"), ctx.input("W"), ctx.input("Label")
    table, code = ctx.input("PathTable"), ctx.input("PathCode")
    k = ctx.attr("num_classes")
    ctx.check(x.ndim == 2 and w.ndim == 2, f"X and W must be 2-D, got {x.shape} and {w.shape}")
    ctx.check(w.shape[1] < 0 or x.shape[1] < 0 or w.shape[1] == x.shape[1],
              f"W's width {w.shape[1]} must be X's feature size {x.shape[1]}")
    ctx.check(label.dtype in ("int64", "int32"), f"Label must be int64, got {label.dtype}")
    ctx.check((table is None) == (code is None), "PathTable and PathCode go together (a custom tree)")
    if table is None:
        ctx.check(k >= 2, f"num_classes must be at least 2 for the default tree, got {k}")
        length = _code_length(k)
    else:
        ctx.check(table.ndim == 2 and table.shape == code.shape,
                  f"PathTable {table.shape} and PathCode {code.shape} must be the same 2-D shape")
        length = table.shape[1]
    ctx.set_output("Out", (x.shape[0], 1), x.dtype, 0)
    ctx.set_output("PreOut", (x.shape[0], length), x.dtype, 0)
    ctx.set_output("W_Out", w.shape, w.dtype, 0)


@op("hierarchical_sigmoid", inputs="X W Label PathTable? PathCode? Bias?", outputs="Out PreOut W_Out?",
    attrs={"num_classes": 2, "is_sparse": False}, infer_shape=_hsigmoid_shape,
    no_grad_inputs=["Label", "PathTable", "PathCode"], no_grad_outputs=["PreOut", "W_Out"])
def hierarchical_sigmoid(ctx):
    """Hierarchical sigmoid: each label is a leaf of a binary tree whose inner nodes are rows of W
    (and Bias). Default tree: c = label + num_classes, the path's j-th node is (c >> (j+1)) - 1 and
    its code bit (c >> j) & 1, for j < bit_length(c) - 1. Custom tree: PathTable / PathCode give
    them, a negative node ending the path. With pre_j = clip(W[node_j]·x + Bias[node_j], -40, 40)
    on the path and 0 past it, Out = Σ_j log(1 + e^{pre_j}) - Σ_{j on path, bit 1} pre_j (the
    entries past the path add log 2 each, as Paddle's kernel does); PreOut holds log(1 + e^{pre}).
    ``is_sparse`` is accepted and computed densely; W_Out is W."""
    x, w, label, bias = ctx.input("X"), ctx.input("W"), ctx.input("Label"), ctx.input("Bias")
    table = ctx.input("PathTable")
    lab = label.reshape(-1).astype(jnp.int64)
    if table is None:
        k = int(ctx.attr("num_classes"))
        length = _code_length(k)
        c = (lab + k)[:, None]
        j = jnp.arange(length, dtype=jnp.int64)[None]
        path_len = _bit_length(c) - 1
        node = (c >> (j + 1)) - 1
        bit = (c >> j) & 1
        on_path = j < path_len
    else:
        node = table.astype(jnp.int64)
        bit = ctx.input("PathCode").astype(jnp.int64)
        length = node.shape[1]
        ended = jnp.cumsum((node < 0).astype(jnp.int32), axis=1) > 0
        on_path = ~ended
    rows = jnp.where(on_path, node, 0).astype(jnp.int32)
    pre = jnp.einsum("nd,nld->nl", x, jnp.take(w, rows, axis=0, mode="clip"))
    if bias is not None:
        pre = pre + jnp.take(bias.reshape(-1), rows, mode="clip")
    pre = jnp.clip(jnp.where(on_path, pre, jnp.zeros((), x.dtype)), -40.0, 40.0)
    soft = jnp.log1p(jnp.exp(pre))
    picked = jnp.where(on_path & (bit != 0), pre, jnp.zeros((), x.dtype))
    out = (soft.sum(axis=1) - picked.sum(axis=1))[:, None]
    return {"Out": out, "PreOut": soft, "W_Out": w}


def _bit_length(v):
    """The number of bits of each (positive) integer in ``v``."""
    bits = jnp.zeros(v.shape, jnp.int64)
    for shift in (32, 16, 8, 4, 2, 1):
        big = (v >> shift) > 0
        v = jnp.where(big, v >> shift, v)
        bits = bits + jnp.where(big, shift, 0)
    return bits + (v > 0)


# -- center_loss ------------------------------------------------------------------------------------
def _center_loss_shape(ctx: InferShapeContext) -> None:
    x, label, centers = ctx.input("X"), ctx.input("Label"), ctx.input("Centers")
    rate = ctx.input("CenterUpdateRate")
    k = ctx.attr("cluster_num")
    ctx.check(x.ndim == 2, f"X must be 2-D [N, D], got {x.shape}")
    ctx.check(label.dtype in ("int64", "int32") and label.ndim in (1, 2),
              f"Label must be int64 [N, 1], got {label.shape} {label.dtype}")
    ctx.check(centers.ndim == 2 and centers.shape[0] in (k, -1) and centers.shape[1] in (x.shape[1], -1),
              f"Centers must be [cluster_num={k}, {x.shape[1]}], got {centers.shape}")
    ctx.check(rate.shape in ((1,), (-1,)) or int(np.prod([max(d, 1) for d in rate.shape])) == 1,
              f"CenterUpdateRate must hold one value, got {rate.shape}")
    ctx.set_output("SampleCenterDiff", x.shape, x.dtype, 0)
    ctx.set_output("Loss", (x.shape[0], 1), x.dtype, 0)
    ctx.set_output("CentersOut", centers.shape, centers.dtype, 0)


@op("center_loss", inputs="X Label Centers CenterUpdateRate", outputs="SampleCenterDiff Loss CentersOut",
    attrs={"cluster_num": 1, "need_update": False}, infer_shape=_center_loss_shape, grad="custom",
    no_grad_inputs=["Label", "Centers", "CenterUpdateRate"], no_grad_outputs=["SampleCenterDiff", "CentersOut"])
def center_loss(ctx):
    """Center loss: SampleCenterDiff = X - Centers[label], Loss [N, 1] = ½·|diff|². With
    ``need_update``, CentersOut = Centers + alpha · (Σ of the batch's diffs of each class) / (1 + the
    class's count in the batch), alpha = CenterUpdateRate; otherwise Centers. The gradient of X is
    Loss@GRAD · diff (the centres get none)."""
    x, centers = ctx.input("X"), ctx.input("Centers")
    label = ctx.input("Label").reshape(-1).astype(jnp.int32)
    k = centers.shape[0]
    diff = x - jnp.take(centers, label, axis=0, mode="clip")
    loss = 0.5 * jnp.sum(diff * diff, axis=1, keepdims=True)
    out = centers
    if ctx.attr("need_update"):
        alpha = ctx.input("CenterUpdateRate").reshape(-1)[0].astype(centers.dtype)
        total = jax.ops.segment_sum(diff, label, num_segments=k)
        count = 1 + jax.ops.segment_sum(jnp.ones_like(label), label, num_segments=k)
        out = centers + alpha * total / count[:, None].astype(centers.dtype)
    return {"SampleCenterDiff": diff, "Loss": loss, "CentersOut": out}


@op("center_loss_grad", inputs="X SampleCenterDiff Loss@GRAD", outputs="X@GRAD",
    attrs={"cluster_num": 1, "need_update": False}, infer_shape=_grads_like(("X",)), grad=None)
def center_loss_grad(ctx):
    """X@GRAD = Loss@GRAD · SampleCenterDiff (the forward pass's diff, before the centres moved)."""
    diff, g = ctx.input("SampleCenterDiff"), ctx.input("Loss@GRAD")
    return {"X@GRAD": g.reshape(-1, 1).astype(diff.dtype) * diff}
