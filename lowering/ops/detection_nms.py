"""Fluid 1.x's v1 NMS and proposal ops: multiclass_nms / multiclass_nms2, locality_aware_nms,
retinanet_detection_output, generate_proposals and collect_fpn_proposals.

Their outputs are LoD tensors with one level of per-image offsets (Paddle's), padded to a static
capacity that follows from the input shapes (docs/ops_data_dependent.md): the LoDValue's data
holds the capacity, its offsets [N + 1] the real rows of each image. The NMS machinery is
multiclass_nms3's (``detection``'s private helpers).

Where Paddle's v1 NMS kernels find no detection in the whole batch they return one value -1 with
the LoD [0, 1]; a static step cannot change its column count or its number of offsets, so here
that is one row of -1 (all columns) given to the first image: offsets [0, 1, 1, ..., 1].
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
from .detection import (_decode_proposals, _finish_nms, _greedy_keep, _iou_matrix, _nms_candidates, _pack_rows,
                        _proposal_rows, _top_candidates)


class _CountsCtx:
    """``ctx`` seen by detection's NMS helpers as if it had a per-image count output."""

    def __init__(self, ctx, slot: str) -> None:
        self._ctx, self._slot = ctx, slot

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    def has_output(self, slot: str) -> bool:
        return slot == self._slot or self._ctx.has_output(slot)


def _offsets(counts):
    """Per-image LoD offsets [N + 1] from per-image counts [N]."""
    return jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(counts).astype(jnp.int32)])


def _per_image(value, counts):
    """A ragged (count-carrying) value re-cut into one sequence per image."""
    data = value.data if value.__class__ is LoDValue else value
    return LoDValue(data, (_offsets(counts),))


def _v1_empty(value, counts, fill):
    """Paddle's v1 'nothing detected' result: one row of ``fill`` given to the first image."""
    data = value.data
    none = jnp.sum(counts) == 0
    data = data.at[0].set(jnp.where(none, jnp.full(data.shape[1:], fill, data.dtype), data[0]))
    offsets = _offsets(counts)
    offsets = jnp.where(none, jnp.minimum(jnp.arange(offsets.shape[0]), 1).astype(jnp.int32), offsets)
    return LoDValue(data, (offsets,))


def _nms_v1_shape(ctx: InferShapeContext) -> None:
    boxes, scores = ctx.input("BBoxes"), ctx.input("Scores")
    ctx.check(scores.ndim == 3, f"Scores must be [N, classes, M] (the LoD form [M, classes] is not supported), "
                                f"got {scores.shape}")
    ctx.check(boxes.ndim == 3 and boxes.shape[2] in (4, -1),
              f"BBoxes must be [N, M, 4] (polygon boxes are not supported), got {boxes.shape}")
    ctx.check(boxes.shape[1] < 0 or scores.shape[2] < 0 or boxes.shape[1] == scores.shape[2],
              f"BBoxes {boxes.shape} and Scores {scores.shape} must have the same number of boxes M")
    ctx.set_output("Out", (-1, 6), boxes.dtype, 1)
    if ctx.has_output("Index"):
        ctx.set_output("Index", (-1, 1), "int32", 1)


def _greedy_nms(ctx, boxes, scores):
    """multiclass_nms3's per-class greedy NMS, with the per-image counts."""
    order, valid, cand_scores, k = _nms_candidates(ctx, boxes, scores)
    normalized = bool(ctx.attr("normalized"))
    eta = float(ctx.attr("nms_eta"))
    thr = jnp.asarray(ctx.attr("nms_threshold"), boxes.dtype)

    def one(o, v, b):
        return jax.vmap(lambda oc, vc: _greedy_keep(_iou_matrix(b[oc], normalized), vc, thr, eta))(o, v)

    keep = jax.vmap(one)(order, valid, boxes)
    return _finish_nms(_CountsCtx(ctx, "NmsRoisNum"), boxes, order, keep, cand_scores, k, "NmsRoisNum", True)


_NMS_ATTRS = {"background_label": 0, "score_threshold": 0.0, "nms_top_k": -1, "nms_threshold": 0.3, "nms_eta": 1.0,
              "keep_top_k": -1, "normalized": True}


@op("multiclass_nms", inputs="BBoxes Scores", outputs="Out", attrs=_NMS_ATTRS, infer_shape=_nms_v1_shape, grad=None)
def multiclass_nms(ctx):
    """Fluid 1.x's multiclass NMS (multiclass_nms3's computation: per-class greedy NMS of BBoxes
    [N, M, 4] scored by Scores [N, C, M], ``keep_top_k`` per image). Out [No, 6] rows [label,
    score, x1, y1, x2, y2], with one LoD level of per-image offsets; padded to N·min(keep_top_k,
    C·min(nms_top_k, M)) rows. No detection at all: one row of -1 (see the module docstring)."""
    out = _greedy_nms(ctx, ctx.input("BBoxes"), ctx.input("Scores"))
    return {"Out": _v1_empty(out["Out"], out["NmsRoisNum"], -1)}


@op("multiclass_nms2", inputs="BBoxes Scores", outputs="Out Index", attrs=_NMS_ATTRS, infer_shape=_nms_v1_shape,
    grad=None)
def multiclass_nms2(ctx):
    """multiclass_nms with Index [No, 1]: each kept box's row in BBoxes viewed as [N·M], with
    Out's per-image LoD. No detection at all: Out one row of -1, Index one row 0 (Paddle leaves
    that row's value unset)."""
    out = _greedy_nms(ctx, ctx.input("BBoxes"), ctx.input("Scores"))
    counts = out["NmsRoisNum"]
    return {"Out": _v1_empty(out["Out"], counts, -1), "Index": _v1_empty(out["Index"], counts, 0)}


# -- locality_aware_nms ------------------------------------------------------------------------------
def _merge_by_locality(boxes, scores, thr, normalized: bool):
    """One pass over the boxes in their order: a box overlapping the current one by more than
    ``thr`` merges into it (score-weighted mean of the corners, scores summed); otherwise the
    current one is final and this box becomes current. Returns the merged boxes and scores and
    which boxes survive (were not merged away)."""
    m = boxes.shape[0]

    def step(i, carry):
        bx, sc, cur, alive = carry
        pair = _iou_matrix(jnp.stack([bx[i], bx[jnp.maximum(cur, 0)]]), normalized)[0, 1]
        merge = (cur >= 0) & (pair > thr)
        c = jnp.maximum(cur, 0)
        merged = (bx[i] * sc[i] + bx[c] * sc[c]) / (sc[i] + sc[c])
        bx = bx.at[c].set(jnp.where(merge, merged, bx[c]))
        sc = sc.at[c].set(jnp.where(merge, sc[c] + sc[i], sc[c]))
        alive = alive.at[c].set(jnp.where((cur >= 0) & ~merge, True, alive[c]))
        cur = jnp.where(merge, cur, i)
        return bx, sc, cur, alive

    bx, sc, cur, alive = lax.fori_loop(0, m, step, (boxes, scores, jnp.asarray(-1, jnp.int32), jnp.zeros((m,), bool)))
    alive = alive.at[jnp.maximum(cur, 0)].set(jnp.where(cur >= 0, True, alive[jnp.maximum(cur, 0)]))
    return bx, sc, alive


@op("locality_aware_nms", inputs="BBoxes Scores", outputs="Out",
    attrs={**_NMS_ATTRS, "background_label": -1}, infer_shape=_nms_v1_shape, grad=None)
def locality_aware_nms(ctx):
    """Locality-aware NMS (EAST): per image and class (except ``background_label``), neighbouring
    boxes (in input order) overlapping by more than ``nms_threshold`` are first merged (score-
    weighted, scores summed), then the merged boxes scoring above ``score_threshold`` go through
    greedy NMS; ``keep_top_k`` per image. Out as multiclass_nms's, with the merged boxes and
    scores. As in Paddle's kernel, the merges of one class change the boxes the next class sees."""
    boxes, scores = ctx.input("BBoxes"), ctx.input("Scores")
    n, c, m = scores.shape
    normalized = bool(ctx.attr("normalized"))
    thr = jnp.asarray(ctx.attr("nms_threshold"), boxes.dtype)
    eta = float(ctx.attr("nms_eta"))
    top_k = int(ctx.attr("nms_top_k"))
    k = m if top_k < 0 else min(top_k, m)
    score_thr = jnp.asarray(ctx.attr("score_threshold"), scores.dtype)
    background = int(ctx.attr("background_label"))

    def one_image(bx, sc):
        orders, oks, cand, merged_scores = [], [], [], []
        for cls in range(c):
            if cls == background:
                orders.append(jnp.zeros((k,), jnp.int32))
                oks.append(jnp.zeros((k,), bool))
                cand.append(jnp.zeros((k,), sc.dtype))
                continue
            bx, s, alive = _merge_by_locality(bx, sc[cls], thr, normalized)
            order, ok = _top_candidates(jnp.where(alive, s, -jnp.inf), score_thr, k)
            ok = ok & alive[order]
            keep = _greedy_keep(_iou_matrix(bx[order], normalized), ok, thr, eta)
            orders.append(order.astype(jnp.int32))
            oks.append(keep)
            cand.append(s[order])
        return bx, jnp.stack(orders), jnp.stack(oks), jnp.stack(cand)

    merged, order, keep, cand = jax.vmap(one_image)(boxes, scores)
    out = _finish_nms(_CountsCtx(ctx, "NmsRoisNum"), merged, order, keep, cand, k, "NmsRoisNum", True)
    return {"Out": _v1_empty(out["Out"], out["NmsRoisNum"], -1)}


# -- retinanet_detection_output ----------------------------------------------------------------------
def _retinanet_shape(ctx: InferShapeContext) -> None:
    boxes, scores, anchors = ctx.inputs("BBoxes"), ctx.inputs("Scores"), ctx.inputs("Anchors")
    ctx.check(len(boxes) == len(scores) == len(anchors) and boxes,
              f"BBoxes, Scores and Anchors need one entry per FPN level, got {len(boxes)}, {len(scores)}, "
              f"{len(anchors)}")
    classes = scores[0].shape[2] if scores[0].ndim == 3 else -1
    for b, s, a in zip(boxes, scores, anchors):
        ctx.check(b.ndim == 3 and b.shape[2] in (4, -1), f"each BBoxes entry must be [N, Mi, 4], got {b.shape}")
        ctx.check(s.ndim == 3 and s.shape[2] == classes, f"each Scores entry must be [N, Mi, {classes}], got {s.shape}")
        ctx.check(a.ndim == 2 and a.shape[1] in (4, -1), f"each Anchors entry must be [Mi, 4], got {a.shape}")
        ctx.check(b.shape[1] < 0 or s.shape[1] < 0 or a.shape[0] < 0 or b.shape[1] == s.shape[1] == a.shape[0],
                  f"a level's BBoxes {b.shape}, Scores {s.shape} and Anchors {a.shape} must agree on Mi")
    info = ctx.input("ImInfo")
    ctx.check(info.ndim == 2 and info.shape[1] in (3, -1), f"ImInfo must be [N, 3], got {info.shape}")
    ctx.set_output("Out", (-1, 6), scores[0].dtype, 1)


def _class_greedy(iou, ok, cls, classes: int, threshold, eta: float):
    """Greedy NMS over candidates sorted best first, each suppressed only by kept ones of its own
    class, with one adaptive threshold per class."""
    k = ok.shape[0]

    def step(i, carry):
        keep, thr = carry
        same = (jnp.arange(k) < i) & keep & (cls == cls[i])
        keep_i = ok[i] & ~jnp.any(same & (iou[i] > thr[cls[i]]))
        keep = keep.at[i].set(keep_i)
        if eta < 1:
            thr = thr.at[cls[i]].set(jnp.where(keep_i & (thr[cls[i]] > 0.5), thr[cls[i]] * eta, thr[cls[i]]))
        return keep, thr

    keep, _ = lax.fori_loop(0, k, step, (jnp.zeros((k,), bool), jnp.full((classes,), threshold)))
    return keep


@op("retinanet_detection_output", inputs="BBoxes* Scores* Anchors* ImInfo", outputs="Out",
    attrs={"score_threshold": 0.05, "nms_top_k": 1000, "nms_threshold": 0.3, "nms_eta": 1.0, "keep_top_k": 100},
    infer_shape=_retinanet_shape, grad=None)
def retinanet_detection_output(ctx):
    """RetinaNet's detections: per image and FPN level, the ``nms_top_k`` best (anchor, class)
    scores above ``score_threshold`` (above 0 on the last level) are decoded against the pixel
    anchors (no variances), scaled back by ImInfo's scale and clipped to the original image; then
    per-class greedy NMS (pixel IoU) over all levels and the ``keep_top_k`` best. Out [No, 6] rows
    [label + 1, score, x1, y1, x2, y2], best first, one LoD level of per-image offsets; padded to
    N·min(keep_top_k, Σ min(nms_top_k, Mi·C)) rows. No detection: no rows (as Paddle)."""
    boxes_l, scores_l, anchors_l = ctx.inputs("BBoxes"), ctx.inputs("Scores"), ctx.inputs("Anchors")
    info = ctx.input("ImInfo")
    dtype = scores_l[0].dtype
    classes = scores_l[0].shape[2]
    top_k = int(ctx.attr("nms_top_k"))
    keep_top_k = int(ctx.attr("keep_top_k"))
    thr0 = float(ctx.attr("score_threshold"))
    eta = float(ctx.attr("nms_eta"))
    nms_thr = jnp.asarray(ctx.attr("nms_threshold"), dtype)
    levels = len(scores_l)

    def one_image(deltas_l, sc_l, im):
        im = im.astype(dtype)
        im_h = jnp.floor(im[0] / im[2] + 0.5)            # C's round (the sizes are positive)
        im_w = jnp.floor(im[1] / im[2] + 0.5)
        rows, oks, classes_of = [], [], []
        for l, (dl, sc, an) in enumerate(zip(deltas_l, sc_l, anchors_l)):
            flat = sc.reshape(-1)
            k = flat.shape[0] if top_k < 0 else min(top_k, flat.shape[0])
            thr = jnp.asarray(thr0 if l < levels - 1 else 0.0, dtype)
            order, ok = _top_candidates(flat, thr, k)
            a, c = order // classes, order % classes
            an, d = an.astype(dtype)[a], dl.astype(dtype)[a]
            aw, ah = an[:, 2] - an[:, 0] + 1, an[:, 3] - an[:, 1] + 1
            cx, cy = d[:, 0] * aw + an[:, 0] + aw / 2, d[:, 1] * ah + an[:, 1] + ah / 2
            w, h = jnp.exp(d[:, 2]) * aw, jnp.exp(d[:, 3]) * ah
            box = jnp.stack([cx - w / 2, cy - h / 2, cx + w / 2 - 1, cy + h / 2 - 1], axis=-1) / im[2]
            hi = jnp.stack([im_w, im_h, im_w, im_h]) - 1
            box = jnp.maximum(jnp.minimum(box, hi), 0)
            rows.append(jnp.concatenate([box, flat[order][:, None]], axis=-1))
            oks.append(ok)
            classes_of.append(c.astype(jnp.int32))
        rows, ok, cls = jnp.concatenate(rows), jnp.concatenate(oks), jnp.concatenate(classes_of)
        total = rows.shape[0]
        by_score = jnp.lexsort((jnp.arange(total), jnp.where(ok, -rows[:, 4], jnp.inf)))
        rows, ok, cls = rows[by_score], ok[by_score], cls[by_score]
        keep = _class_greedy(_iou_matrix(rows[:, :4], False), ok, cls, classes, nms_thr, eta)
        # The kept ones by score; ties: lower class first, then the NMS order.
        final = jnp.lexsort((jnp.arange(total), cls, jnp.where(keep, -rows[:, 4], jnp.inf)))
        rank = jnp.argsort(final)
        selected = keep & (rank < keep_top_k) if keep_top_k > -1 else keep
        out = jnp.concatenate([(cls + 1).astype(dtype)[:, None], rows[:, 4:5], rows[:, :4]], axis=-1)
        capacity = total if keep_top_k < 0 else min(total, keep_top_k)
        take = final[:capacity]
        return out[take], selected[take], capacity

    capacity = None

    def mapped(deltas_l, sc_l, im):
        nonlocal capacity
        out, sel, capacity = one_image(deltas_l, sc_l, im)
        return out, sel

    out, sel = jax.vmap(mapped)(boxes_l, scores_l, info)
    packed, counts = _pack_rows(out, sel, capacity)
    return {"Out": LoDValue(packed, (_offsets(counts),))}


# -- generate_proposals (v1) -------------------------------------------------------------------------
def _proposals_v1_shape(ctx: InferShapeContext) -> None:
    scores, deltas, info = ctx.input("Scores"), ctx.input("BboxDeltas"), ctx.input("ImInfo")
    ctx.check(scores.ndim == 4 and deltas.ndim == 4, f"Scores and BboxDeltas must be 4-D, got {scores.shape}, "
                                                     f"{deltas.shape}")
    ctx.check(scores.shape[1] < 0 or deltas.shape[1] < 0 or deltas.shape[1] == 4 * scores.shape[1],
              f"BboxDeltas needs 4 channels per anchor of Scores: {deltas.shape} vs {scores.shape}")
    ctx.check(info.ndim == 2 and info.shape[1] in (3, -1), f"ImInfo must be [N, 3] (height, width, scale), "
                                                           f"got {info.shape}")
    ctx.set_output("RpnRois", (-1, 4), deltas.dtype, 1)
    ctx.set_output("RpnRoiProbs", (-1, 1), scores.dtype, 1)
    if ctx.has_output("RpnRoisNum"):
        ctx.set_output("RpnRoisNum", (scores.shape[0],), "int32", 0)


@op("generate_proposals", inputs="Scores BboxDeltas ImInfo Anchors Variances", outputs="RpnRois RpnRoiProbs RpnRoisNum?",
    attrs={"pre_nms_topN": 6000, "post_nms_topN": 1000, "nms_thresh": 0.5, "min_size": 0.1, "eta": 1.0},
    infer_shape=_proposals_v1_shape, grad=None)
def generate_proposals(ctx):
    """Fluid 1.x's RPN proposals (generate_proposals_v2's steps with ImInfo [N, 3] = (height,
    width, scale) and pixel boxes): the ``pre_nms_topN`` best anchors decoded, clipped to
    [0, width - 1] × [0, height - 1], kept when both sides measured in the original image
    ((x2 - x1) / scale + 1) reach ``min_size`` (at least 1) and the centre lies in the image,
    then greedy NMS and ``post_nms_topN``; an image left with none gets one zero box. RpnRois
    [K, 4] and RpnRoiProbs [K, 1] carry one LoD level of per-image offsets; RpnRoisNum [N]."""
    scores, deltas = ctx.input("Scores"), ctx.input("BboxDeltas")
    info, anchors, variances = ctx.input("ImInfo"), ctx.input("Anchors"), ctx.input("Variances")
    n, a, h, w = scores.shape
    m = a * h * w
    dtype = deltas.dtype
    scores = scores.transpose(0, 2, 3, 1).reshape(n, m)
    deltas = deltas.transpose(0, 2, 3, 1).reshape(n, m, 4)
    anchors = anchors.reshape(m, 4).astype(dtype)
    variances = variances.reshape(m, 4).astype(dtype)
    pre = int(ctx.attr("pre_nms_topN"))
    k = m if pre <= 0 or pre >= m else pre
    post = int(ctx.attr("post_nms_topN"))
    capacity = min(post, k) if post > 0 else k
    min_size = max(float(ctx.attr("min_size")), 1.0)
    thr = float(ctx.attr("nms_thresh"))
    eta = float(ctx.attr("eta"))

    def one_image(sc, dl, im):
        im = im.astype(dtype)
        sc, (x1, y1, x2, y2) = _decode_proposals(sc, dl, anchors, variances, k, 1.0, im[0], im[1])
        # Paddle's v1: sizes measured in the unscaled image, the centre inside it
        ws, hs = x2 - x1 + 1, y2 - y1 + 1
        keep = (((x2 - x1) / im[2] + 1 >= min_size) & ((y2 - y1) / im[2] + 1 >= min_size)
                & (x1 + ws / 2 <= im[1]) & (y1 + hs / 2 <= im[0]))
        return _proposal_rows(jnp.stack([x1, y1, x2, y2], axis=-1), sc, keep, thr, eta, post, capacity,
                              normalized=False)

    rows, selected = jax.vmap(one_image)(scores, deltas, info)
    packed, counts = _pack_rows(rows, selected, capacity)
    offsets = (_offsets(counts),)
    out = {"RpnRois": LoDValue(packed[:, :4], offsets),
           "RpnRoiProbs": LoDValue(packed[:, 4:].astype(ctx.input("Scores").dtype), offsets)}
    if ctx.has_output("RpnRoisNum"):
        out["RpnRoisNum"] = counts
    return out


# -- collect_fpn_proposals ---------------------------------------------------------------------------
def _collect_shape(ctx: InferShapeContext) -> None:
    rois, scores = ctx.inputs("MultiLevelRois"), ctx.inputs("MultiLevelScores")
    ctx.check(len(rois) == len(scores) and rois, f"MultiLevelRois and MultiLevelScores need one entry per level, "
                                                 f"got {len(rois)} and {len(scores)}")
    for r, s in zip(rois, scores):
        ctx.check(r.ndim == 2 and r.shape[1] in (4, -1), f"each MultiLevelRois entry must be [R, 4], got {r.shape}")
        ctx.check(s.ndim == 2 and s.shape[1] in (1, -1), f"each MultiLevelScores entry must be [R, 1], got {s.shape}")
    nums = ctx.inputs("MultiLevelRoIsNum")
    ctx.check(not nums or len(nums) == len(rois), f"MultiLevelRoIsNum needs one entry per level, got {len(nums)}")
    ctx.check(bool(nums) or all(r.lod_level >= 1 for r in rois),
              "collect_fpn_proposals needs LoD MultiLevelRois (one sequence per image) or MultiLevelRoIsNum")
    ctx.check(ctx.attr("post_nms_topN") >= 0, f"post_nms_topN must be >= 0, got {ctx.attr('post_nms_topN')}")
    ctx.set_output("FpnRois", (-1, 4), rois[0].dtype, 1)
    if ctx.has_output("RoisNum"):
        images = nums[0].shape[0] if nums else -1
        ctx.set_output("RoisNum", (images,), "int32", 0)


@op("collect_fpn_proposals", inputs="MultiLevelRois* MultiLevelScores* MultiLevelRoIsNum*?", outputs="FpnRois RoisNum?",
    attrs={"post_nms_topN": 100}, infer_shape=_collect_shape, grad=None)
def collect_fpn_proposals(ctx):
    """Merges the ROIs of all FPN levels and keeps the ``post_nms_topN`` best-scoring over the whole
    batch (ties: lower level, then earlier row), regrouped by image. FpnRois carries one LoD level
    of per-image offsets (also where an image keeps none, which Paddle's kernel's LoD leaves out);
    RoisNum [N] counts them. Images come from the levels' LoD, or MultiLevelRoIsNum [N] each."""
    rois_l, scores_l = ctx.inputs("MultiLevelRois"), ctx.inputs("MultiLevelScores")
    nums = ctx.inputs("MultiLevelRoIsNum")
    datas, scs, reals, images = [], [], [], []
    n_images = None
    for i, (r, s) in enumerate(zip(rois_l, scores_l)):
        data = r.data if r.__class__ is LoDValue else r
        sc = (s.data if s.__class__ is LoDValue else s).reshape(-1)
        sc = jnp.pad(sc, (0, data.shape[0] - sc.shape[0])) if sc.shape[0] < data.shape[0] else sc[:data.shape[0]]
        rows = jnp.arange(data.shape[0], dtype=jnp.int32)
        if nums:
            ends = jnp.cumsum(nums[i].astype(jnp.int32))
            image = jnp.searchsorted(ends, rows, side="right").astype(jnp.int32)
            real = rows < ends[-1]
            n_images = nums[i].shape[0]
        elif r.__class__ is LoDValue:
            image = r.segment_ids().astype(jnp.int32)
            real = r.row_mask()
            n_images = r.offsets[-1].shape[0] - 1
        else:
            _fail(ctx, "MultiLevelRois need a LoD (one sequence per image) or MultiLevelRoIsNum")
        datas.append(data)
        scs.append(sc)
        reals.append(real)
        images.append(image)
    data, sc, real, image = (jnp.concatenate(v) for v in (datas, scs, reals, images))
    total = data.shape[0]
    post = int(ctx.attr("post_nms_topN"))
    capacity = max(min(post, total), 1)
    by_score = jnp.lexsort((jnp.arange(total), jnp.where(real, -sc, jnp.inf)))
    rank = jnp.argsort(by_score)
    selected = real & (rank < post)
    final = jnp.lexsort((rank, image, ~selected))[:capacity]
    rows = data[final]
    counts = jnp.zeros((n_images,), jnp.int32).at[image].add(selected.astype(jnp.int32))
    out = {"FpnRois": LoDValue(rows, (_offsets(counts),))}
    if ctx.has_output("RoisNum"):
        out["RoisNum"] = counts
    return out


lod_aware("collect_fpn_proposals")
