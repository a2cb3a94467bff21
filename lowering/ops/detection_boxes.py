"""Detection ops on boxes and anchors added for Fluid 1.x's fluid.layers: box_clip,
polygon_box_transform, box_decoder_and_assign, anchor_generator, density_prior_box and mean_iou.

The v1 NMS and proposal ops (multiclass_nms, multiclass_nms2, locality_aware_nms,
retinanet_detection_output, generate_proposals, collect_fpn_proposals) live in
``detection_nms``, imported at the end of this module so that they register with it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext
from ..lod_value import LoDValue
from ..lower import lod_aware


def _round_half_away(x):
    """C's ``round`` (halves away from zero), which Paddle's kernels use."""
    return jnp.sign(x) * jnp.floor(jnp.abs(x) + 0.5)


# -- box_clip ----------------------------------------------------------------------------------------
def _box_clip_shape(ctx: InferShapeContext) -> None:
    box, info = ctx.input("Input"), ctx.input("ImInfo")
    ctx.check(box.ndim >= 2 and box.shape[-1] in (4, -1), f"Input must be [..., 4] boxes, got {box.shape}")
    ctx.check(info.ndim == 2 and info.shape[1] in (3, -1), f"ImInfo must be [N, 3] (height, width, scale), "
                                                           f"got {info.shape}")
    ctx.set_output("Output", box.shape, box.dtype, box.lod_level)


@op("box_clip", inputs="Input ImInfo", outputs="Output", infer_shape=_box_clip_shape, grad=None)
def box_clip(ctx):
    """Clips boxes [..., 4] (x1, y1, x2, y2) into their image: x to [0, round(width / scale) - 1],
    y to [0, round(height / scale) - 1], with ImInfo [N, 3] = (height, width, scale). A LoD Input
    (Paddle's form) takes image i's row of ImInfo for its i-th sequence; a plain Input (which
    Paddle's kernel does not accept) takes it for its i-th row along dim 0."""
    box, info = ctx.input("Input"), ctx.input("ImInfo")
    data = box.data if box.__class__ is LoDValue else box
    info = info.astype(data.dtype)
    n = info.shape[0]
    if box.__class__ is LoDValue:
        image = jnp.clip(box.segment_ids(), 0, n - 1)
    else:
        image = jnp.arange(data.shape[0]) if n > 1 else jnp.zeros((data.shape[0],), jnp.int32)
        if n > 1 and data.shape[0] != n:
            raise ValueError(f"box_clip: a plain Input has {data.shape[0]} rows for {n} images; "
                             f"give one row per image or a LoD Input")
    im_h = _round_half_away(info[:, 0] / info[:, 2])[image]
    im_w = _round_half_away(info[:, 1] / info[:, 2])[image]
    hi = jnp.stack([im_w, im_h, im_w, im_h], axis=-1) - 1                  # [rows, 4]
    hi = hi.reshape((data.shape[0],) + (1,) * (data.ndim - 2) + (4,))
    out = jnp.maximum(jnp.minimum(data, hi), 0).astype(data.dtype)
    return {"Output": LoDValue(out, box.offsets) if box.__class__ is LoDValue else out}


lod_aware("box_clip")


# -- polygon_box_transform ---------------------------------------------------------------------------
def _polygon_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("Input")
    ctx.check(x.ndim == 4, f"Input must be 4-D [N, geometry channels, H, W], got {x.shape}")
    ctx.check(x.shape[1] < 0 or x.shape[1] % 2 == 0, f"Input needs an even number of geometry channels "
                                                     f"(x, y pairs), got {x.shape[1]}")
    ctx.set_output("Output", x.shape, x.dtype, 0)


@op("polygon_box_transform", inputs="Input", outputs="Output", infer_shape=_polygon_shape, grad=None)
def polygon_box_transform(ctx):
    """EAST-style geometry to absolute coordinates: for Input [N, 2K, H, W], an even channel
    becomes 4·w - value and an odd channel 4·h - value at pixel (h, w)."""
    x = ctx.input("Input")
    _, c, h, w = x.shape
    cols = 4 * jnp.arange(w, dtype=x.dtype)[None, None, None, :]
    rows = 4 * jnp.arange(h, dtype=x.dtype)[None, None, :, None]
    even = (jnp.arange(c) % 2 == 0)[None, :, None, None]
    return {"Output": jnp.where(even, cols - x, rows - x)}


# -- box_decoder_and_assign --------------------------------------------------------------------------
def _decoder_assign_shape(ctx: InferShapeContext) -> None:
    prior, target, score = ctx.input("PriorBox"), ctx.input("TargetBox"), ctx.input("BoxScore")
    ctx.check(prior.ndim == 2 and prior.shape[1] in (4, -1), f"PriorBox must be [N, 4], got {prior.shape}")
    ctx.check(score.ndim == 2, f"BoxScore must be [N, classes], got {score.shape}")
    ctx.check(target.ndim == 2 and (target.shape[1] < 0 or score.shape[1] < 0 or target.shape[1] == 4 * score.shape[1]),
              f"TargetBox must be [N, 4·classes] for BoxScore {score.shape}, got {target.shape}")
    var = ctx.input("PriorBoxVar")
    ctx.check(var is None or (var.ndim == 1 and var.shape[0] in (4, -1)),
              f"PriorBoxVar must be 1-D [4], got {None if var is None else var.shape}")
    ctx.set_output("DecodeBox", target.shape, prior.dtype, target.lod_level)
    ctx.set_output("OutputAssignBox", prior.shape, prior.dtype, prior.lod_level)


@op("box_decoder_and_assign", inputs="PriorBox PriorBoxVar? TargetBox BoxScore", outputs="DecodeBox OutputAssignBox",
    attrs={"box_clip": 4.135166556742356}, infer_shape=_decoder_assign_shape, grad=None)
def box_decoder_and_assign(ctx):
    """Decodes each class's offsets TargetBox [N, 4·C] against its pixel prior box [N, 4] (variance
    PriorBoxVar [4]; log-size offsets capped at ``box_clip``) into DecodeBox [N, 4·C]; OutputAssignBox
    [N, 4] is the decoded box of the best-scoring non-background class (class 0 is background),
    or the prior itself when no such score exceeds -1."""
    prior, target, score = ctx.input("PriorBox"), ctx.input("TargetBox"), ctx.input("BoxScore")
    dtype = prior.dtype
    var = ctx.input("PriorBoxVar")
    var = jnp.ones((4,), dtype) if var is None else var.astype(dtype)
    n, c = score.shape
    t = target.astype(dtype).reshape(n, c, 4)
    pw = prior[:, 2] - prior[:, 0] + 1
    ph = prior[:, 3] - prior[:, 1] + 1
    pcx, pcy = prior[:, 0] + pw / 2, prior[:, 1] + ph / 2
    clip = jnp.asarray(ctx.attr("box_clip"), dtype)
    dw = jnp.minimum(var[2] * t[..., 2], clip)
    dh = jnp.minimum(var[3] * t[..., 3], clip)
    cx = var[0] * t[..., 0] * pw[:, None] + pcx[:, None]
    cy = var[1] * t[..., 1] * ph[:, None] + pcy[:, None]
    w, h = jnp.exp(dw) * pw[:, None], jnp.exp(dh) * ph[:, None]
    decoded = jnp.stack([cx - w / 2, cy - h / 2, cx + w / 2 - 1, cy + h / 2 - 1], axis=-1)     # [N, C, 4]
    foreground = score[:, 1:]
    if c > 1:
        best = jnp.argmax(foreground, axis=1) + 1
        found = jnp.max(foreground, axis=1) > -1
        chosen = jnp.take_along_axis(decoded, best[:, None, None], axis=1)[:, 0]
        assign = jnp.where(found[:, None], chosen, prior)
    else:
        assign = prior
    return {"DecodeBox": decoded.reshape(n, c * 4), "OutputAssignBox": assign.astype(dtype)}


# -- anchor_generator / density_prior_box (host-computed from the shapes, like prior_box) --------------
def _anchor_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("Input")
    ctx.check(x.ndim == 4, f"Input must be 4-D [N, C, H, W], got {x.shape}")
    sizes, ratios = list(ctx.attr("anchor_sizes") or []), list(ctx.attr("aspect_ratios") or [])
    ctx.check(sizes and all(s > 0 for s in sizes), f"anchor_sizes must be positive, got {sizes}")
    ctx.check(ratios and all(r > 0 for r in ratios), f"aspect_ratios must be positive, got {ratios}")
    ctx.check(len(ctx.attr("stride") or []) == 2, f"stride needs (width, height), got {ctx.attr('stride')}")
    ctx.check(len(ctx.attr("variances") or []) == 4, f"variances needs 4 values, got {ctx.attr('variances')}")
    shape = (x.shape[2], x.shape[3], len(sizes) * len(ratios), 4)
    ctx.set_output("Anchors", shape, x.dtype, 0)
    ctx.set_output("Variances", shape, x.dtype, 0)


@op("anchor_generator", inputs="Input", outputs="Anchors Variances",
    attrs={"anchor_sizes": Attr("floats", [64.0, 128.0, 256.0, 512.0]), "aspect_ratios": Attr("floats", [0.5, 1.0, 2.0]),
           "variances": Attr("floats", [0.1, 0.1, 0.2, 0.2]), "stride": Attr("floats", [16.0, 16.0]), "offset": 0.5},
    infer_shape=_anchor_shape, grad=None)
def anchor_generator(ctx):
    """Faster R-CNN anchors [H, W, ratios·sizes, 4] in input pixels for each cell of Input's map
    (ratio-major): centred at cell·stride + offset·(stride - 1), a base of round(sqrt(stride_w·
    stride_h / ratio)) × round(that · ratio) scaled by size / stride; Variances repeat
    ``variances``. Only Input's shape is read: computed on the host."""
    x = ctx.input("Input")
    fh, fw = x.shape[2], x.shape[3]
    sw, sh = (float(s) for s in ctx.attr("stride"))
    offset = float(ctx.attr("offset"))
    sizes = []
    for ratio in ctx.attr("aspect_ratios"):
        base_w = np.floor(np.sqrt(sw * sh / float(ratio)) + 0.5)          # C's round: halves up
        base_h = np.floor(base_w * float(ratio) + 0.5)
        for size in ctx.attr("anchor_sizes"):
            sizes.append((float(size) / sw * base_w, float(size) / sh * base_h))
    wh = np.asarray(sizes, np.float64)                                    # [A, 2]
    cx = (np.arange(fw) * sw + offset * (sw - 1))[None, :, None]
    cy = (np.arange(fh) * sh + offset * (sh - 1))[:, None, None]
    shape = (fh, fw, wh.shape[0])
    half_w, half_h = 0.5 * (wh[:, 0] - 1), 0.5 * (wh[:, 1] - 1)
    anchors = np.stack([np.broadcast_to(cx - half_w, shape), np.broadcast_to(cy - half_h, shape),
                        np.broadcast_to(cx + half_w, shape), np.broadcast_to(cy + half_h, shape)], axis=-1)
    variances = np.broadcast_to(np.asarray(ctx.attr("variances"), np.float64), anchors.shape)
    return {"Anchors": jnp.asarray(anchors, x.dtype), "Variances": jnp.asarray(variances, x.dtype)}


def _density_count(ctx) -> int:
    ratios = len(ctx.attr("fixed_ratios") or [])
    return sum(ratios * int(d) ** 2 for d in ctx.attr("densities") or [])


def _density_shape(ctx: InferShapeContext) -> None:
    x, image = ctx.input("Input"), ctx.input("Image")
    ctx.check(x.ndim == 4 and image.ndim == 4, f"Input and Image must be 4-D, got {x.shape} and {image.shape}")
    sizes, dens = list(ctx.attr("fixed_sizes") or []), list(ctx.attr("densities") or [])
    ctx.check(len(sizes) == len(dens) and sizes, f"fixed_sizes {sizes} and densities {dens} must pair up")
    ctx.check(all(d > 0 for d in dens) and all(s > 0 for s in sizes), f"densities and fixed_sizes must be positive")
    ctx.check(len(ctx.attr("fixed_ratios") or []) > 0, "fixed_ratios must not be empty")
    ctx.check(len(ctx.attr("variances") or []) == 4, f"variances needs 4 values, got {ctx.attr('variances')}")
    p = _density_count(ctx)
    if ctx.attr("flatten_to_2d"):
        rows = x.shape[2] * x.shape[3] * p if x.shape[2] >= 0 and x.shape[3] >= 0 else -1
        shape = (rows, 4)
    else:
        shape = (x.shape[2], x.shape[3], p, 4)
    ctx.set_output("Boxes", shape, x.dtype, 0)
    ctx.set_output("Variances", shape, x.dtype, 0)


@op("density_prior_box", inputs="Input Image", outputs="Boxes Variances",
    attrs={"variances": Attr("floats", []), "clip": False, "flatten_to_2d": False, "step_w": 0.0, "step_h": 0.0,
           "offset": 0.5, "fixed_sizes": Attr("floats", []), "fixed_ratios": Attr("floats", []),
           "densities": Attr("ints", [])},
    infer_shape=_density_shape, grad=None)
def density_prior_box(ctx):
    """Density prior boxes (FaceBoxes): per cell of Input's map, for each fixed size s (density d)
    and ratio r, a d × d grid of boxes s·sqrt(r) × s/sqrt(r) spread over the cell's step, in
    Image's normalised coordinates cut to [0, 1]; [H, W, P, 4] (or [H·W·P, 4] with
    ``flatten_to_2d``) and the repeated ``variances``. Only the shapes are read: host-computed."""
    x, image = ctx.input("Input"), ctx.input("Image")
    fh, fw = x.shape[2], x.shape[3]
    ih, iw = image.shape[2], image.shape[3]
    step_w, step_h = float(ctx.attr("step_w")), float(ctx.attr("step_h"))
    if step_w == 0 or step_h == 0:
        step_w, step_h = iw / fw, ih / fh
    step_avg = int((step_w + step_h) * 0.5)
    offset = float(ctx.attr("offset"))
    deltas = []                                          # (dx, dy, half w, half h) per prior, relative to the cell centre
    for size, density in zip(ctx.attr("fixed_sizes"), ctx.attr("densities")):
        density = int(density)
        shift = step_avg // density
        for ratio in ctx.attr("fixed_ratios"):
            bw, bh = float(size) * np.sqrt(float(ratio)), float(size) / np.sqrt(float(ratio))
            start = -step_avg / 2.0 + shift / 2.0
            for di in range(density):
                for dj in range(density):
                    deltas.append((start + dj * shift, start + di * shift, bw / 2.0, bh / 2.0))
    d = np.asarray(deltas, np.float64)                                   # [P, 4]
    cx = ((np.arange(fw) + offset) * step_w)[None, :, None] + d[:, 0]
    cy = ((np.arange(fh) + offset) * step_h)[:, None, None] + d[:, 1]
    shape = (fh, fw, d.shape[0])
    boxes = np.stack([np.maximum(np.broadcast_to((cx - d[:, 2]) / iw, shape), 0),
                      np.maximum(np.broadcast_to((cy - d[:, 3]) / ih, shape), 0),
                      np.minimum(np.broadcast_to((cx + d[:, 2]) / iw, shape), 1),
                      np.minimum(np.broadcast_to((cy + d[:, 3]) / ih, shape), 1)], axis=-1)
    if ctx.attr("clip"):
        boxes = np.clip(boxes, 0, 1)
    variances = np.broadcast_to(np.asarray(ctx.attr("variances"), np.float64), boxes.shape)
    if ctx.attr("flatten_to_2d"):
        boxes, variances = boxes.reshape(-1, 4), variances.reshape(-1, 4)
    return {"Boxes": jnp.asarray(boxes, x.dtype), "Variances": jnp.asarray(variances, x.dtype)}


# -- mean_iou ----------------------------------------------------------------------------------------
def _mean_iou_shape(ctx: InferShapeContext) -> None:
    pred, label = ctx.input("Predictions"), ctx.input("Labels")
    k = int(ctx.attr("num_classes"))
    ctx.check(k > 0, f"num_classes must be positive, got {k}")
    ctx.check(str(pred.dtype) in ("int32", "int64") and str(label.dtype) in ("int32", "int64"),
              f"Predictions and Labels must be int32 or int64, got {pred.dtype} and {label.dtype}")
    ctx.check(pred.shape == label.shape or -1 in pred.shape or -1 in label.shape,
              f"Predictions {pred.shape} and Labels {label.shape} must have one shape")
    ctx.set_output("OutMeanIou", (1,), "float32", 0)
    ctx.set_output("OutWrong", (k,), "int32", 0)
    ctx.set_output("OutCorrect", (k,), "int32", 0)


@op("mean_iou", inputs="Predictions Labels InWrongs*? InCorrects*? InMeanIou*?",
    outputs="OutMeanIou OutWrong OutCorrect", attrs={"num_classes": 0}, infer_shape=_mean_iou_shape, grad=None)
def mean_iou(ctx):
    """Mean IoU of a segmentation: per class, correct = pixels where prediction and label agree on
    it, wrong = pixels where either names it and they disagree (InWrongs / InCorrects are added);
    the result is the mean of correct / (correct + wrong) over the classes with a non-zero
    denominator, plus the InMeanIou values. Classes outside [0, num_classes) count nowhere."""
    pred = ctx.input("Predictions").reshape(-1)
    label = ctx.input("Labels").reshape(-1)
    k = int(ctx.attr("num_classes"))
    classes = jnp.arange(k)
    same = pred == label
    hit_p = pred[:, None] == classes[None]                               # [P, K]
    hit_l = label[:, None] == classes[None]
    correct = jnp.sum(hit_p & same[:, None], axis=0).astype(jnp.int32)
    wrong = (jnp.sum(hit_l & ~same[:, None], axis=0) + jnp.sum(hit_p & ~same[:, None], axis=0)).astype(jnp.int32)
    for w in ctx.inputs("InWrongs"):
        wrong = wrong + w.astype(jnp.int32)
    for c in ctx.inputs("InCorrects"):
        correct = correct + c.astype(jnp.int32)
    denom = wrong + correct
    valid = jnp.sum(denom > 0).astype(jnp.int32)
    iou_sum = jnp.sum(correct.astype(jnp.float32) / jnp.maximum(denom, 1).astype(jnp.float32))
    mean = (iou_sum / valid.astype(jnp.float32)).reshape(1)
    for m in ctx.inputs("InMeanIou"):
        mean = mean + m.astype(jnp.float32).reshape(1)
    return {"OutMeanIou": mean, "OutWrong": wrong, "OutCorrect": correct}


from . import detection_nms  # noqa: E402,F401  (registers the v1 NMS and proposal ops)
