"""Detection losses of Fluid 1.x: yolov3_loss (with its gradient, the vjp of this forward).

Imported by ``detection_target.py`` so the op registers with the detection training family.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext


def _sigmoid_ce(x, label):
    """Sigmoid cross-entropy of logit ``x`` against a (soft) label, in its stable form."""
    return jnp.maximum(x, 0) - x * label + jnp.log1p(jnp.exp(-jnp.abs(x)))


def _center_iou(x1, y1, w1, h1, x2, y2, w2, h2):
    """IoU of centre-size boxes; no overlap (negative width or height) counts 0."""
    def overlap(c1, s1, c2, s2):
        return jnp.minimum(c1 + s1 / 2, c2 + s2 / 2) - jnp.maximum(c1 - s1 / 2, c2 - s2 / 2)

    w, h = overlap(x1, w1, x2, w2), overlap(y1, h1, y2, h2)
    inter = jnp.where((w < 0) | (h < 0), 0, w * h)
    return inter / (w1 * h1 + w2 * h2 - inter)


def _yolov3_shape(ctx: InferShapeContext) -> None:
    x, box, label = ctx.input("X"), ctx.input("GTBox"), ctx.input("GTLabel")
    anchors, mask = list(ctx.attr("anchors") or []), list(ctx.attr("anchor_mask") or [])
    classes = ctx.attr("class_num")
    ctx.check(anchors and len(anchors) % 2 == 0, f"anchors needs (width, height) pairs, got {anchors}")
    ctx.check(mask and all(0 <= m < len(anchors) // 2 for m in mask),
              f"anchor_mask {mask} must index the {len(anchors) // 2} anchors")
    ctx.check(classes > 0, f"class_num must be positive, got {classes}")
    ctx.check(x.ndim == 4, f"X must be 4-D [N, C, H, W], got {x.shape}")
    ctx.check(x.shape[1] < 0 or x.shape[1] == len(mask) * (5 + classes),
              f"X has {x.shape[1]} channels; len(anchor_mask) {len(mask)} × (5 + class_num {classes}) = "
              f"{len(mask) * (5 + classes)} expected")
    ctx.check(box.ndim == 3 and box.shape[2] in (4, -1), f"GTBox must be [N, B, 4], got {box.shape}")
    ctx.check(label.ndim == 2 and label.dtype == "int32", f"GTLabel must be int32 [N, B], got {label.shape} "
                                                          f"{label.dtype}")
    score = ctx.input("GTScore")
    if score is not None:
        ctx.check(score.ndim == 2, f"GTScore must be [N, B], got {score.shape}")
    ctx.set_output("Loss", (x.shape[0],), x.dtype, 0)
    ctx.set_output("ObjectnessMask", (x.shape[0], len(mask), x.shape[2], x.shape[3]), x.dtype, 0)
    ctx.set_output("GTMatchMask", (box.shape[0], box.shape[1]), "int32", 0)


@op("yolov3_loss", inputs="X GTBox GTLabel GTScore?", outputs="Loss ObjectnessMask GTMatchMask",
    attrs={"anchors": Attr("ints", []), "anchor_mask": Attr("ints", []), "class_num": 1, "ignore_thresh": 0.7,
           "downsample_ratio": 32, "use_label_smooth": True, "scale_x_y": 1.0},
    infer_shape=_yolov3_shape, no_grad_inputs=["GTBox", "GTLabel", "GTScore"],
    no_grad_outputs=["ObjectnessMask", "GTMatchMask"])
def yolov3_loss(ctx):
    """YOLOv3 loss per image. Each ground truth (GTBox [N, B, 4]: normalised centre x, y, w, h;
    boxes with w or h below 1e-6 are absent) goes to the anchor (of all ``anchors``) whose shape
    fits it best; when that anchor is in ``anchor_mask`` its cell (int(x·W), int(y·H)) gets location
    (sigmoid cross-entropy on x, y, L1 on log sizes, × (2 - w·h) × GTScore) and class losses
    (sigmoid cross-entropy; with ``use_label_smooth`` targets 1 - s / s, s = min(1/class_num,
    1/40) as Paddle 2.6), and objectness target GTScore; every other prediction is a negative unless
    its decoded box overlaps a ground truth by more than ``ignore_thresh``. ObjectnessMask holds
    those targets (-1 ignored), GTMatchMask each ground truth's mask index (-1 none). Cell offsets
    are measured in units of H for both axes, as Paddle's kernel does; a ground truth at x or y = 1
    is clamped into the last cell (Paddle reads past it). Two ground truths on the same anchor and
    cell both add their losses; the gradient is the exact one of this forward (Paddle's gradient
    kernel keeps only the last one's there)."""
    x, gt, gt_label = ctx.input("X"), ctx.input("GTBox"), ctx.input("GTLabel")
    anchors = np.asarray(ctx.attr("anchors"), np.float64).reshape(-1, 2)
    mask = [int(m) for m in ctx.attr("anchor_mask")]
    classes = int(ctx.attr("class_num"))
    n, _, h, w = x.shape
    m, b = len(mask), gt.shape[1]
    dtype = x.dtype
    head = x.reshape(n, m, 5 + classes, h, w)
    input_size = float(ctx.attr("downsample_ratio") * h)
    scale = float(ctx.attr("scale_x_y"))
    bias = -0.5 * (scale - 1.0)
    gt = gt.astype(dtype)
    score = ctx.input("GTScore")
    score = jnp.ones((n, b), dtype) if score is None else score.astype(dtype)
    valid = (gt[..., 2] >= 1e-6) & (gt[..., 3] >= 1e-6)                       # [N, B]
    if ctx.attr("use_label_smooth"):
        smooth = min(1.0 / classes, 1.0 / 40)
        pos, neg = 1.0 - smooth, smooth
    else:
        pos, neg = 1.0, 0.0

    # Predictions overlapping a ground truth by more than ignore_thresh are not negatives.
    raw = jax.lax.stop_gradient(head)
    gx = jnp.arange(w, dtype=dtype)[None, None, None, :]
    gy = jnp.arange(h, dtype=dtype)[None, None, :, None]
    aw = jnp.asarray(anchors[mask, 0] / input_size, dtype)[None, :, None, None]
    ah = jnp.asarray(anchors[mask, 1] / input_size, dtype)[None, :, None, None]
    px = (gx + jax.nn.sigmoid(raw[:, :, 0]) * scale + bias) / h
    py = (gy + jax.nn.sigmoid(raw[:, :, 1]) * scale + bias) / h
    pw, ph = jnp.exp(raw[:, :, 2]) * aw, jnp.exp(raw[:, :, 3]) * ah                # [N, M, H, W]
    g = [gt[:, :, k][:, None, None, None, :] for k in range(4)]                    # [N, 1, 1, 1, B]
    iou = _center_iou(px[..., None], py[..., None], pw[..., None], ph[..., None], *g)
    best = jnp.max(jnp.where(valid[:, None, None, None, :], iou, 0), axis=-1, initial=0.0)
    obj_mask = jnp.where(best > ctx.attr("ignore_thresh"), -1.0, 0.0).astype(dtype)

    # Each ground truth's anchor, by shape alone (the first best; none overlapping: anchor 0).
    an_w = jnp.asarray(anchors[:, 0] / input_size, dtype)
    an_h = jnp.asarray(anchors[:, 1] / input_size, dtype)
    zero = jnp.zeros((), dtype)
    shape_iou = _center_iou(zero, zero, an_w[None, None], an_h[None, None], zero, zero,
                            gt[..., 2:3], gt[..., 3:4])                           # [N, B, A]
    shape_iou = jnp.concatenate([jnp.zeros((n, b, 1), dtype), shape_iou], axis=-1)
    best_n = jnp.argmax(shape_iou, axis=-1) - 1                                    # -1: none > 0
    best_n = jnp.maximum(best_n, 0)
    lookup = np.full(anchors.shape[0], -1, np.int32)
    for i, a in reversed(list(enumerate(mask))):
        lookup[a] = i
    mask_idx = jnp.asarray(lookup)[best_n]
    match = jnp.where(valid, mask_idx, -1).astype(jnp.int32)
    positive = match >= 0
    gi = jnp.clip((gt[..., 0] * w).astype(jnp.int32), 0, w - 1)
    gj = jnp.clip((gt[..., 1] * h).astype(jnp.int32), 0, h - 1)
    an = jnp.clip(match, 0, m - 1)
    batch = jnp.broadcast_to(jnp.arange(n)[:, None], (n, b))
    cell = head[batch, an, :, gj, gi]                                               # [N, B, 5 + C]
    tx, ty = gt[..., 0] * h - gi.astype(dtype), gt[..., 1] * h - gj.astype(dtype)
    anchor_wh = jnp.asarray(anchors, dtype)[best_n]                                 # [N, B, 2]
    tw = jnp.log(gt[..., 2] * input_size / anchor_wh[..., 0])
    th = jnp.log(gt[..., 3] * input_size / anchor_wh[..., 1])
    weight = (2.0 - gt[..., 2] * gt[..., 3]) * score
    loc = (_sigmoid_ce(cell[..., 0], tx) + _sigmoid_ce(cell[..., 1], ty)
           + jnp.abs(cell[..., 2] - tw) + jnp.abs(cell[..., 3] - th)) * weight
    targets = jnp.where(jax.nn.one_hot(gt_label, classes, dtype=bool), pos, neg).astype(dtype)
    cls = jnp.sum(_sigmoid_ce(cell[..., 5:], targets), axis=-1) * score
    per_gt = jnp.where(positive, loc + cls, 0)
    # Objectness targets: the positives' scores (a later ground truth on the same cell wins).
    key = (an * h + gj) * w + gi
    later_same = (key[:, :, None] == key[:, None, :]) & positive[:, None, :] & (
        jnp.arange(b)[None, :, None] < jnp.arange(b)[None, None, :])
    write = positive & ~jnp.any(later_same, axis=2)
    flat = obj_mask.reshape(n, m * h * w)
    flat = flat.at[batch, jnp.where(write, key, m * h * w)].set(score, mode="drop")
    obj_mask = flat.reshape(n, m, h, w)
    conf = head[:, :, 4]
    obj_loss = jnp.where(obj_mask > 1e-5, _sigmoid_ce(conf, 1.0) * obj_mask,
                         jnp.where(obj_mask > -0.5, _sigmoid_ce(conf, 0.0), 0))
    loss = jnp.sum(per_gt, axis=1) + jnp.sum(obj_loss, axis=(1, 2, 3))
    return {"Loss": loss.astype(dtype), "ObjectnessMask": jax.lax.stop_gradient(obj_mask), "GTMatchMask": match}
