"""Fast R-CNN / Mask R-CNN training labels of Fluid 1.x: ``generate_proposal_labels`` (sampling the
second stage's training ROIs with their classes and box targets) and ``generate_mask_labels``
(each foreground ROI's ground-truth mask, rasterized from polygons).

Both take their ground truths as LoD tensors (one sequence per image), gathered inside a compiled
step into dense per-image blocks (``detection_target._per_instance``). Their outputs hold a
data-dependent number of rows per image: they are padded to a capacity fixed by the input shapes
and carry each image's row count as LoD offsets (docs/ops_data_dependent.md); padding rows are
zeros.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir.registry import op
from ...ir.shape import InferShapeContext
from ..lod_value import LoDValue
from ..lower import lod_aware
from ._errors import _fail
from .detection import _pack_rows
from .detection_target import (_box_to_delta, _keep_first, _per_instance, _pixel_overlaps, _rows_and_offsets,
                               _with_offsets)

_EPS = 1e-5


def _column(rows):
    """The first column of a [rows, 1] (or [rows]) LoD tensor's rows."""
    return rows.reshape(rows.shape[0], -1)[:, 0]


def _divide(x, d):
    """x / d elementwise with IEEE division: XLA on CPU turns a division by a broadcast value into a
    multiplication by its reciprocal (1 ulp off Paddle's float division); the barrier hides the
    broadcast."""
    return x / lax.optimization_barrier(jnp.broadcast_to(d, x.shape).astype(x.dtype))


def _image_blocks(ctx, slot: str, n: int):
    """Each image's rows of LoD input ``slot`` as a dense block [N, R, ...] and its validity mask."""
    value = ctx.input(slot)
    if value.__class__ is not LoDValue:
        _fail(ctx, f"{slot} must be a LoD tensor (one sequence of rows per image)")
    rows, offsets = _rows_and_offsets(value)
    if offsets.shape[0] - 1 != n:
        _fail(ctx, f"{slot} has {offsets.shape[0] - 1} sequences but ImInfo has {n} images")
    return _per_instance(rows, offsets)


# -- generate_proposal_labels ------------------------------------------------------------------------
def _proposal_labels_shape(ctx: InferShapeContext) -> None:
    rois, boxes, im = ctx.input("RpnRois"), ctx.input("GtBoxes"), ctx.input("ImInfo")
    classes, crowd = ctx.input("GtClasses"), ctx.input("IsCrowd")
    ctx.check(rois.ndim == 2 and rois.shape[1] in (4, -1), f"RpnRois must be a LoD tensor [R, 4], got {rois.shape}")
    ctx.check(boxes.ndim == 2 and boxes.shape[1] in (4, -1), f"GtBoxes must be a LoD tensor [G, 4], got {boxes.shape}")
    ctx.check(im.ndim == 2 and im.shape[1] in (3, -1), f"ImInfo must be [N, 3], got {im.shape}")
    ctx.check(classes.dtype == "int32", f"GtClasses must be int32, got {classes.dtype}")
    ctx.check(crowd.dtype == "int32", f"IsCrowd must be int32, got {crowd.dtype}")
    classes_n = ctx.attr("class_nums")
    ctx.check(isinstance(classes_n, int) and classes_n > 0, f"class_nums must be a positive int, got {classes_n!r}")
    ctx.check(len(ctx.attr("bbox_reg_weights")) == 4,
              f"bbox_reg_weights must hold 4 numbers, got {ctx.attr('bbox_reg_weights')}")
    if not ctx.attr("is_cascade_rcnn"):
        ctx.check(ctx.attr("batch_size_per_im") > 0, f"batch_size_per_im must be positive, got "
                                                     f"{ctx.attr('batch_size_per_im')}")
    overlap = ctx.input("MaxOverlap")
    if overlap is not None:
        ctx.check(overlap.ndim == 1 or (overlap.ndim == 2 and overlap.shape[1] == 1),
                  f"MaxOverlap must be [R] (one per RpnRois row), got {overlap.shape}")
    dtype = rois.dtype
    width = 4 * classes_n
    ctx.set_output("Rois", (-1, 4), dtype, 1)                 # one sequence per image, as Paddle's LoD
    ctx.set_output("LabelsInt32", (-1, 1), "int32", 1)
    for slot in ("BboxTargets", "BboxInsideWeights", "BboxOutsideWeights"):
        ctx.set_output(slot, (-1, width), dtype, 1)
    if ctx.has_output("MaxOverlapWithGT"):
        ctx.set_output("MaxOverlapWithGT", (-1,), dtype, 1)


def _sample_image(rois, roi_ok, gts, gt_ok, crowd, prior_overlap, cfg, key):
    """One image's candidate boxes (its ground truths, then its ROIs, already brought back to the
    original image scale), their labelling and sampling. Returns the candidate boxes [B, 4] (original scale),
    the sampled foreground and background masks [B], each candidate's matched ground truth and its
    largest overlap."""
    dtype = rois.dtype
    g = gts.shape[0]
    if cfg["cascade"]:
        if prior_overlap is None:   # what MaxOverlap holds: each ROI's best overlap with the ground truths
            ov = jnp.where(gt_ok[None, :], _pixel_overlaps(rois, gts), -jnp.inf)
            prior_overlap = jnp.max(ov, axis=1) if g else jnp.zeros(rois.shape[:1], dtype)
        keep = (roi_ok & (rois[:, 2] - rois[:, 0] + 1 > 0) & (rois[:, 3] - rois[:, 1] + 1 > 0)
                & (prior_overlap < 1))
        # No ROI left: one zero box stands in (as Paddle does).
        empty = ~jnp.any(keep)
        first = jnp.arange(rois.shape[0]) == 0
        rois = jnp.where((empty & first)[:, None], jnp.zeros_like(rois), rois)
        roi_ok = keep | (empty & first & jnp.any(roi_ok))
    boxes = jnp.concatenate([gts, rois], axis=0)                          # [B, 4]
    box_ok = jnp.concatenate([gt_ok, roi_ok])
    if g:
        ov = jnp.where(gt_ok[None, :], _pixel_overlaps(boxes, gts), -jnp.inf)
        best = jnp.max(ov, axis=1)
        best = jnp.where(jnp.any(gt_ok), best, 0).astype(dtype)
        near = gt_ok[None, :] & (jnp.abs(best[:, None] - ov) < _EPS)
        matched = jnp.argmax(near, axis=1).astype(jnp.int32)             # the first column within 1e-5
    else:
        best = jnp.zeros(boxes.shape[:1], dtype)
        matched = jnp.zeros(boxes.shape[:1], jnp.int32)
    is_gt_row = jnp.arange(boxes.shape[0]) < g
    crowd_row = jnp.concatenate([crowd != 0, jnp.zeros(rois.shape[:1], bool)])
    label_best = jnp.where(is_gt_row & crowd_row, jnp.asarray(-1, dtype), best)
    fg = box_ok & (label_best >= cfg["fg_thresh"])
    bg = box_ok & ~fg & (label_best >= cfg["bg_lo"]) & (label_best < cfg["bg_hi"])
    if not cfg["cascade"]:
        keys_fg = keys_bg = None
        if key is not None:
            k1, k2 = jax.random.split(key)
            keys_fg, keys_bg = jax.random.uniform(k1, fg.shape), jax.random.uniform(k2, bg.shape)
        fg = _keep_first(fg, cfg["fg_limit"], keys_fg)
        bg = _keep_first(bg, cfg["batch"] - jnp.sum(fg), keys_bg)
    return boxes, fg, bg, matched, best


@op("generate_proposal_labels", inputs="RpnRois GtClasses IsCrowd GtBoxes ImInfo MaxOverlap?",
    outputs="Rois LabelsInt32 BboxTargets BboxInsideWeights BboxOutsideWeights MaxOverlapWithGT?",
    attrs={"batch_size_per_im": 256, "fg_fraction": 0.25, "fg_thresh": 0.25, "bg_thresh_hi": 0.5,
           "bg_thresh_lo": 0.0, "bbox_reg_weights": [0.1, 0.1, 0.2, 0.2], "class_nums": 0, "use_random": True,
           "is_cls_agnostic": False, "is_cascade_rcnn": False},
    infer_shape=_proposal_labels_shape, random=True)
def generate_proposal_labels(ctx):
    """Fast R-CNN training ROIs per image. The candidates are the image's ground truths (GtBoxes,
    original image scale) followed by its RpnRois divided by ImInfo's scale; each is labelled by its
    largest pixel-box IoU with the ground truths (crowd ground-truth rows count as -1): foreground
    at ``fg_thresh`` or more (matched to the first ground truth within 1e-5 of that overlap),
    background in [``bg_thresh_lo``, ``bg_thresh_hi``). Without ``is_cascade_rcnn``,
    floor(batch_size_per_im × fg_fraction) foreground and batch_size_per_im minus those background
    candidates are kept: the first ones, or with ``use_random`` a uniform subset drawn from the
    program's seed (Paddle draws from the clock, by reservoir sampling). With it, every one is kept,
    after dropping the ROIs of non-positive size or whose MaxOverlap is 1 (without a MaxOverlap
    input — Fluid 1.8's op has none — each ROI's best IoU with the image's ground truths is used).

    Rois [P, 4] (scaled back by ImInfo), LabelsInt32 [P, 1] (the matched class, 0 for background),
    BboxTargets [P, 4·class_nums] (the box deltas divided by ``bbox_reg_weights`` in the label's
    four columns, or columns 4..7 with ``is_cls_agnostic``), BboxInside/OutsideWeights (1 there),
    MaxOverlapWithGT [P]: each image's foreground then background rows, images with ROIs back to
    back, padded to N × min(batch_size_per_im, G + R) rows (N × (G + R) with cascade; G, R the
    padded row counts of GtBoxes and RpnRois) with per-image LoD offsets. A label of class_nums or
    more writes no target (Paddle writes past the row)."""
    im_info = ctx.input("ImInfo")
    n = im_info.shape[0]
    rois, roi_ok = _image_blocks(ctx, "RpnRois", n)
    dtype = rois.dtype
    gts, gt_ok = _image_blocks(ctx, "GtBoxes", n)
    gts = gts.astype(dtype)
    classes, _ = _image_blocks(ctx, "GtClasses", n)
    crowd, _ = _image_blocks(ctx, "IsCrowd", n)
    classes, crowd = classes.reshape(n, gts.shape[1], -1)[..., 0], crowd.reshape(n, gts.shape[1], -1)[..., 0]
    prior = None
    cascade = bool(ctx.attr("is_cascade_rcnn"))
    if cascade and ctx.input("MaxOverlap") is not None:
        mo = ctx.input("MaxOverlap")
        mo_rows = mo.data if mo.__class__ is LoDValue else mo
        roi_offsets = _rows_and_offsets(ctx.input("RpnRois"))[1]
        prior, _ = _per_instance(mo_rows.reshape(mo_rows.shape[0]).astype(dtype), roi_offsets)
    batch = int(ctx.attr("batch_size_per_im"))
    cfg = {"cascade": cascade, "batch": batch,
           "fg_limit": int(math.floor(np.float32(batch) * np.float32(ctx.attr("fg_fraction")))),
           "fg_thresh": jnp.asarray(np.float32(ctx.attr("fg_thresh")), dtype),
           "bg_hi": jnp.asarray(np.float32(ctx.attr("bg_thresh_hi")), dtype),
           "bg_lo": jnp.asarray(np.float32(ctx.attr("bg_thresh_lo")), dtype)}
    scale = im_info[:, 2].astype(dtype)
    keys = None
    if ctx.attr("use_random") and not cascade:
        keys = jax.random.split(ctx.rng(), n)

    def one(r, ro, g, go, c, p, k):
        return _sample_image(r, ro, g, go, c, p, cfg, k)

    axes = (0, 0, 0, 0, 0, None if prior is None else 0, None if keys is None else 0)
    rois = _divide(rois, scale[:, None, None])
    boxes, fg, bg, matched, best = jax.vmap(one, in_axes=axes)(rois, roi_ok, gts, gt_ok, crowd, prior, keys)
    b = boxes.shape[1]
    cap = b if cascade else max(1, min(b, batch))
    # Each image: foreground candidates, then background ones, each in increasing order.
    order = jnp.argsort(jnp.where(fg, 0, jnp.where(bg, 1, 2)), axis=1, stable=True)[:, :cap]
    sel = jnp.take_along_axis(fg | bg, order, axis=1)
    sel = sel & jnp.any(roi_ok, axis=1)[:, None]                        # an image without ROIs gives no rows
    is_fg = jnp.take_along_axis(fg, order, axis=1)
    box = jnp.take_along_axis(boxes, order[..., None], axis=1)           # [N, cap, 4]
    gt_index = jnp.take_along_axis(matched, order, axis=1)
    label = jnp.where(is_fg, jnp.take_along_axis(classes.astype(jnp.int32), gt_index, axis=1), 0)
    gt_box = jnp.take_along_axis(gts, gt_index[..., None], axis=1)
    weights = jnp.asarray(np.asarray(ctx.attr("bbox_reg_weights"), np.float32), dtype)
    delta = _box_to_delta(box.reshape(-1, 4), gt_box.reshape(-1, 4)).reshape(n, cap, 4)
    delta = _divide(delta, weights)
    classes_n = int(ctx.attr("class_nums"))
    column = jnp.where(bool(ctx.attr("is_cls_agnostic")), 1, label)
    hot = ((jnp.arange(classes_n)[None, None, :] == column[..., None]) & (label > 0)[..., None])
    hot = jnp.repeat(hot, 4, axis=-1)                                    # [N, cap, 4·C]
    targets = jnp.where(hot, jnp.tile(delta, (1, 1, classes_n)), 0).astype(dtype)
    ones = hot.astype(dtype)
    rois_out = box * scale[:, None, None]
    best_out = jnp.take_along_axis(best, order, axis=1)
    packed, counts = _pack_rows(jnp.concatenate([rois_out, targets, ones, best_out[..., None]], axis=-1), sel, cap)
    packed_label, _ = _pack_rows(label[..., None], sel, cap)
    width = 4 * classes_n
    out = {"Rois": _with_offsets(packed[:, :4], counts),
           "LabelsInt32": _with_offsets(packed_label, counts),
           "BboxTargets": _with_offsets(packed[:, 4:4 + width], counts),
           "BboxInsideWeights": _with_offsets(packed[:, 4 + width:4 + 2 * width], counts),
           "BboxOutsideWeights": _with_offsets(packed[:, 4 + width:4 + 2 * width], counts)}
    if ctx.has_output("MaxOverlapWithGT"):
        out["MaxOverlapWithGT"] = _with_offsets(packed[:, -1], counts)
    return out


lod_aware("generate_proposal_labels")


# -- generate_mask_labels ----------------------------------------------------------------------------
_FLT_MIN = float(np.finfo(np.float32).tiny)
_FLT_MAX = float(np.finfo(np.float32).max)


def _trunc_line(a, s, t):
    """int(a + s·t + 0.5) in double, C's order of operations (the product kept from fusing into an
    FMA) and truncation toward zero."""
    st = lax.optimization_barrier(s * t)
    return ((a + st) + 0.5).astype(jnp.int64)


def _crossings(xs, ys, xe, ye, m: int):
    """The column crossings of polygon edges (xs, ys) -> (xe, ye) (integer coordinates at 5× the
    mask resolution, [...]) under COCO's polygon rasterization (the rule of Paddle's Poly2Mask):
    the edge is sampled one step along its major axis, and between consecutive samples whose x
    goes from 5X + 2 to 5X + 3 (either way) column X toggles from row ceil((min y - 2) / 5).
    Returns (valid [..., M], row [..., M]) per column X."""
    dx, dy = jnp.abs(xe - xs), jnp.abs(ye - ys)
    xmajor = dx >= dy
    cols = jnp.arange(m, dtype=jnp.int64)
    left = (5 * cols + 2)[(None,) * xs.ndim]                               # the sample x before the crossing
    e = lambda a: a[..., None]                                              # noqa: E731
    # x-major: the samples run over x from the left end; y rounds along the line from there.
    flip = xs > xe
    ax, ay = jnp.where(flip, xe, xs), jnp.where(flip, ye, ys)
    bx_y = jnp.where(flip, ys, ye)
    slope = (bx_y - ay).astype(jnp.float64) / jnp.maximum(dx, 1).astype(jnp.float64)
    t1 = left - e(ax)
    ok_x = e(xmajor & (dx > 0)) & (t1 >= 0) & (t1 + 1 <= e(dx))
    ya = _trunc_line(e(ay).astype(jnp.float64), e(slope), t1.astype(jnp.float64))
    yb = _trunc_line(e(ay).astype(jnp.float64), e(slope), (t1 + 1).astype(jnp.float64))
    yd_x = jnp.minimum(ya, yb)
    # y-major: the samples run over y from the lower end; x rounds along the line (monotone).
    flip = ys > ye
    cx, cy = jnp.where(flip, xe, xs), jnp.where(flip, ye, ys)
    dxs = jnp.where(flip, xs, xe) - cx
    slope = dxs.astype(jnp.float64) / jnp.maximum(dy, 1).astype(jnp.float64)
    rising = e(dxs > 0)
    target = jnp.where(rising, left + 1, left)
    s = e(slope)
    safe = jnp.where(s == 0, 1.0, s)
    guess = (left.astype(jnp.float64) + 0.5 - e(cx).astype(jnp.float64)) / safe
    t0 = jnp.where(rising, jnp.ceil(guess), jnp.floor(guess) + 1)
    t0 = jnp.clip(t0, -4, e(dy).astype(jnp.float64) + 4).astype(jnp.int64)

    def reached(t):
        u = _trunc_line(e(cx).astype(jnp.float64), s, t.astype(jnp.float64))
        return jnp.where(rising, u >= target, u <= target), u

    found = jnp.zeros(t0.shape, bool)
    t_star = jnp.zeros(t0.shape, jnp.int64)
    prev, _ = reached(t0 - 3)
    for k in range(-2, 3):                                                  # the first step that reaches it
        now, _ = reached(t0 + k)
        hit = now & ~prev & ~found
        t_star = jnp.where(hit, t0 + k, t_star)
        found = found | hit
        prev = now
    _, u_before = reached(t_star - 1)
    _, u_at = reached(t_star)
    other = jnp.where(rising, left, left + 1)
    ok_y = (e(~xmajor) & (dxs != 0)[..., None] & found & (t_star >= 1) & (t_star <= e(dy))
            & (u_before == other) & (u_at == target))
    yd_y = e(cy) + t_star - 1
    valid = ok_x | ok_y
    yd = jnp.where(ok_x, yd_x, yd_y)
    row = jnp.clip(jnp.floor_divide(yd + 2, 5), 0, m)
    return valid, row


def _mask_labels_shape(ctx: InferShapeContext) -> None:
    segms, rois, labels = ctx.input("GtSegms"), ctx.input("Rois"), ctx.input("LabelsInt32")
    im = ctx.input("ImInfo")
    ctx.check(im.ndim == 2 and im.shape[1] in (3, -1), f"ImInfo must be [N, 3], got {im.shape}")
    ctx.check(segms.ndim == 2 and segms.shape[1] in (2, -1), f"GtSegms must be [S, 2] (x, y points), got {segms.shape}")
    ctx.check(segms.lod_level in (0, 3), f"GtSegms must have 3 LoD levels (images, objects, polygons), got "
                                         f"{segms.lod_level}")
    ctx.check(rois.ndim == 2 and rois.shape[1] in (4, -1), f"Rois must be [R, 4], got {rois.shape}")
    ctx.check(labels.dtype == "int32", f"LabelsInt32 must be int32, got {labels.dtype}")
    for slot in ("GtClasses", "IsCrowd"):
        ctx.check(ctx.input(slot).dtype == "int32", f"{slot} must be int32, got {ctx.input(slot).dtype}")
    classes, res = ctx.attr("num_classes"), ctx.attr("resolution")
    ctx.check(classes > 0 and res > 0, f"num_classes and resolution must be positive, got {classes}, {res}")
    ctx.set_output("MaskRois", (-1, 4), rois.dtype, 1)
    ctx.set_output("RoiHasMaskInt32", (-1, 1), "int32", 1)
    ctx.set_output("MaskInt32", (-1, classes * res * res), "int32", 1)


@op("generate_mask_labels", inputs="ImInfo GtClasses IsCrowd GtSegms Rois LabelsInt32",
    outputs="MaskRois RoiHasMaskInt32 MaskInt32", attrs={"num_classes": 0, "resolution": 0},
    infer_shape=_mask_labels_shape, grad=None)
def generate_mask_labels(ctx):
    """Mask R-CNN's mask targets. Per image with ROIs: each foreground ROI (LabelsInt32 > 0, in
    order) is matched to the non-crowd ground truth of class > 0 whose polygons' bounding box it
    overlaps most (pixel IoU, ROIs divided by ImInfo's scale; the first such ground truth when it
    overlaps none), and that ground truth's polygons (GtSegms: points [S, 2], LoD images → objects
    → polygons) are rasterized into the ROI's ``resolution``² grid by COCO's polygon rule (Paddle's
    Poly2Mask: vertices at 5× the grid, edges sampled along their major axis, column crossings at
    the pixel centres) and united. MaskRois [P, 4] (the ROI), RoiHasMaskInt32 [P, 1] (its index
    within its image), MaskInt32 [P, num_classes·resolution²] (-1, the ROI's class block holding
    the 0/1 mask, row-major). An image without foreground ROIs gives one row: its first ROI, the
    index of its first background ROI, all -1 (as Paddle). Rows padded to the Rois rows, per-image
    LoD offsets. The rasterization holds [R, S, resolution] crossings (R the padded Rois rows, S the
    padded GtSegms points) and [R, polygons, resolution²] toggles."""
    im_info = ctx.input("ImInfo")
    n = im_info.shape[0]
    m = int(ctx.attr("resolution"))
    classes_n = int(ctx.attr("num_classes"))
    rois_v = ctx.input("Rois")
    if rois_v.__class__ is not LoDValue:
        _fail(ctx, "Rois must be a LoD tensor (one sequence of ROIs per image)")
    segms = ctx.input("GtSegms")
    if segms.__class__ is not LoDValue or len(segms.offsets) != 3:
        _fail(ctx, "GtSegms must be a LoD tensor with 3 levels (images, objects, polygons)")
    rois, roi_off = _rows_and_offsets(rois_v)
    if roi_off.shape[0] - 1 != n:
        _fail(ctx, f"Rois has {roi_off.shape[0] - 1} sequences but ImInfo has {n} images")
    dtype = rois.dtype
    labels = _column(_rows_and_offsets(ctx.input("LabelsInt32"))[0]).astype(jnp.int32)
    gt_cls = _column(_rows_and_offsets(ctx.input("GtClasses"))[0])
    crowd = _column(_rows_and_offsets(ctx.input("IsCrowd"))[0])
    l0, l1, l2 = (o.astype(jnp.int32) for o in segms.offsets)
    points = segms.data.astype(dtype)
    r_cap, s_cap = rois.shape[0], points.shape[0]
    g_cap, p_cap = l1.shape[0] - 1, l2.shape[0] - 1
    # Row -> image; ground truth -> image; polygon -> ground truth; point -> polygon.
    row = jnp.arange(r_cap, dtype=jnp.int32)
    row_img = jnp.clip(jnp.searchsorted(roi_off, row, side="right") - 1, 0, n - 1)
    row_ok = row < roi_off[-1]
    gt = jnp.arange(g_cap, dtype=jnp.int32)
    gt_img = jnp.searchsorted(l0, gt, side="right") - 1
    gt_ok = gt < l0[-1]
    take = lambda a, i: a[jnp.clip(i, 0, a.shape[0] - 1)]                 # noqa: E731
    mask_gt = gt_ok & (take(gt_cls, gt) > 0) & (take(crowd, gt) == 0)
    poly = jnp.arange(p_cap, dtype=jnp.int32)
    poly_gt = jnp.clip(jnp.searchsorted(l1, poly, side="right") - 1, 0, g_cap - 1)
    pt = jnp.arange(s_cap, dtype=jnp.int32)
    pt_ok = pt < l2[-1]
    pt_poly = jnp.clip(jnp.searchsorted(l2, pt, side="right") - 1, 0, p_cap - 1)
    pt_gt = jnp.where(pt_ok, poly_gt[pt_poly], g_cap)
    nxt = jnp.where(pt + 1 < l2[pt_poly + 1], pt + 1, l2[pt_poly])      # the polygon closes on itself
    # Each ground truth's box around its polygons (Paddle starts the maxima at FLT_MIN).
    bx0 = jnp.minimum(jax.ops.segment_min(points[:, 0], pt_gt, g_cap + 1)[:g_cap], _FLT_MAX)
    by0 = jnp.minimum(jax.ops.segment_min(points[:, 1], pt_gt, g_cap + 1)[:g_cap], _FLT_MAX)
    bx1 = jnp.maximum(jax.ops.segment_max(points[:, 0], pt_gt, g_cap + 1)[:g_cap], _FLT_MIN)
    by1 = jnp.maximum(jax.ops.segment_max(points[:, 1], pt_gt, g_cap + 1)[:g_cap], _FLT_MIN)
    poly_boxes = jnp.stack([bx0, by0, bx1, by1], axis=1).astype(dtype)
    # The output rows: each image's foreground ROIs, or its first background ROI.
    fg = row_ok & (labels > 0)
    img_fg = jax.ops.segment_sum(fg.astype(jnp.int32), row_img, n) > 0
    bg = row_ok & (labels == 0) & ~img_fg[row_img]
    bg_rank = jnp.cumsum(bg) - jax.ops.segment_sum(bg.astype(jnp.int32), row_img, n).cumsum()[row_img] \
        + jax.ops.segment_sum(bg.astype(jnp.int32), row_img, n)[row_img]
    chosen = fg | (bg & (bg_rank == 1))
    (src,) = jnp.nonzero(chosen, size=r_cap, fill_value=0)
    count = jnp.sum(chosen)
    slot_ok = jnp.arange(r_cap) < count
    img = row_img[src]
    scale = im_info[img, 2].astype(dtype)
    slot_fg = fg[src] & slot_ok
    box_src = jnp.where(slot_fg, src, roi_off[img])                     # the fallback row shows the first ROI
    box = _divide(rois[box_src], scale[:, None])                        # original image scale
    # Each foreground ROI's ground truth: the first best-overlapping box of its image's mask ones.
    same = mask_gt[None, :] & (gt_img[None, :] == img[:, None])
    ov = jnp.where(same, _pixel_overlaps(box, poly_boxes), 0)
    best = jnp.max(ov, axis=1, initial=0)
    first_best = jnp.argmax(same & (ov == best[:, None]) & (best > _FLT_MIN)[:, None], axis=1)
    first_mask = jnp.argmax(same, axis=1)
    match = jnp.where(best > _FLT_MIN, first_best, first_mask).astype(jnp.int32)
    # Rasterize the matched ground truth's polygons in each ROI's grid.
    w = jnp.maximum(box[:, 2] - box[:, 0], 1)
    h = jnp.maximum(box[:, 3] - box[:, 1], 1)
    px = _divide((points[None, :, 0] - box[:, 0:1]) * m, w[:, None])    # [R, S], float like Paddle
    py = _divide((points[None, :, 1] - box[:, 1:2]) * m, h[:, None])
    # Vertices at 5× the grid, rounded half up (Paddle 2.6.2 rounds negative ones down too).
    ix = jnp.floor(5.0 * px.astype(jnp.float64) + 0.5).astype(jnp.int64)
    iy = jnp.floor(5.0 * py.astype(jnp.float64) + 0.5).astype(jnp.int64)
    valid, rows = _crossings(ix, iy, ix[:, nxt], iy[:, nxt], m)       # [R, S, M]
    mine = slot_fg[:, None] & (pt_gt[None, :] == match[:, None])       # [R, S]
    valid = valid & mine[..., None]
    local_poly = pt_poly[None, :] - l1[match][:, None]                   # [R, S]
    pos = jnp.arange(m)[None, None, :] * m + rows                       # column-major position
    slot_i = jnp.broadcast_to(jnp.arange(r_cap)[:, None, None], pos.shape)
    poly_i = jnp.broadcast_to(local_poly[..., None], pos.shape)
    pos = jnp.where(valid, pos, m * m + 1)
    toggles = jnp.zeros((r_cap, p_cap, m * m + 1), jnp.int8).at[slot_i, poly_i, pos].add(
        jnp.ones(pos.shape, jnp.int8), mode="drop")
    inside = (lax.cumsum(toggles[..., :m * m], axis=2) & 1).astype(bool)  # parity up to each pixel
    mask = jnp.any(inside, axis=1).reshape(r_cap, m, m).transpose(0, 2, 1).reshape(r_cap, m * m)
    cls = jnp.where(slot_fg, labels[src], 0)
    block = (jnp.arange(classes_n)[None, :] == cls[:, None]) & (cls > 0)[:, None]
    mask_int = jnp.where(jnp.repeat(block, m * m, axis=1), jnp.tile(mask.astype(jnp.int32), (1, classes_n)), -1)
    local = src - roi_off[img]
    out_box = box * scale[:, None]
    counts = jax.ops.segment_sum(slot_ok.astype(jnp.int32), img, n)
    zero = lambda a: jnp.where(slot_ok.reshape((-1,) + (1,) * (a.ndim - 1)), a, 0)  # noqa: E731
    return {"MaskRois": _with_offsets(zero(out_box), counts),
            "RoiHasMaskInt32": _with_offsets(zero(local.astype(jnp.int32))[:, None], counts),
            "MaskInt32": _with_offsets(zero(mask_int), counts)}


lod_aware("generate_mask_labels")
