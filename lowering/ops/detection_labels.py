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
