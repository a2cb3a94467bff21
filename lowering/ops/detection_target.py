"""Detection training ops of Fluid 1.x: matching and target assignment (bipartite_match,
target_assign, mine_hard_examples, rpn_target_assign, retinanet_target_assign); the losses built
on them are in ``detection_loss.py`` (yolov3_loss), imported at the end so they register.

Ground truths arrive as LoD tensors (one sequence of boxes per image). Inside a compiled step each
image's boxes are gathered into a dense [N, G, ...] block, G the padded row count of the LoD input
(the most one image can hold), with a validity mask. Outputs whose row count depends on the data
(sampled anchor indices, mined negatives) are padded to a capacity fixed by the input shapes and
carry their per-image counts as LoD offsets (docs/ops_data_dependent.md); padding rows are zeros.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ...ir.registry import op
from ...ir.shape import InferShapeContext
from ..lod_value import LoDValue
from ..lower import lod_aware
from ._errors import _fail
from .detection import _pack_rows

_EPS = 1e-6


def _rows_and_offsets(value):
    """(rows, offsets [N + 1]) of a LoD value; a plain array is one sequence of all its rows."""
    if value.__class__ is LoDValue:
        return value.data, value.offsets[-1].astype(jnp.int32)
    return value, jnp.asarray([0, value.shape[0]], jnp.int32)


def _per_instance(rows, offsets):
    """Each sequence's rows in a dense block [N, R, ...] (R = all rows: the most one can hold) and
    the mask [N, R] of the real ones."""
    r = rows.shape[0]
    lengths = offsets[1:] - offsets[:-1]
    pos = jnp.arange(r, dtype=jnp.int32)
    valid = pos[None, :] < lengths[:, None]
    index = jnp.clip(offsets[:-1, None] + pos[None, :], 0, max(r - 1, 0))
    return rows[index], valid


def _with_offsets(data, counts):
    """A LoD value of ``data`` whose sequences hold ``counts`` [N] rows each, back to back."""
    offsets = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(counts.astype(jnp.int32))])
    return LoDValue(data, [offsets])


# -- bipartite_match ---------------------------------------------------------------------------------
def _bipartite_shape(ctx: InferShapeContext) -> None:
    dist = ctx.input("DistMat")
    ctx.check(dist.ndim == 2, f"DistMat must be 2-D [rows, columns], got {dist.shape}")
    kind = ctx.attr("match_type")
    ctx.check(kind in ("bipartite", "per_prediction"),
              f"match_type must be 'bipartite' or 'per_prediction', got {kind!r}")
    n = 1 if dist.lod_level == 0 else -1          # one instance without LoD, else one per sequence
    ctx.set_output("ColToRowMatchIndices", (n, dist.shape[1]), "int32", 0)
    ctx.set_output("ColToRowMatchDist", (n, dist.shape[1]), dist.dtype, 0)


def _greedy_match(dist, valid_rows):
    """Greedy bipartite matching of one instance: repeatedly the largest entry (>= 1e-6) among
    unmatched rows and columns, ties to the lowest column, then the lowest row."""
    r, m = dist.shape
    neg = jnp.asarray(-jnp.inf, dist.dtype)

    def step(_, state):
        idx, best_dist, row_free = state
        cand = (valid_rows & row_free)[:, None] & (idx == -1)[None, :] & (dist >= _EPS)
        masked = jnp.where(cand, dist, neg)
        col_max = jnp.max(masked, axis=0)
        j = jnp.argmax(col_max)
        i = jnp.argmax(masked[:, j])
        found = col_max[j] > neg
        idx = jnp.where(found, idx.at[j].set(i.astype(jnp.int32)), idx)
        best_dist = jnp.where(found, best_dist.at[j].set(col_max[j]), best_dist)
        row_free = jnp.where(found, row_free.at[i].set(False), row_free)
        return idx, best_dist, row_free

    init = (jnp.full((m,), -1, jnp.int32), jnp.zeros((m,), dist.dtype), jnp.ones((r,), bool))
    idx, best_dist, _ = lax.fori_loop(0, min(r, m), step, init)
    return idx, best_dist


def _argmax_match(dist, valid_rows, idx, best_dist, threshold):
    """per_prediction: each still unmatched column takes its best row (the first on ties) when that
    distance reaches ``threshold`` (and 1e-6)."""
    ok = valid_rows[:, None] & (dist >= _EPS) & (dist >= threshold)
    masked = jnp.where(ok, dist, -jnp.inf)
    row = jnp.argmax(masked, axis=0).astype(jnp.int32)
    value = jnp.max(masked, axis=0)
    take = (idx == -1) & (value > -jnp.inf)
    return jnp.where(take, row, idx), jnp.where(take, value.astype(dist.dtype), best_dist)


@op("bipartite_match", inputs="DistMat", outputs="ColToRowMatchIndices ColToRowMatchDist",
    attrs={"match_type": "bipartite", "dist_threshold": 0.5}, infer_shape=_bipartite_shape, grad=None)
def bipartite_match(ctx):
    """Greedy bipartite matching of each instance of DistMat (a LoD tensor [sum of rows, M]; one
    instance when it has no LoD): ColToRowMatchIndices [N, M] holds, for each column, the row (within
    its instance) it is matched to, -1 if none, and ColToRowMatchDist the distance (0 if none). With
    ``match_type='per_prediction'`` unmatched columns then take their best row whose distance is at
    least ``dist_threshold``. Ties go to the lowest column and row (Paddle's kernel for fewer than
    130 rows; for more it sorts all pairs, which can break exact ties otherwise)."""
    rows, offsets = _rows_and_offsets(ctx.input("DistMat"))
    dense, valid = _per_instance(rows, offsets)                       # [N, R, M], [N, R]
    idx, dist = jax.vmap(_greedy_match)(dense, valid)
    if ctx.attr("match_type") == "per_prediction":
        threshold = jnp.asarray(ctx.attr("dist_threshold"), rows.dtype)
        idx, dist = jax.vmap(lambda d, v, i, b: _argmax_match(d, v, i, b, threshold))(dense, valid, idx, dist)
    return {"ColToRowMatchIndices": idx, "ColToRowMatchDist": dist}


# -- target_assign -----------------------------------------------------------------------------------
def _target_assign_shape(ctx: InferShapeContext) -> None:
    x, match = ctx.input("X"), ctx.input("MatchIndices")
    ctx.check(x.ndim == 3, f"X must be 3-D [rows, P, K] (a LoD tensor), got {x.shape}")
    ctx.check(match.ndim == 2 and match.dtype == "int32", f"MatchIndices must be 2-D int32 [N, P], got "
                                                          f"{match.shape} {match.dtype}")
    neg = ctx.input("NegIndices")
    if neg is not None:
        ctx.check(neg.ndim == 2 and neg.shape[1] in (1, -1) and neg.dtype == "int32",
                  f"NegIndices must be int32 [Neg, 1], got {neg.shape} {neg.dtype}")
    ctx.set_output("Out", (match.shape[0], match.shape[1], x.shape[2]), x.dtype, 0)
    ctx.set_output("OutWeight", (match.shape[0], match.shape[1], 1), "float32", 0)


@op("target_assign", inputs="X MatchIndices NegIndices?", outputs="Out OutWeight",
    attrs={"mismatch_value": 0}, infer_shape=_target_assign_shape, grad=None)
def target_assign(ctx):
    """Out[i, j] = X[lod[i] + MatchIndices[i, j], j % P] with weight 1 where the index is >= 0, else
    ``mismatch_value`` with weight 0; then each negative j of instance i in NegIndices (a LoD tensor,
    one sequence per instance) gets ``mismatch_value`` with weight 1. X [rows, P, K] must be a LoD
    tensor with one sequence per row of MatchIndices."""
    x, match = ctx.input("X"), ctx.input("MatchIndices")
    if x.__class__ is not LoDValue:
        _fail(ctx, "X must be a LoD tensor (one sequence of rows per instance of MatchIndices)")
    data, offsets = x.data, x.offsets[-1].astype(jnp.int32)
    n, m = match.shape
    p = data.shape[1]
    matched = match > -1
    if offsets.shape[0] - 1 != n:
        _fail(ctx, f"X has {offsets.shape[0] - 1} sequences but MatchIndices has {n} rows")
    row = jnp.clip(offsets[:-1, None] + match, 0, data.shape[0] - 1)
    col = jnp.broadcast_to(jnp.arange(m) % p, (n, m))
    fill = jnp.asarray(ctx.attr("mismatch_value")).astype(data.dtype)
    out = jnp.where(matched[..., None], data[row, col], fill)
    weight = matched.astype(jnp.float32)[..., None]
    neg = ctx.input("NegIndices")
    if neg is not None:
        if neg.__class__ is not LoDValue:
            _fail(ctx, "NegIndices must be a LoD tensor (one sequence of indices per instance)")
        image = neg.segment_ids()                                       # padding rows: past the end
        ids = neg.data.reshape(-1).astype(jnp.int32)
        image = jnp.where(image < n, image, n)
        out = out.at[image, ids].set(fill, mode="drop")
        weight = weight.at[image, ids].set(1.0, mode="drop")
    return {"Out": out, "OutWeight": weight}


# -- mine_hard_examples ------------------------------------------------------------------------------
def _mine_shape(ctx: InferShapeContext) -> None:
    cls, match, dist = ctx.input("ClsLoss"), ctx.input("MatchIndices"), ctx.input("MatchDist")
    for name, v in (("ClsLoss", cls), ("MatchIndices", match), ("MatchDist", dist)):
        ctx.check(v.ndim == 2, f"{name} must be 2-D [N, Np], got {v.shape}")
    loc = ctx.input("LocLoss")
    if loc is not None:
        ctx.check(loc.ndim == 2, f"LocLoss must be 2-D [N, Np], got {loc.shape}")
    kind = ctx.attr("mining_type")
    ctx.check(kind in ("max_negative", "hard_example"), f"mining_type must be 'max_negative' or "
                                                         f"'hard_example', got {kind!r}")
    if kind == "max_negative":
        ctx.check(ctx.attr("neg_pos_ratio") > 0, f"neg_pos_ratio must be positive, got {ctx.attr('neg_pos_ratio')}")
        thr = ctx.attr("neg_dist_threshold")
        ctx.check(0 < thr < 1, f"neg_dist_threshold must lie in (0, 1), got {thr}")
    else:
        ctx.check(ctx.attr("sample_size") > 0, f"sample_size must be positive, got {ctx.attr('sample_size')}")
    ctx.set_output("NegIndices", (-1, 1), "int32", 0)
    ctx.set_output("UpdatedMatchIndices", match.shape, match.dtype, 0)


@op("mine_hard_examples", inputs="ClsLoss LocLoss? MatchIndices MatchDist", outputs="NegIndices UpdatedMatchIndices",
    attrs={"neg_pos_ratio": 1.0, "neg_dist_threshold": 0.5, "sample_size": 0, "mining_type": "max_negative"},
    infer_shape=_mine_shape, grad=None)
def mine_hard_examples(ctx):
    """Hard negative mining per image. ``max_negative``: among the unmatched priors whose match
    distance is below ``neg_dist_threshold``, the int(neg_pos_ratio × positives) with the largest
    ClsLoss. ``hard_example``: the ``sample_size`` priors with the largest ClsLoss (+ LocLoss);
    matched ones outside them are unmatched in UpdatedMatchIndices, unmatched ones in them are the
    negatives. NegIndices [Neg, 1] lists each image's negatives in increasing order, one LoD sequence
    per image: padded to N·Np rows. Equal losses rank the lower prior first."""
    cls, match, dist = ctx.input("ClsLoss"), ctx.input("MatchIndices"), ctx.input("MatchDist")
    n, m = match.shape
    loss = cls.reshape(n, m)
    hard = ctx.attr("mining_type") == "hard_example"
    if hard:
        loc = ctx.input("LocLoss")
        if loc is not None:
            loss = loss + loc.reshape(n, m)
        eligible = jnp.ones((n, m), bool)
        limit = jnp.full((n,), min(int(ctx.attr("sample_size")), m), jnp.int32)
    else:
        eligible = (match == -1) & (dist < jnp.asarray(ctx.attr("neg_dist_threshold"), dist.dtype))
        positives = jnp.sum(match != -1, axis=1)
        limit = jnp.floor(positives.astype(jnp.float32) * jnp.float32(ctx.attr("neg_pos_ratio"))).astype(jnp.int32)
    limit = jnp.minimum(limit, jnp.sum(eligible, axis=1).astype(jnp.int32))
    order = jnp.argsort(jnp.where(eligible, -loss, jnp.inf), axis=1, stable=True)
    rank = jnp.argsort(order, axis=1)
    selected = eligible & (rank < limit[:, None])
    updated = match
    if hard:
        updated = jnp.where((match > -1) & ~selected, -1, match)
        selected = selected & (match == -1)
    # Each image's negatives in increasing prior order, images back to back.
    rows = jnp.broadcast_to(jnp.arange(m, dtype=jnp.int32)[None, :, None], (n, m, 1))
    first = jnp.argsort(~selected, axis=1, stable=True)
    packed, counts = _pack_rows(jnp.take_along_axis(rows, first[..., None], axis=1),
                                jnp.take_along_axis(selected, first, axis=1), m)
    return {"NegIndices": _with_offsets(packed, counts), "UpdatedMatchIndices": updated.astype(match.dtype)}




# -- rpn_target_assign / retinanet_target_assign ----------------------------------------------------
def _pixel_overlaps(a, b):
    """[A, G] IoU of pixel boxes (sizes count their end pixels, +1), 0 where they do not touch."""
    area_a = (a[:, 2] - a[:, 0] + 1) * (a[:, 3] - a[:, 1] + 1)
    area_b = (b[:, 2] - b[:, 0] + 1) * (b[:, 3] - b[:, 1] + 1)
    w = jnp.maximum(jnp.minimum(a[:, None, 2], b[None, :, 2]) - jnp.maximum(a[:, None, 0], b[None, :, 0]) + 1, 0)
    h = jnp.maximum(jnp.minimum(a[:, None, 3], b[None, :, 3]) - jnp.maximum(a[:, None, 1], b[None, :, 1]) + 1, 0)
    inter = w * h
    union = area_a[:, None] + area_b[None, :] - inter
    return jnp.where(inter == 0, 0, inter / jnp.where(inter == 0, 1, union))


def _box_to_delta(ex, gt):
    """Regression targets of pixel boxes ``gt`` relative to ``ex`` (centre offsets over size, log sizes)."""
    ew, eh = ex[:, 2] - ex[:, 0] + 1, ex[:, 3] - ex[:, 1] + 1
    gw, gh = gt[:, 2] - gt[:, 0] + 1, gt[:, 3] - gt[:, 1] + 1
    ecx, ecy = ex[:, 0] + 0.5 * ew, ex[:, 1] + 0.5 * eh
    gcx, gcy = gt[:, 0] + 0.5 * gw, gt[:, 1] + 0.5 * gh
    return jnp.stack([(gcx - ecx) / ew, (gcy - ecy) / eh, jnp.log(gw / ew), jnp.log(gh / eh)], axis=-1)


def _keep_first(candidates, limit, keys=None):
    """The first ``limit`` candidates (by index, or by smallest ``keys``: a uniform random subset)."""
    if keys is None:
        rank = jnp.cumsum(candidates) - 1
    else:
        order = jnp.argsort(jnp.where(candidates, keys, jnp.inf), stable=True)
        rank = jnp.argsort(order)
    return candidates & (rank < limit)


def _assign_image(anchors, gts, gt_ok, inside, pos_thr, neg_thr, fg_limit, batch, key):
    """One image's anchor labelling (Paddle's ScoreAssign). Returns per anchor: final foreground,
    background, the number of "fake" foreground entries and the anchor they repeat, the matched
    ground truth, and the per-anchor best overlap."""
    a = anchors.shape[0]
    ov = _pixel_overlaps(anchors, gts)
    ov = jnp.where(inside[:, None] & gt_ok[None, :], ov, -jnp.inf)
    anchor_max = jnp.max(ov, axis=1) if gts.shape[0] else jnp.full((a,), -jnp.inf, anchors.dtype)
    argmax = jnp.argmax(ov, axis=1) if gts.shape[0] else jnp.zeros((a,), jnp.int32)
    gt_max = jnp.max(ov, axis=0)                                        # [G]
    is_max = jnp.any(gt_ok[None, :] & inside[:, None] & (jnp.abs(ov - gt_max[None, :]) < 1e-5), axis=1)
    fg_cand = inside & (is_max | (anchor_max >= pos_thr))
    keys_fg = keys_bg = None
    if key is not None:
        k1, k2 = jax.random.split(key)
        keys_fg, keys_bg = jax.random.uniform(k1, (a,)), jax.random.uniform(k2, (a,))
    if fg_limit is None:
        fg = fg_cand
    else:
        fg = _keep_first(fg_cand, fg_limit, keys_fg)
    fg_count = jnp.sum(fg).astype(jnp.int32)
    bg_cand = inside & (anchor_max < neg_thr)
    bg = bg_cand if batch is None else _keep_first(bg_cand, batch - fg_count, keys_bg)
    # The anchor a "fake" foreground entry repeats: the first sampled foreground one.
    first_keys = jnp.where(fg, jnp.arange(a) if keys_fg is None else keys_fg, jnp.inf)
    first_fg = jnp.argmin(first_keys).astype(jnp.int32)
    fake = jnp.sum(fg & bg).astype(jnp.int32)                           # sampled both ways: background wins
    return fg & ~bg, bg, fake, first_fg, argmax.astype(jnp.int32), anchor_max


def _target_assign_common(ctx, retina: bool):
    anchors = ctx.input("Anchor")
    gt_rows, gt_off = _rows_and_offsets(ctx.input("GtBoxes"))
    crowd_rows, crowd_off = _rows_and_offsets(ctx.input("IsCrowd"))
    im_info = ctx.input("ImInfo")
    if ctx.input("GtBoxes").__class__ is not LoDValue:
        _fail(ctx, "GtBoxes must be a LoD tensor (one sequence of boxes per image)")
    a = anchors.shape[0]
    dtype = anchors.dtype
    gts, gt_valid = _per_instance(gt_rows.astype(dtype), gt_off)          # [N, G, 4]
    crowd, _ = _per_instance(crowd_rows.reshape(crowd_rows.shape[0], -1)[:, 0], crowd_off)
    n = gts.shape[0]
    gt_ok = gt_valid & (crowd == 0)
    gts = gts * im_info[:, 2].astype(dtype)[:, None, None]
    if retina:
        label_rows, label_off = _rows_and_offsets(ctx.input("GtLabels"))
        labels, _ = _per_instance(label_rows.reshape(label_rows.shape[0], -1)[:, 0], label_off)
        pos, neg = float(ctx.attr("positive_overlap")), float(ctx.attr("negative_overlap"))
        straddle, fg_limit, batch, keys = -1.0, None, None, None
    else:
        pos, neg = float(ctx.attr("rpn_positive_overlap")), float(ctx.attr("rpn_negative_overlap"))
        straddle = float(ctx.attr("rpn_straddle_thresh"))
        per_im, frac = int(ctx.attr("rpn_batch_size_per_im")), float(ctx.attr("rpn_fg_fraction"))
        sampling = frac > 0 and per_im > 0
        fg_limit = int(frac * per_im) if sampling else None
        batch = per_im if sampling else None
        keys = jax.random.split(ctx.rng(), n) if ctx.attr("use_random") and sampling else None
    im_h, im_w = im_info[:, 0].astype(dtype), im_info[:, 1].astype(dtype)
    if straddle >= 0:
        t = jnp.asarray(straddle, dtype)
        inside = ((anchors[None, :, 0] >= -t) & (anchors[None, :, 1] >= -t)
                  & (anchors[None, :, 2] < im_w[:, None] + t) & (anchors[None, :, 3] < im_h[:, None] + t))
    else:
        inside = jnp.ones((n, a), bool)

    def one(gt, ok, ins, key):
        return _assign_image(anchors, gt, ok, ins, pos, neg, fg_limit, batch, key)

    if keys is None:
        fg, bg, fake, first_fg, argmax, _ = jax.vmap(lambda g, o, i: one(g, o, i, None))(gts, gt_ok, inside)
    else:
        fg, bg, fake, first_fg, argmax, _ = jax.vmap(one)(gts, gt_ok, inside, keys)
    loc_cap = a if fg_limit is None else max(1, min(a, fg_limit))
    score_cap = a if batch is None else max(1, min(a, batch))
    # Location rows: the fake entries (the first foreground anchor, weight 0), then the foreground
    # anchors in increasing order.
    fg_order = jnp.argsort(~fg, axis=1, stable=True)[:, :loc_cap]        # foreground first, in order
    slot = jnp.arange(loc_cap, dtype=jnp.int32)[None, :]
    from_fg = jnp.take_along_axis(fg_order.astype(jnp.int32), jnp.clip(slot - fake[:, None], 0, loc_cap - 1), axis=1)
    loc_anchor = jnp.where(slot < fake[:, None], first_fg[:, None], from_fg)
    loc_count = fake + jnp.sum(fg, axis=1).astype(jnp.int32)
    loc_sel = slot < loc_count[:, None]
    gt_of = jnp.take_along_axis(argmax, loc_anchor, axis=1)              # [N, cap]
    matched_gt = jnp.take_along_axis(gts, gt_of[..., None], axis=1)       # [N, cap, 4]
    deltas = _box_to_delta(anchors[loc_anchor.reshape(-1)], matched_gt.reshape(-1, 4)).reshape(n, loc_cap, 4)
    weight = jnp.broadcast_to((slot >= fake[:, None])[..., None], (n, loc_cap, 4)).astype(dtype)
    offset = (jnp.arange(n, dtype=jnp.int32) * a)[:, None]
    # Score rows: foreground then background anchors, each in increasing order.
    order = jnp.argsort(jnp.where(fg, 0, jnp.where(bg, 1, 2)), axis=1, stable=True)[:, :score_cap]
    score_anchor = order.astype(jnp.int32)
    score_count = jnp.sum(fg | bg, axis=1).astype(jnp.int32)
    score_sel = jnp.arange(score_cap)[None, :] < score_count[:, None]
    is_fg = jnp.take_along_axis(fg, score_anchor, axis=1)
    if retina:
        fg_label = jnp.take_along_axis(labels.astype(jnp.int32), jnp.take_along_axis(argmax, score_anchor, axis=1),
                                       axis=1)
        label = jnp.where(is_fg, fg_label, 0)
    else:
        label = is_fg.astype(jnp.int32)
    packed_loc, loc_counts = _pack_rows(jnp.concatenate([deltas, weight], axis=-1), loc_sel, loc_cap)
    packed_index, _ = _pack_rows((loc_anchor + offset)[..., None], loc_sel, loc_cap)
    score_rows = jnp.stack([score_anchor + offset, label], axis=-1)
    packed_score, score_counts = _pack_rows(score_rows, score_sel, score_cap)
    out = {"LocationIndex": _with_offsets(packed_index[:, 0], loc_counts),
           "TargetBBox": _with_offsets(packed_loc[:, :4], loc_counts),
           "BBoxInsideWeight": _with_offsets(packed_loc[:, 4:], loc_counts),
           "ScoreIndex": _with_offsets(packed_score[:, 0], score_counts),
           "TargetLabel": _with_offsets(packed_score[:, 1:2], score_counts)}
    if retina:
        out["ForegroundNumber"] = (loc_count + 1).reshape(n, 1)
    return out


def _anchor_assign_shape(ctx: InferShapeContext, retina: bool) -> None:
    anchor, gt, crowd, im = ctx.input("Anchor"), ctx.input("GtBoxes"), ctx.input("IsCrowd"), ctx.input("ImInfo")
    ctx.check(anchor.ndim == 2 and anchor.shape[1] in (4, -1), f"Anchor must be [A, 4], got {anchor.shape}")
    ctx.check(gt.ndim == 2 and gt.shape[1] in (4, -1), f"GtBoxes must be a LoD tensor [G, 4], got {gt.shape}")
    ctx.check(crowd.dtype == "int32", f"IsCrowd must be int32, got {crowd.dtype}")
    ctx.check(im.ndim == 2 and im.shape[1] in (3, -1), f"ImInfo must be [N, 3], got {im.shape}")
    if retina:
        labels = ctx.input("GtLabels")
        ctx.check(labels.ndim == 2 and labels.dtype == "int32", f"GtLabels must be int32 [G, 1], got "
                                                                f"{labels.shape} {labels.dtype}")
    dtype = anchor.dtype
    ctx.set_output("LocationIndex", (-1,), "int32", 0)
    ctx.set_output("ScoreIndex", (-1,), "int32", 0)
    ctx.set_output("TargetBBox", (-1, 4), dtype, 0)
    ctx.set_output("TargetLabel", (-1, 1), "int32", 0)
    ctx.set_output("BBoxInsideWeight", (-1, 4), dtype, 0)
    if retina:
        ctx.set_output("ForegroundNumber", (-1, 1), "int32", 0)


@op("rpn_target_assign", inputs="Anchor GtBoxes IsCrowd ImInfo",
    outputs="LocationIndex ScoreIndex TargetBBox TargetLabel BBoxInsideWeight",
    attrs={"rpn_batch_size_per_im": 256, "rpn_straddle_thresh": 0.0, "rpn_positive_overlap": 0.7,
           "rpn_negative_overlap": 0.3, "rpn_fg_fraction": 0.25, "use_random": True},
    infer_shape=lambda ctx: _anchor_assign_shape(ctx, False), random=True)
def rpn_target_assign(ctx):
    """RPN targets per image (GtBoxes, IsCrowd: LoD, one sequence per image; ImInfo [N, 3] = height,
    width, scale; ground truths are scaled by it and crowd ones ignored). Anchors within the image
    by ``rpn_straddle_thresh`` (all when it is negative) are foreground when they hold a ground
    truth's best overlap (within 1e-5) or overlap one by ``rpn_positive_overlap``, background below
    ``rpn_negative_overlap``; int(fg_fraction × batch_size_per_im) foreground anchors are kept, and
    batch_size_per_im minus them background ones: at random with ``use_random`` (a uniform subset,
    drawn from the program's seed: Paddle seeds from the clock), else the lowest-indexed. An anchor
    sampled both ways is background, and its foreground entry becomes a "fake" one (the first
    foreground anchor with inside weight 0), as Paddle does. LocationIndex [F] (fake entries first,
    then foreground, + image × A), TargetBBox [F, 4] (pixel-box deltas), BBoxInsideWeight [F, 4],
    ScoreIndex [F + B] and TargetLabel [F + B, 1]: each image's rows back to back, padded to N ×
    min(A, fg limit) and N × min(A, batch_size_per_im) rows, with per-image LoD offsets."""
    return _target_assign_common(ctx, retina=False)


@op("retinanet_target_assign", inputs="Anchor GtBoxes GtLabels IsCrowd ImInfo",
    outputs="LocationIndex ScoreIndex TargetBBox TargetLabel BBoxInsideWeight ForegroundNumber",
    attrs={"positive_overlap": 0.5, "negative_overlap": 0.4},
    infer_shape=lambda ctx: _anchor_assign_shape(ctx, True), grad=None)
def retinanet_target_assign(ctx):
    """RetinaNet targets: rpn_target_assign's labelling with ``positive_overlap`` /
    ``negative_overlap``, no straddle filter and no sampling (every foreground and background
    anchor); TargetLabel of a foreground anchor is its ground truth's GtLabels class, and
    ForegroundNumber [N, 1] is each image's location-row count + 1. Rows padded to N × A."""
    return _target_assign_common(ctx, retina=True)


lod_aware("bipartite_match", "target_assign", "rpn_target_assign", "retinanet_target_assign")

from . import detection_loss  # noqa: E402,F401  (yolov3_loss)
