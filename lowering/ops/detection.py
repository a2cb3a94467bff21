"""Detection ops: roi_align and roi_pool, box_coder, prior_box, yolo_box, the NMS ops
(multiclass_nms3, matrix_nms), generate_proposals_v2 and distribute_fpn_proposals.

The NMS and proposal ops keep a number of boxes that depends on the data: their outputs are padded
and carry the count (``search.ragged``; docs/ops_data_dependent.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext
from ._errors import _fail
from .search import ragged


# -- roi_align ---------------------------------------------------------------------------------------
def _roi_align_shape(ctx: InferShapeContext) -> None:
    x, rois = ctx.input("X"), ctx.input("ROIs")
    ctx.check(x.ndim == 4, f"X must be 4-D [N, C, H, W], got {x.shape}")
    ctx.check(rois.ndim == 2 and rois.shape[1] in (4, -1), f"ROIs must be [R, 4], got {rois.shape}")
    ph, pw = ctx.attr("pooled_height"), ctx.attr("pooled_width")
    ctx.check(ph > 0 and pw > 0, f"pooled_height and pooled_width must be positive, got {ph} × {pw}")
    num = ctx.input("RoisNum")
    if num is not None:
        ctx.check(num.ndim == 1 and num.dtype == "int32", f"RoisNum must be 1-D int32, got {num.shape} {num.dtype}")
    ctx.set_output("Out", (rois.shape[0], x.shape[1], ph, pw), x.dtype, 0)


def _roi_batch_index(ctx, n_rois: int, batch: int):
    """The image each ROI belongs to: RoisNum [N] holds the number of ROIs of each image."""
    num = ctx.input("RoisNum")
    if num is None:
        if batch != 1:
            _fail(ctx, "ROIs of a batch of several images need RoisNum (the ROI count of each image)")
        return jnp.zeros((n_rois,), jnp.int32)
    ends = jnp.cumsum(num.astype(jnp.int32))
    return jnp.searchsorted(ends, jnp.arange(n_rois, dtype=jnp.int32), side="right").astype(jnp.int32)


def _roi_axis_weights(start, bin_size, grid, max_grid: int, pooled: int, size: int, dtype):
    """[R, pooled, size]: the summed bilinear weights of each bin's sample points along one axis.

    Sample iy of bin p sits at start + p·bin + (iy + 0.5)·bin / grid (iy < grid, per ROI); a point
    outside [-1, size] counts 0; others clamp to [0, size - 1] and split between two neighbours."""
    p = jnp.arange(pooled, dtype=dtype)[None, :, None]
    i = jnp.arange(max_grid, dtype=dtype)[None, None, :]
    g = grid.astype(dtype)[:, None, None]
    pos = start[:, None, None] + p * bin_size[:, None, None] + (i + 0.5) * bin_size[:, None, None] / g
    valid = (i < g) & (pos >= -1.0) & (pos <= size)
    pos = jnp.maximum(pos, 0)
    low = jnp.floor(pos).astype(jnp.int32)
    at_end = low >= size - 1
    low = jnp.where(at_end, size - 1, low)
    high = jnp.where(at_end, size - 1, low + 1)
    pos = jnp.where(at_end, low.astype(dtype), pos)
    frac = pos - low.astype(dtype)
    w_low = jnp.where(valid, 1 - frac, 0)
    w_high = jnp.where(valid, frac, 0)
    weights = (jax.nn.one_hot(low, size, dtype=dtype) * w_low[..., None]
               + jax.nn.one_hot(high, size, dtype=dtype) * w_high[..., None])
    return weights.sum(axis=2)


@op("roi_align", inputs="X ROIs RoisNum?", outputs="Out",
    attrs={"pooled_height": 1, "pooled_width": 1, "spatial_scale": 1.0, "sampling_ratio": -1, "aligned": False},
    infer_shape=_roi_align_shape, no_grad_inputs=["ROIs", "RoisNum"])
def roi_align(ctx):
    """RoIAlign: each ROI [x1, y1, x2, y2] (image coordinates × ``spatial_scale``; shifted by half a
    pixel when ``aligned``) is cut into pooled_height × pooled_width bins, each the mean of a grid
    of bilinear samples (``sampling_ratio`` per side, or ceil(bin size) when it is <= 0).

    With ``sampling_ratio`` <= 0 the grid depends on the ROI's size, a run-time value: the samples
    are taken on a static grid as large as an ROI covering the whole map needs and masked per ROI,
    which is exact for ROIs no larger than the feature map (+1), Paddle's results otherwise differ.
    The gradient (X only, as Paddle) is the exact vjp of this forward; Paddle's CPU grad kernel
    also widens ``aligned`` ROIs smaller than one pixel to one, which its forward does not.
    """
    x, rois = ctx.input("X"), ctx.input("ROIs")
    n, c, h, w = x.shape
    ph, pw = int(ctx.attr("pooled_height")), int(ctx.attr("pooled_width"))
    scale = jnp.asarray(ctx.attr("spatial_scale"), x.dtype)
    offset = jnp.asarray(0.5 if ctx.attr("aligned") else 0.0, x.dtype)
    rois = rois.astype(x.dtype)
    x1, y1 = rois[:, 0] * scale - offset, rois[:, 1] * scale - offset
    x2, y2 = rois[:, 2] * scale - offset, rois[:, 3] * scale - offset
    rw, rh = x2 - x1, y2 - y1
    if not ctx.attr("aligned"):
        rw, rh = jnp.maximum(rw, 1), jnp.maximum(rh, 1)
    bin_h, bin_w = rh / ph, rw / pw
    ratio = int(ctx.attr("sampling_ratio"))
    if ratio > 0:
        grid_h = jnp.full(rois.shape[:1], ratio, jnp.int32)
        grid_w = grid_h
        max_h = max_w = ratio
    else:
        grid_h, grid_w = jnp.ceil(rh / ph).astype(jnp.int32), jnp.ceil(rw / pw).astype(jnp.int32)
        max_h, max_w = max(1, -(-(h + 1) // ph)), max(1, -(-(w + 1) // pw))
        grid_h, grid_w = jnp.minimum(grid_h, max_h), jnp.minimum(grid_w, max_w)
    wy = _roi_axis_weights(y1, bin_h, grid_h, max_h, ph, h, x.dtype)       # [R, ph, H]
    wx = _roi_axis_weights(x1, bin_w, grid_w, max_w, pw, w, x.dtype)       # [R, pw, W]
    count = jnp.maximum(grid_h * grid_w, 1).astype(x.dtype)
    images = x[_roi_batch_index(ctx, rois.shape[0], n)]                      # [R, C, H, W]
    out = jnp.einsum("rph,rchw,rqw->rcpq", wy, images, wx)
    return {"Out": out / count[:, None, None, None]}


# -- roi_pool ----------------------------------------------------------------------------------------
def _roi_pool_shape(ctx: InferShapeContext) -> None:
    x, rois = ctx.input("X"), ctx.input("ROIs")
    ctx.check(x.ndim == 4, f"X must be 4-D [N, C, H, W], got {x.shape}")
    ctx.check(rois.ndim == 2 and rois.shape[1] in (4, -1), f"ROIs must be [R, 4], got {rois.shape}")
    ph, pw = ctx.attr("pooled_height"), ctx.attr("pooled_width")
    ctx.check(ph > 0 and pw > 0, f"pooled_height and pooled_width must be positive, got {ph} × {pw}")
    ctx.set_output("Out", (rois.shape[0], x.shape[1], ph, pw), x.dtype, 0)
    ctx.set_output("Argmax", (rois.shape[0], x.shape[1], ph, pw), "int64", 0)


def _roi_bins(start, length, pooled: int, size: int):
    """[R, pooled] start/end (clipped to [0, size]) of each bin along one axis, Paddle's rounding."""
    bin_size = length.astype(jnp.float32) / pooled
    p = jnp.arange(pooled, dtype=jnp.float32)
    lo = jnp.floor(p[None] * bin_size[:, None]).astype(jnp.int32) + start[:, None]
    hi = jnp.ceil((p[None] + 1) * bin_size[:, None]).astype(jnp.int32) + start[:, None]
    return jnp.clip(lo, 0, size), jnp.clip(hi, 0, size)


@op("roi_pool", inputs="X ROIs RoisNum?", outputs="Out Argmax",
    attrs={"pooled_height": 1, "pooled_width": 1, "spatial_scale": 1.0}, infer_shape=_roi_pool_shape,
    no_grad_inputs=["ROIs", "RoisNum"], no_grad_outputs=["Argmax"])
def roi_pool(ctx):
    """RoIPool: each ROI (corners × ``spatial_scale``, rounded) is cut into pooled_height ×
    pooled_width bins, each the max of its pixels (0 for an empty bin); Argmax holds the
    position h·W + w of that max in the image (the first in row-major order; -1 when empty), and
    the gradient goes to it alone."""
    x, rois = ctx.input("X"), ctx.input("ROIs")
    n, c, h, w = x.shape
    ph, pw = int(ctx.attr("pooled_height")), int(ctx.attr("pooled_width"))
    scaled = lax.round(rois * jnp.asarray(ctx.attr("spatial_scale"), rois.dtype),
                       lax.RoundingMethod.AWAY_FROM_ZERO).astype(jnp.int32)
    x1, y1, x2, y2 = scaled[:, 0], scaled[:, 1], scaled[:, 2], scaled[:, 3]
    hs, he = _roi_bins(y1, jnp.maximum(y2 - y1 + 1, 1), ph, h)           # [R, ph]
    ws, we = _roi_bins(x1, jnp.maximum(x2 - x1 + 1, 1), pw, w)           # [R, pw]
    images = x[_roi_batch_index(ctx, rois.shape[0], n)]                 # [R, C, H, W]
    neg = jnp.asarray(-jnp.inf, x.dtype)
    cols = jnp.arange(w)
    rows = jnp.arange(h)
    # Per width bin: each row's best column (first max) and its value.
    row_best, row_arg = [], []
    for j in range(pw):
        inside = (cols[None] >= ws[:, j:j + 1]) & (cols[None] < we[:, j:j + 1])            # [R, W]
        masked = jnp.where(inside[:, None, None, :], images, neg)                          # [R, C, H, W]
        arg = jnp.argmax(masked, axis=3)                                                    # [R, C, H]
        row_arg.append(arg)
        row_best.append(jnp.take_along_axis(masked, arg[..., None], axis=3)[..., 0])
    row_best, row_arg = jnp.stack(row_best, -1), jnp.stack(row_arg, -1)                      # [R, C, H, pw]
    outs, args = [], []
    for i in range(ph):
        inside = (rows[None] >= hs[:, i:i + 1]) & (rows[None] < he[:, i:i + 1])             # [R, H]
        masked = jnp.where(inside[:, None, :, None], row_best, neg)                         # [R, C, H, pw]
        arg_h = jnp.argmax(masked, axis=2)                                                  # [R, C, pw]
        outs.append(jnp.take_along_axis(masked, arg_h[:, :, None], axis=2)[:, :, 0])
        arg_w = jnp.take_along_axis(row_arg, arg_h[:, :, None], axis=2)[:, :, 0]
        args.append(arg_h * w + arg_w)
    out, arg = jnp.stack(outs, 2), jnp.stack(args, 2)                                       # [R, C, ph, pw]
    empty = ((he <= hs)[:, :, None] | (we <= ws)[:, None, :])[:, None]                      # [R, 1, ph, pw]
    return {"Out": jnp.where(empty, jnp.zeros((), x.dtype), out),
            "Argmax": jnp.where(empty, -1, arg).astype(jnp.int64)}


# -- box_coder / prior_box / yolo_box ---------------------------------------------------------------
def _box_coder_shape(ctx: InferShapeContext) -> None:
    prior, target = ctx.input("PriorBox"), ctx.input("TargetBox")
    code = ctx.attr("code_type")
    ctx.check(code in ("encode_center_size", "decode_center_size"),
              f"code_type must be 'encode_center_size' or 'decode_center_size', got {code!r}")
    ctx.check(prior.ndim == 2 and prior.shape[1] in (4, -1), f"PriorBox must be [M, 4], got {prior.shape}")
    variance = list(ctx.attr("variance") or [])
    ctx.check(not variance or len(variance) == 4, f"variance needs 4 values, got {variance}")
    if code == "encode_center_size":
        ctx.check(target.ndim == 2 and target.shape[1] in (4, -1), f"TargetBox must be [N, 4], got {target.shape}")
        # one row per target box: the rows keep TargetBox's sequences (Paddle's ShareLoD), as
        # Fluid's ssd_loss needs for the target_assign that follows
        ctx.set_output("OutputBox", (target.shape[0], prior.shape[0], 4), target.dtype, target.lod_level)
    else:
        ctx.check(target.ndim == 3 and target.shape[2] in (4, -1), f"TargetBox must be [N, M, 4], got {target.shape}")
        ctx.set_output("OutputBox", target.shape, target.dtype, target.lod_level)


def _center_size(boxes, plus_one):
    w = boxes[..., 2] - boxes[..., 0] + plus_one
    h = boxes[..., 3] - boxes[..., 1] + plus_one
    return boxes[..., 0] + w / 2, boxes[..., 1] + h / 2, w, h


@op("box_coder", inputs="PriorBox PriorBoxVar? TargetBox", outputs="OutputBox",
    attrs={"code_type": "encode_center_size", "box_normalized": True, "axis": 0, "variance": Attr("floats", [])},
    infer_shape=_box_coder_shape, grad=None)
def box_coder(ctx):
    """Encodes TargetBox [N, 4] against each prior [M, 4] as center/size offsets ([N, M, 4]), or
    decodes offsets [N, M, 4] back to corner boxes. Variances (PriorBoxVar [M, 4] or the
    ``variance`` attribute) divide the codes / scale the offsets; ``box_normalized`` False adds 1
    to widths and heights (pixel boxes); ``axis`` 1 pairs priors with the first dim when decoding."""
    prior, target = ctx.input("PriorBox"), ctx.input("TargetBox")
    var = ctx.input("PriorBoxVar")
    dtype = target.dtype
    plus_one = jnp.asarray(0 if ctx.attr("box_normalized") else 1, dtype)
    prior = prior.astype(dtype)
    pcx, pcy, pw, ph = _center_size(prior, plus_one)                  # [M]
    variance = [float(v) for v in (ctx.attr("variance") or [])]
    if var is not None:
        var = var.astype(dtype)                                         # [M, 4]
    elif variance:
        var = jnp.broadcast_to(jnp.asarray(variance, dtype), prior.shape)
    if ctx.attr("code_type") == "encode_center_size":
        # Paddle centres a target box at the midpoint of its corners (a prior at x1 + w / 2,
        # which differs by 1/2 for pixel boxes).
        _, _, tw, th = _center_size(target, plus_one)                  # [N]
        tcx, tcy = (target[:, 0] + target[:, 2]) / 2, (target[:, 1] + target[:, 3]) / 2
        codes = jnp.stack([(tcx[:, None] - pcx[None]) / pw[None], (tcy[:, None] - pcy[None]) / ph[None],
                           jnp.log(jnp.abs(tw[:, None] / pw[None])), jnp.log(jnp.abs(th[:, None] / ph[None]))],
                          axis=-1)                                      # [N, M, 4]
        if var is not None:
            codes = codes / var[None]
        return {"OutputBox": codes}
    # Decode: priors run along axis 1 of TargetBox (axis 0) or along axis 0 (axis 1).
    expand = (lambda v: v[None]) if int(ctx.attr("axis")) == 0 else (lambda v: v[:, None])
    pcx, pcy, pw, ph = (expand(v) for v in (pcx, pcy, pw, ph))
    if var is not None:
        v = [expand(var[:, k]) for k in range(4)]
    else:
        v = [1, 1, 1, 1]
    cx = v[0] * target[..., 0] * pw + pcx
    cy = v[1] * target[..., 1] * ph + pcy
    w = jnp.exp(v[2] * target[..., 2]) * pw
    h = jnp.exp(v[3] * target[..., 3]) * ph
    out = jnp.stack([cx - w / 2, cy - h / 2, cx + w / 2 - plus_one, cy + h / 2 - plus_one], axis=-1)
    return {"OutputBox": out}


def _expand_aspect_ratios(ratios, flip: bool) -> list[float]:
    out = [1.0]
    for r in ratios:
        if any(abs(r - e) < 1e-6 for e in out):
            continue
        out.append(float(r))
        if flip:
            out.append(1.0 / float(r))
    return out


def _prior_count(ctx) -> int:
    ratios = _expand_aspect_ratios(ctx.attr("aspect_ratios") or [], bool(ctx.attr("flip")))
    return len(ratios) * len(ctx.attr("min_sizes") or []) + len(ctx.attr("max_sizes") or [])


def _prior_box_shape(ctx: InferShapeContext) -> None:
    x, image = ctx.input("Input"), ctx.input("Image")
    ctx.check(x.ndim == 4 and image.ndim == 4, f"Input and Image must be 4-D, got {x.shape} and {image.shape}")
    mins, maxs = list(ctx.attr("min_sizes") or []), list(ctx.attr("max_sizes") or [])
    ctx.check(len(mins) > 0 and all(m > 0 for m in mins), f"min_sizes must be positive, got {mins}")
    ctx.check(not maxs or len(maxs) == len(mins), f"max_sizes {maxs} must match min_sizes {mins}")
    ctx.check(all(a > b for a, b in zip(maxs, mins)), f"each max_size must exceed its min_size: {maxs} vs {mins}")
    ctx.check(len(ctx.attr("variances") or []) == 4, f"variances needs 4 values, got {ctx.attr('variances')}")
    shape = (x.shape[2], x.shape[3], _prior_count(ctx), 4)
    ctx.set_output("Boxes", shape, x.dtype, 0)
    ctx.set_output("Variances", shape, x.dtype, 0)


@op("prior_box", inputs="Input Image", outputs="Boxes Variances",
    attrs={"min_sizes": Attr("floats", []), "max_sizes": Attr("floats", []), "aspect_ratios": Attr("floats", []),
           "variances": Attr("floats", []), "flip": False, "clip": False, "step_w": 0.0, "step_h": 0.0,
           "offset": 0.5, "min_max_aspect_ratios_order": False},
    infer_shape=_prior_box_shape, grad=None)
def prior_box(ctx):
    """SSD prior (anchor) boxes for each cell of the feature map Input over the Image, [H, W,
    num_priors, 4] in normalised corners, and their ``variances``. Only the two shapes are read:
    the boxes are computed on the host in float32, as Paddle's kernel does."""
    x, image = ctx.input("Input"), ctx.input("Image")
    f32 = np.float32
    fh, fw = x.shape[2], x.shape[3]
    ih, iw = image.shape[2], image.shape[3]
    step_w, step_h = f32(ctx.attr("step_w")), f32(ctx.attr("step_h"))
    if step_w == 0 or step_h == 0:
        step_w, step_h = f32(iw) / f32(fw), f32(ih) / f32(fh)
    offset = f32(ctx.attr("offset"))
    ratios = _expand_aspect_ratios(ctx.attr("aspect_ratios") or [], bool(ctx.attr("flip")))
    mins, maxs = [float(m) for m in ctx.attr("min_sizes")], [float(m) for m in ctx.attr("max_sizes") or []]
    sizes = []                                   # (half width, half height) of each prior, in order
    for s, m in enumerate(mins):
        ratio_boxes = [(f32(m * np.sqrt(r) / 2.0), f32(m / np.sqrt(r) / 2.0)) for r in ratios]
        big = [(f32(np.sqrt(m * maxs[s]) / 2.0),) * 2] if maxs else []
        if ctx.attr("min_max_aspect_ratios_order"):
            square = (f32(m / 2.0), f32(m / 2.0))
            sizes += [square] + big + [b for r, b in zip(ratios, ratio_boxes) if abs(r - 1.0) >= 1e-6]
        else:
            sizes += ratio_boxes + big
    half = np.asarray(sizes, f32)                                   # [P, 2]
    cx = (np.arange(fw, dtype=f32) + offset) * step_w               # [W]
    cy = (np.arange(fh, dtype=f32) + offset) * step_h               # [H]
    shape = (fh, fw, half.shape[0])
    cx = np.broadcast_to(cx[None, :, None], shape)
    cy = np.broadcast_to(cy[:, None, None], shape)
    boxes = np.stack([(cx - half[:, 0]) / f32(iw), (cy - half[:, 1]) / f32(ih),
                      (cx + half[:, 0]) / f32(iw), (cy + half[:, 1]) / f32(ih)], axis=-1).astype(f32)
    if ctx.attr("clip"):
        boxes = np.clip(boxes, 0, 1)
    variances = np.broadcast_to(np.asarray(ctx.attr("variances"), f32), boxes.shape)
    dtype = x.dtype
    return {"Boxes": jnp.asarray(boxes, dtype), "Variances": jnp.asarray(variances, dtype)}


def _yolo_box_shape(ctx: InferShapeContext) -> None:
    x, size = ctx.input("X"), ctx.input("ImgSize")
    anchors = list(ctx.attr("anchors") or [])
    ctx.check(anchors and len(anchors) % 2 == 0, f"anchors needs (width, height) pairs, got {anchors}")
    an = len(anchors) // 2
    classes = ctx.attr("class_num")
    ctx.check(classes > 0, f"class_num must be positive, got {classes}")
    ctx.check(x.ndim == 4, f"X must be 4-D [N, C, H, W], got {x.shape}")
    per = 6 if ctx.attr("iou_aware") else 5
    ctx.check(x.shape[1] < 0 or x.shape[1] == an * (per + classes),
              f"X has {x.shape[1]} channels; {an} anchors × ({per} + class_num {classes}) = "
              f"{an * (per + classes)} expected")
    ctx.check(size.ndim == 2 and size.shape[1] in (2, -1), f"ImgSize must be [N, 2], got {size.shape}")
    boxes = an * x.shape[2] * x.shape[3] if x.shape[2] >= 0 and x.shape[3] >= 0 else -1
    ctx.set_output("Boxes", (x.shape[0], boxes, 4), x.dtype, 0)
    ctx.set_output("Scores", (x.shape[0], boxes, classes), x.dtype, 0)


@op("yolo_box", inputs="X ImgSize", outputs="Boxes Scores",
    attrs={"anchors": Attr("ints", []), "class_num": 1, "conf_thresh": 0.01, "downsample_ratio": 32,
           "clip_bbox": True, "scale_x_y": 1.0, "iou_aware": False, "iou_aware_factor": 0.5},
    infer_shape=_yolo_box_shape, no_grad_inputs=["ImgSize"], grad=None)
def yolo_box(ctx):
    """Decodes a YOLOv3 head X [N, anchors·(5 + classes), H, W] into boxes [N, anchors·H·W, 4]
    (corners in the pixels of ImgSize [N, 2] = (height, width), clipped when ``clip_bbox``) and
    scores [N, anchors·H·W, classes] = objectness × class probability; cells whose objectness is
    below ``conf_thresh`` get zero boxes and scores. ``iou_aware`` heads carry an IoU channel per
    anchor first, and the confidence is obj^(1 - f) · iou^f."""
    x, img = ctx.input("X"), ctx.input("ImgSize")
    anchors = np.asarray(ctx.attr("anchors"), np.float32).reshape(-1, 2)
    an = anchors.shape[0]
    classes = int(ctx.attr("class_num"))
    n, _, h, w = x.shape
    scale = float(ctx.attr("scale_x_y"))
    bias = -0.5 * (scale - 1.0)
    if ctx.attr("iou_aware"):
        iou, x = jax.nn.sigmoid(x[:, :an]), x[:, an:]
    head = x.reshape(n, an, 5 + classes, h, w)
    conf = jax.nn.sigmoid(head[:, :, 4])                                    # [N, A, H, W]
    if ctx.attr("iou_aware"):
        f = float(ctx.attr("iou_aware_factor"))
        conf = jnp.power(conf, 1 - f) * jnp.power(iou, f)
    img = img.astype(x.dtype)
    img_h, img_w = img[:, 0][:, None, None, None], img[:, 1][:, None, None, None]
    gx = jnp.arange(w, dtype=x.dtype)[None, None, None, :]
    gy = jnp.arange(h, dtype=x.dtype)[None, None, :, None]
    ratio = int(ctx.attr("downsample_ratio"))
    cx = (gx + jax.nn.sigmoid(head[:, :, 0]) * scale + bias) * img_w / w
    cy = (gy + jax.nn.sigmoid(head[:, :, 1]) * scale + bias) * img_h / h
    bw = jnp.exp(head[:, :, 2]) * jnp.asarray(anchors[:, 0], x.dtype)[None, :, None, None] * img_w / (ratio * w)
    bh = jnp.exp(head[:, :, 3]) * jnp.asarray(anchors[:, 1], x.dtype)[None, :, None, None] * img_h / (ratio * h)
    x1, y1, x2, y2 = cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2
    if ctx.attr("clip_bbox"):
        x1, y1 = jnp.maximum(x1, 0), jnp.maximum(y1, 0)
        x2, y2 = jnp.minimum(x2, img_w - 1), jnp.minimum(y2, img_h - 1)
    keep = conf >= jnp.asarray(ctx.attr("conf_thresh"), x.dtype)
    boxes = jnp.where(keep[..., None], jnp.stack([x1, y1, x2, y2], axis=-1), 0)      # [N, A, H, W, 4]
    scores = conf[:, :, None] * jax.nn.sigmoid(head[:, :, 5:])                      # [N, A, C, H, W]
    scores = jnp.where(keep[:, :, None], scores, 0).transpose(0, 1, 3, 4, 2)
    return {"Boxes": boxes.reshape(n, an * h * w, 4), "Scores": scores.reshape(n, an * h * w, classes)}


# -- NMS (data-dependent output sizes, docs/ops_data_dependent.md) -----------------------------------
def _iou_matrix(boxes, normalized: bool):
    """[K, K] Jaccard overlaps of corner boxes, Paddle's way (+1 to sizes for pixel boxes)."""
    norm = 0.0 if normalized else 1.0
    a, b = boxes[:, None, :], boxes[None, :, :]
    disjoint = (b[..., 0] > a[..., 2]) | (b[..., 2] < a[..., 0]) | (b[..., 1] > a[..., 3]) | (b[..., 3] < a[..., 1])
    iw = jnp.minimum(a[..., 2], b[..., 2]) - jnp.maximum(a[..., 0], b[..., 0]) + norm
    ih = jnp.minimum(a[..., 3], b[..., 3]) - jnp.maximum(a[..., 1], b[..., 1]) + norm
    inter = iw * ih

    def area(box):
        empty = (box[..., 2] < box[..., 0]) | (box[..., 3] < box[..., 1])
        return jnp.where(empty, 0, (box[..., 2] - box[..., 0] + norm) * (box[..., 3] - box[..., 1] + norm))

    union = area(a) + area(b) - inter
    return jnp.where(disjoint, 0, inter / jnp.where(disjoint, 1, union))


def _top_candidates(scores, threshold, top_k: int):
    """The ``top_k`` indices of the scores above ``threshold``, best first (ties: lower index
    first, a stable sort), and which of them are real candidates."""
    above = scores > threshold
    order = jnp.argsort(jnp.where(above, -scores, jnp.inf), stable=True)[:top_k]
    return order, above[order]


def _greedy_keep(iou, ok, threshold, eta: float):
    """Greedy NMS over candidates sorted best first: candidate i survives unless it overlaps a
    survivor by more than the threshold, which shrinks by ``eta`` after each survivor while above
    0.5 (Paddle's adaptive NMS)."""
    k = ok.shape[0]

    def step(i, carry):
        keep, thr = carry
        earlier = (jnp.arange(k) < i) & keep
        keep_i = ok[i] & ~jnp.any(earlier & (iou[i] > thr))
        keep = keep.at[i].set(keep_i)
        if eta < 1:
            thr = jnp.where(keep_i & (thr > 0.5), thr * eta, thr)
        return keep, thr

    keep, _ = lax.fori_loop(0, k, step, (jnp.zeros((k,), bool), threshold))
    return keep


def _pack_rows(rows, selected, capacity: int):
    """Each image's selected rows ([N, P, F], selected ones first) packed back to back into one
    padded array [N·capacity, F], with the per-image counts."""
    n = rows.shape[0]
    counts = jnp.sum(selected, axis=1).astype(jnp.int32)
    starts = jnp.cumsum(counts) - counts
    dest = jnp.where(selected, starts[:, None] + jnp.arange(rows.shape[1])[None], n * capacity)
    packed = jnp.zeros((n * capacity, rows.shape[2]), rows.dtype).at[dest.reshape(-1)].set(
        rows.reshape(-1, rows.shape[2]), mode="drop")
    return packed, counts


def _nms_shape(ctx: InferShapeContext, num_slot: str) -> None:
    boxes, scores = ctx.input("BBoxes"), ctx.input("Scores")
    ctx.check(scores.ndim == 3, f"Scores must be [N, classes, M] (the LoD form [M, classes] is not supported), "
                                f"got {scores.shape}")
    ctx.check(boxes.ndim == 3 and boxes.shape[2] in (4, -1), f"BBoxes must be [N, M, 4], got {boxes.shape}")
    ctx.set_output("Out", (-1, 6), boxes.dtype, 0)
    ctx.set_output("Index", (-1, 1), "int32", 0)
    if ctx.has_output(num_slot):
        ctx.set_output(num_slot, (boxes.shape[0] if boxes.shape[0] >= 0 else scores.shape[0],), "int32", 0)


def _gather_detections(ctx, boxes, labels, scores, idx, selected, order, capacity: int, num_slot: str):
    """Pack each image's selected detections (in ``order``) into one padded, counted output."""
    n, m = boxes.shape[0], boxes.shape[1]
    take = order[:, :capacity]                                          # [N, P]
    sel = jnp.take_along_axis(selected, take, axis=1)
    lab = jnp.take_along_axis(labels, take, axis=1)
    sco = jnp.take_along_axis(scores, take, axis=1)
    ids = jnp.take_along_axis(idx, take, axis=1)
    box = jnp.take_along_axis(boxes, ids[..., None], axis=1)           # [N, P, 4]
    rows = jnp.concatenate([lab[..., None].astype(boxes.dtype), sco[..., None], box], axis=-1)
    counts = jnp.sum(sel, axis=1).astype(jnp.int32)                    # selected rows lead each image
    starts = jnp.cumsum(counts) - counts
    dest = jnp.where(sel, starts[:, None] + jnp.arange(capacity)[None], n * capacity)
    flat = dest.reshape(-1)
    out = jnp.zeros((n * capacity, 6), boxes.dtype).at[flat].set(rows.reshape(-1, 6), mode="drop")
    index = jnp.zeros((n * capacity, 1), jnp.int32).at[flat].set(
        (ids + jnp.arange(n)[:, None] * m).reshape(-1, 1).astype(jnp.int32), mode="drop")
    total = jnp.sum(counts)
    result = {"Out": ragged(out, total), "Index": ragged(index, total)}
    if ctx.has_output(num_slot):
        result[num_slot] = counts
    return result


def _nms_candidates(ctx, boxes, scores):
    """Per image and class: the top candidates' indices [N, C, K], validity and scores."""
    m = boxes.shape[1]
    top_k = int(ctx.attr("nms_top_k"))
    k = m if top_k < 0 else min(top_k, m)
    threshold = jnp.asarray(ctx.attr("score_threshold"), scores.dtype)
    order, valid = jax.vmap(jax.vmap(lambda s: _top_candidates(s, threshold, k)))(scores)
    background = int(ctx.attr("background_label"))
    classes = jnp.arange(scores.shape[1])
    valid = valid & (classes != background)[None, :, None]
    cand_scores = jnp.take_along_axis(scores, order, axis=2)
    return order, valid, cand_scores, k


def _finish_nms(ctx, boxes, order, keep, cand_scores, k: int, num_slot: str, group_by_label: bool):
    n, c = order.shape[:2]
    labels = jnp.broadcast_to(jnp.arange(c)[None, :, None], order.shape).reshape(n, c * k)
    pos = jnp.broadcast_to(jnp.arange(k)[None, None, :], order.shape).reshape(n, c * k)
    keep, sco, idx = keep.reshape(n, c * k), cand_scores.reshape(n, c * k), order.reshape(n, c * k)
    keep_top_k = int(ctx.attr("keep_top_k"))
    # keep_top_k: the best kept detections of the image, ties to the lower label, then the earlier one.
    rank_order = jnp.lexsort((pos, labels, -sco, ~keep), axis=-1)
    rank = jnp.argsort(rank_order, axis=-1)
    selected = keep & (rank < keep_top_k) if keep_top_k > -1 else keep
    if group_by_label:
        order_out = jnp.lexsort((pos, labels, ~selected), axis=-1)      # by label, then best first
    else:
        order_out = jnp.lexsort((pos, labels, -sco, ~selected), axis=-1)   # best first
    capacity = c * k if keep_top_k < 0 else min(c * k, keep_top_k)
    return _gather_detections(ctx, boxes, labels, sco, idx, selected, order_out, max(capacity, 1), num_slot)


@op("multiclass_nms3", inputs="BBoxes Scores RoisNum?", outputs="Out Index NmsRoisNum?",
    attrs={"score_threshold": 0.0, "nms_top_k": -1, "keep_top_k": -1, "nms_threshold": 0.3, "normalized": True,
           "nms_eta": 1.0, "background_label": 0},
    infer_shape=lambda ctx: _nms_shape(ctx, "NmsRoisNum"), grad=None)
def multiclass_nms3(ctx):
    """Per-class greedy NMS: for each image and class (except ``background_label``), the boxes
    scoring above ``score_threshold`` (the best ``nms_top_k``) are kept best first unless they
    overlap a kept one by more than ``nms_threshold`` (shrunk by ``nms_eta`` while above 0.5);
    the image keeps its best ``keep_top_k``. Out rows are [label, score, x1, y1, x2, y2], by image,
    then label, then score; Index is the box's row in BBoxes viewed as [N·M]; NmsRoisNum counts
    each image's rows. The row count depends on the data: padded, with the count carried."""
    boxes, scores = ctx.input("BBoxes"), ctx.input("Scores")
    if ctx.input("RoisNum") is not None or scores.ndim != 3:
        _fail(ctx, "only the batched form is supported: BBoxes [N, M, 4] and Scores [N, classes, M]")
    order, valid, cand_scores, k = _nms_candidates(ctx, boxes, scores)
    normalized = bool(ctx.attr("normalized"))
    eta = float(ctx.attr("nms_eta"))
    threshold0 = jnp.asarray(ctx.attr("nms_threshold"), boxes.dtype)

    def greedy(box_idx, ok, image_boxes):
        return _greedy_keep(_iou_matrix(image_boxes[box_idx], normalized), ok, threshold0, eta)

    keep = jax.vmap(lambda o, v, b: jax.vmap(lambda oc, vc: greedy(oc, vc, b))(o, v))(order, valid, boxes)
    return _finish_nms(ctx, boxes, order, keep, cand_scores, k, "NmsRoisNum", group_by_label=True)


@op("matrix_nms", inputs="BBoxes Scores", outputs="Out Index RoisNum?",
    attrs={"score_threshold": 0.0, "nms_top_k": -1, "keep_top_k": -1, "post_threshold": 0.0, "use_gaussian": False,
           "gaussian_sigma": 2.0, "background_label": 0, "normalized": True},
    infer_shape=lambda ctx: _nms_shape(ctx, "RoisNum"), grad=None)
def matrix_nms(ctx):
    """Matrix NMS (SOLOv2): each candidate's score decays by its overlap with every better one of
    its class — min over them of (1 - iou) / (1 - that one's own largest iou), or the Gaussian
    exp((max_iou² - iou²)·sigma) — and is kept when the decayed score exceeds ``post_threshold``.
    Out rows [label, decayed score, x1, y1, x2, y2] best first per image (``keep_top_k`` of them);
    padded, with the count carried, like multiclass_nms3."""
    boxes, scores = ctx.input("BBoxes"), ctx.input("Scores")
    order, valid, cand_scores, k = _nms_candidates(ctx, boxes, scores)
    normalized = bool(ctx.attr("normalized"))
    sigma = float(ctx.attr("gaussian_sigma"))
    post = jnp.asarray(ctx.attr("post_threshold"), boxes.dtype)
    gaussian = bool(ctx.attr("use_gaussian"))

    def decay(box_idx, ok, sc, image_boxes):
        iou = _iou_matrix(image_boxes[box_idx], normalized)                # [K, K]
        below = jnp.arange(k)[None, :] < jnp.arange(k)[:, None]            # j < i
        iou = jnp.where(below & ok[None, :], iou, 0)
        max_iou = jnp.max(iou, axis=1)                                     # each one's largest
        if gaussian:
            d = jnp.exp((max_iou[None, :] ** 2 - iou ** 2) * sigma)
        else:
            d = (1 - iou) / (1 - max_iou[None, :])
        factor = jnp.min(jnp.where(below & ok[None, :], d, 1), axis=1)
        decayed = factor * sc
        return ok & (decayed > post), decayed

    keep, decayed = jax.vmap(lambda o, v, s, b: jax.vmap(lambda oc, vc, sc: decay(oc, vc, sc, b))(o, v, s))(
        order, valid, cand_scores, boxes)
    return _finish_nms(ctx, boxes, order, keep, decayed, k, "RoisNum", group_by_label=False)


# -- generate_proposals_v2 ---------------------------------------------------------------------------
def _proposals_shape(ctx: InferShapeContext) -> None:
    scores, deltas = ctx.input("Scores"), ctx.input("BboxDeltas")
    ctx.check(scores.ndim == 4 and deltas.ndim == 4, f"Scores and BboxDeltas must be 4-D, got {scores.shape}, "
                                                     f"{deltas.shape}")
    ctx.check(scores.shape[1] < 0 or deltas.shape[1] < 0 or deltas.shape[1] == 4 * scores.shape[1],
              f"BboxDeltas needs 4 channels per anchor of Scores: {deltas.shape} vs {scores.shape}")
    ctx.set_output("RpnRois", (-1, 4), deltas.dtype, 0)
    ctx.set_output("RpnRoiProbs", (-1, 1), scores.dtype, 0)
    if ctx.has_output("RpnRoisNum"):
        ctx.set_output("RpnRoisNum", (scores.shape[0],), "int32", 0)


_BBOX_CLIP = float(np.log(1000.0 / 16.0))


def _decode_proposals(sc, dl, anchors, variances, k: int, offset: float, im_h, im_w):
    """The best ``k`` anchors of an image by score, their deltas decoded (Paddle's box_coder with
    variances, the size clipped at exp(_BBOX_CLIP)) and clipped to the image: (scores, x1, y1, x2, y2)."""
    order = jnp.argsort(-sc, stable=True)[:k]
    sc, dl, an, var = sc[order], dl[order], anchors[order], variances[order]
    aw, ah = an[:, 2] - an[:, 0] + offset, an[:, 3] - an[:, 1] + offset
    acx, acy = an[:, 0] + 0.5 * aw, an[:, 1] + 0.5 * ah
    cx, cy = var[:, 0] * dl[:, 0] * aw + acx, var[:, 1] * dl[:, 1] * ah + acy
    bw = jnp.exp(jnp.minimum(var[:, 2] * dl[:, 2], _BBOX_CLIP)) * aw
    bh = jnp.exp(jnp.minimum(var[:, 3] * dl[:, 3], _BBOX_CLIP)) * ah
    return sc, (jnp.clip(cx - bw / 2, 0, im_w - offset), jnp.clip(cy - bh / 2, 0, im_h - offset),
                jnp.clip(cx + bw / 2 - offset, 0, im_w - offset), jnp.clip(cy + bh / 2 - offset, 0, im_h - offset))


def _proposal_rows(boxes, sc, keep, thr: float, eta: float, post: int, capacity: int, normalized: bool):
    """Greedy NMS over an image's kept proposals (best first), its best ``post``: rows
    [x1, y1, x2, y2, score] of the kept ones first (``capacity`` rows) and their mask. An image
    keeping nothing gives one row of zeros, as Paddle's kernels do."""
    k, dtype = boxes.shape[0], boxes.dtype
    if thr > 0:
        keep = _greedy_keep(_iou_matrix(boxes, normalized), keep, jnp.asarray(thr, dtype), eta)
    if post > 0:
        keep = keep & (jnp.cumsum(keep) <= post)
    none = ~jnp.any(keep)
    keep = jnp.where(none, jnp.arange(k) == 0, keep)
    rows = jnp.concatenate([boxes, sc[:, None].astype(dtype)], axis=-1)
    rows = jnp.where(none, jnp.zeros_like(rows), rows)
    take = jnp.argsort(~keep, stable=True)[:capacity]
    return rows[take], keep[take]


@op("generate_proposals_v2", inputs="Scores BboxDeltas ImShape Anchors Variances",
    outputs="RpnRois RpnRoiProbs RpnRoisNum?",
    attrs={"pre_nms_topN": 6000, "post_nms_topN": 1000, "nms_thresh": 0.5, "min_size": 0.1, "eta": 1.0,
           "pixel_offset": True},
    infer_shape=_proposals_shape, grad=None)
def generate_proposals_v2(ctx):
    """RPN proposals per image: the ``pre_nms_topN`` best anchors (Scores [N, A, H, W]) are decoded
    with BboxDeltas [N, 4A, H, W] and Variances (log-sizes clipped at log(1000/16)), clipped to
    ImShape [N, 2] = (height, width), filtered by ``min_size`` (at least 1), reduced by greedy NMS
    (``nms_thresh``, adaptive ``eta``) and cut to ``post_nms_topN``; an image left with none gets
    one zero box. RpnRois [K, 4], RpnRoiProbs [K, 1] (images back to back, best first) and
    RpnRoisNum [N]: padded, with the count carried (docs/ops_data_dependent.md)."""
    scores, deltas = ctx.input("Scores"), ctx.input("BboxDeltas")
    im, anchors, variances = ctx.input("ImShape"), ctx.input("Anchors"), ctx.input("Variances")
    n, a, h, w = scores.shape
    m = a * h * w
    dtype = deltas.dtype
    scores = scores.transpose(0, 2, 3, 1).reshape(n, m)
    deltas = deltas.transpose(0, 2, 3, 1).reshape(n, m, 4).astype(dtype)
    anchors = anchors.reshape(m, 4).astype(dtype)
    variances = variances.reshape(m, 4).astype(dtype)
    pre = int(ctx.attr("pre_nms_topN"))
    k = m if pre <= 0 or pre >= m else pre
    post = int(ctx.attr("post_nms_topN"))
    capacity = min(post, k) if post > 0 else k
    offset = 1.0 if ctx.attr("pixel_offset") else 0.0
    min_size = max(float(ctx.attr("min_size")), 1.0)
    thr = float(ctx.attr("nms_thresh"))
    eta = float(ctx.attr("eta"))

    def one_image(sc, dl, size):
        im_h, im_w = size[0].astype(dtype), size[1].astype(dtype)
        sc, (x1, y1, x2, y2) = _decode_proposals(sc, dl, anchors, variances, k, offset, im_h, im_w)
        ws, hs = x2 - x1 + offset, y2 - y1 + offset
        keep = (ws >= min_size) & (hs >= min_size)
        if offset:
            keep = keep & (x1 + ws / 2 <= im_w) & (y1 + hs / 2 <= im_h)
        return _proposal_rows(jnp.stack([x1, y1, x2, y2], axis=-1), sc, keep, thr, eta, post, capacity,
                              normalized=not offset)

    rows, selected = jax.vmap(one_image)(scores, deltas, im)
    packed, counts = _pack_rows(rows, selected, capacity)
    total = jnp.sum(counts)
    out = {"RpnRois": ragged(packed[:, :4], total), "RpnRoiProbs": ragged(packed[:, 4:].astype(scores.dtype), total)}
    if ctx.has_output("RpnRoisNum"):
        out["RpnRoisNum"] = counts
    return out


# -- distribute_fpn_proposals ------------------------------------------------------------------------
def _distribute_shape(ctx: InferShapeContext) -> None:
    rois = ctx.input("FpnRois")
    levels = ctx.attr("max_level") - ctx.attr("min_level") + 1
    ctx.check(levels > 0, f"max_level {ctx.attr('max_level')} is below min_level {ctx.attr('min_level')}")
    ctx.check(rois.ndim == 2 and rois.shape[1] in (4, -1), f"FpnRois must be [R, 4], got {rois.shape}")
    names = ctx.op.outputs.get("MultiFpnRois", ())
    ctx.check(len(names) == levels, f"{len(names)} MultiFpnRois outputs named for {levels} levels")
    for i in range(levels):
        ctx.set_output("MultiFpnRois", (-1, 4), rois.dtype, 0, index=i)
    ctx.set_output("RestoreIndex", (rois.shape[0], 1), "int32", 0)
    num = ctx.input("RoisNum")
    for i in range(len(ctx.op.outputs.get("MultiLevelRoIsNum", ()))):
        ctx.set_output("MultiLevelRoIsNum", (num.shape[0] if num is not None else 1,), "int32", 0, index=i)


@op("distribute_fpn_proposals", inputs="FpnRois RoisNum?", outputs="MultiFpnRois* RestoreIndex MultiLevelRoIsNum*?",
    attrs={"min_level": 2, "max_level": 5, "refer_level": 4, "refer_scale": 224, "pixel_offset": True},
    infer_shape=_distribute_shape, grad=None)
def distribute_fpn_proposals(ctx):
    """Sends each ROI to an FPN level: floor(log2(sqrt(area) / refer_scale + 1e-8) + refer_level),
    clamped to [min_level, max_level] (areas of pixel boxes count the +1). MultiFpnRois[l] holds
    level l's ROIs in their original order (padded, with the count carried), RestoreIndex maps each
    ROI to its row in the levels' concatenation, MultiLevelRoIsNum[l] counts level l's ROIs per
    image (RoisNum [N] gives each image's ROI count; without it all ROIs are one image's)."""
    rois = ctx.input("FpnRois")
    r = rois.shape[0]
    lo, hi = int(ctx.attr("min_level")), int(ctx.attr("max_level"))
    plus = 1.0 if ctx.attr("pixel_offset") else 0.0
    w, h = rois[:, 2] - rois[:, 0], rois[:, 3] - rois[:, 1]
    area = jnp.where((w < 0) | (h < 0), 0, (w + plus) * (h + plus))
    scale = jnp.sqrt(area)
    level = jnp.floor(jnp.log2(scale / jnp.asarray(ctx.attr("refer_scale"), rois.dtype) + 1e-8) + ctx.attr("refer_level"))
    level = jnp.clip(level, lo, hi).astype(jnp.int32) - lo
    num = ctx.input("RoisNum")
    if num is not None:
        ends = jnp.cumsum(num.astype(jnp.int32))
        image = jnp.searchsorted(ends, jnp.arange(r, dtype=jnp.int32), side="right")
        images = num.shape[0]
    else:
        image, images = jnp.zeros((r,), jnp.int32), 1
    outs, nums, counts = [], [], []
    restore = jnp.zeros((r,), jnp.int32)
    before = jnp.zeros((), jnp.int32)
    for l in range(hi - lo + 1):
        member = level == l
        pos = jnp.cumsum(member) - 1
        dest = jnp.where(member, pos, r)
        packed = jnp.zeros((max(r, 1), 4), rois.dtype).at[dest].set(rois, mode="drop")
        count = jnp.sum(member).astype(jnp.int32)
        outs.append(ragged(packed, count))
        nums.append(jnp.zeros((images,), jnp.int32).at[image].add(member.astype(jnp.int32)))
        restore = jnp.where(member, before + pos.astype(jnp.int32), restore)
        before = before + count
    out = {"MultiFpnRois": outs, "RestoreIndex": restore.reshape(r, 1)}
    if ctx.has_output("MultiLevelRoIsNum"):
        out["MultiLevelRoIsNum"] = nums
    return out


def _iou_similarity_shape(ctx: InferShapeContext) -> None:
    x, y = ctx.input("X"), ctx.input("Y")
    ctx.check(x.ndim == 2 and x.shape[1] in (4, -1) and y.ndim == 2 and y.shape[1] in (4, -1),
              f"iou_similarity needs boxes [N, 4] and [M, 4], got {x.shape} and {y.shape}")
    ctx.set_output("Out", (x.shape[0], y.shape[0]), x.dtype, x.lod_level)


@op("iou_similarity", inputs="X Y", outputs="Out", attrs={"box_normalized": True},
    infer_shape=_iou_similarity_shape, grad=None)
def iou_similarity(ctx):
    """The intersection over union of every box of X [N, 4] with every box of Y [M, 4] (xmin, ymin,
    xmax, ymax); with ``box_normalized=False`` a box spans its end pixels (widths are +1)."""
    x, y = ctx.input("X"), ctx.input("Y")
    one = 0.0 if ctx.attr("box_normalized") else 1.0
    x, y = x[:, None, :], y[None, :, :]
    area_x = (x[..., 2] - x[..., 0] + one) * (x[..., 3] - x[..., 1] + one)
    area_y = (y[..., 2] - y[..., 0] + one) * (y[..., 3] - y[..., 1] + one)
    w = jnp.maximum(jnp.minimum(x[..., 2], y[..., 2]) - jnp.maximum(x[..., 0], y[..., 0]) + one, 0)
    h = jnp.maximum(jnp.minimum(x[..., 3], y[..., 3]) - jnp.maximum(x[..., 1], y[..., 1]) + one, 0)
    inter = w * h
    return {"Out": (inter / (area_x + area_y - inter)).astype(x.dtype)}
