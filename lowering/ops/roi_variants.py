"""ROI pooling variants of Fluid 1.x: psroi_pool, prroi_pool, deformable_psroi_pooling,
roi_perspective_transform.

Each takes its ROIs as a LoD tensor (the image of a ROI is the sequence it belongs to, Fluid 1.8's
way) or as a plain [R, k] tensor with a per-image count (``RoisNum`` / ``BatchRoINums``) or, for
one image, neither. A LoD input arrives padded to a bucket (``lowering/lod_value.py``): padding rows
are replaced by a harmless unit box before any arithmetic (so no NaN reaches a gradient), their
outputs are zero, and the ROI-row outputs keep the ROIs' LoD (a fetch is cut to the real rows).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext
from ..lod_value import LoDValue
from ..lower import lod_aware
from ._errors import _fail


# -- shared: which image each ROI belongs to -------------------------------------------------------
def _rois_by_image(ctx, n_images: int, num_slot: str | None, safe_row):
    """(rois [R, k] with padding rows replaced by ``safe_row``, image index [R], real-row mask [R] or
    None, the LoD value's offsets or None)."""
    rois = ctx.input("ROIs")
    if rois.__class__ is LoDValue:
        seqs = int(rois.offsets[0].shape[0]) - 1
        if len(rois.offsets) == 1 and seqs != n_images:
            _fail(ctx, f"ROIs hold the boxes of {seqs} images (their LoD), the input has {n_images}")
        image = rois.segment_ids()
        real = rois.row_mask()
        data, offsets = rois.data, rois.offsets
    else:
        data, offsets, real = rois, None, None
        num = ctx.input(num_slot) if num_slot else None
        if num is not None:
            if int(num.shape[0]) != n_images:
                _fail(ctx, f"{num_slot} counts the boxes of {num.shape[0]} images, the input has {n_images}")
            ends = jnp.cumsum(num.astype(jnp.int32).reshape(-1))
            rows = jnp.arange(data.shape[0], dtype=jnp.int32)
            image = jnp.searchsorted(ends, rows, side="right")
            real = rows < ends[-1]
        elif n_images != 1:
            _fail(ctx, "the ROIs of a batch of several images need their LoD (lod_level=1) or "
                       f"{num_slot or 'a per-image count'}")
        else:
            image = jnp.zeros((data.shape[0],), jnp.int32)
    image = jnp.clip(image, 0, n_images - 1).astype(jnp.int32)
    if real is not None:
        data = jnp.where(real[:, None], data, jnp.asarray(safe_row, data.dtype))
    return data, image, real, offsets


def _finish(value, real, offsets):
    """Zero the padding rows and give the result the ROIs' LoD."""
    if real is not None:
        value = jnp.where(real.reshape((-1,) + (1,) * (value.ndim - 1)), value, jnp.zeros((), value.dtype))
    return LoDValue(value, offsets) if offsets is not None else value


def _round_half_away(v):
    return jnp.sign(v) * jnp.floor(jnp.abs(v) + 0.5)


def _check_rois(ctx: InferShapeContext, slot: str, width: int):
    x, rois = ctx.input(slot), ctx.input("ROIs")
    ctx.check(x.ndim == 4, f"{slot} must be 4-D [N, C, H, W], got {x.shape}")
    ctx.check(rois.ndim == 2 and rois.shape[1] in (width, -1), f"ROIs must be [R, {width}], got {rois.shape}")
    ctx.check(rois.dtype == x.dtype, f"ROIs ({rois.dtype}) must have {slot}'s dtype ({x.dtype})")
    return x, rois


def _check_pooled(ctx: InferShapeContext):
    ph, pw = ctx.attr("pooled_height"), ctx.attr("pooled_width")
    ctx.check(ph > 0 and pw > 0, f"pooled_height and pooled_width must be positive, got {ph} × {pw}")
    ctx.check(ctx.attr("spatial_scale") > 0, f"spatial_scale must be positive, got {ctx.attr('spatial_scale')}")
    return int(ph), int(pw)


def _check_count(ctx: InferShapeContext, slot: str, dtypes):
    num = ctx.input(slot)
    if num is not None:
        ctx.check(num.ndim == 1 and num.dtype in dtypes, f"{slot} must be 1-D {' or '.join(dtypes)}, "
                                                        f"got {num.shape} {num.dtype}")


_UNIT_BOX = (0.0, 0.0, 1.0, 1.0)


# -- psroi_pool -------------------------------------------------------------------------------------
def _psroi_shape(ctx: InferShapeContext) -> None:
    x, rois = _check_rois(ctx, "X", 4)
    ph, pw = _check_pooled(ctx)
    oc = ctx.attr("output_channels")
    ctx.check(oc > 0, f"output_channels must be positive, got {oc}")
    ctx.check(x.shape[1] < 0 or x.shape[1] == oc * ph * pw,
              f"X has {x.shape[1]} channels; output_channels × pooled_height × pooled_width = "
              f"{oc} × {ph} × {pw} = {oc * ph * pw} expected")
    _check_count(ctx, "RoisNum", ("int32",))
    ctx.set_output("Out", (rois.shape[0], oc, ph, pw), x.dtype, rois.lod_level)


def _int_bins(start, bin_size, pooled: int, size: int):
    """[R, pooled] integer bin bounds floor(start + p·bin), ceil(start + (p+1)·bin), clipped to [0, size]."""
    p = jnp.arange(pooled, dtype=start.dtype)[None]
    lo = jnp.floor(p * bin_size[:, None] + start[:, None]).astype(jnp.int32)
    hi = jnp.ceil((p + 1) * bin_size[:, None] + start[:, None]).astype(jnp.int32)
    return jnp.clip(lo, 0, size), jnp.clip(hi, 0, size)


@op("psroi_pool", inputs="X ROIs RoisNum?", outputs="Out",
    attrs={"pooled_height": 1, "pooled_width": 1, "output_channels": 1, "spatial_scale": 1.0},
    infer_shape=_psroi_shape, no_grad_inputs=["ROIs", "RoisNum"])
def psroi_pool(ctx):
    """Position-sensitive ROI pooling (R-FCN): ROI corners are rounded, scaled by ``spatial_scale``
    (the far corner + 1 pixel) and cut into pooled_height × pooled_width bins with integer bounds;
    output (r, c, i, j) is the mean over its bin of input channel (c·ph + i)·pw + j (0 for an empty
    bin). The gradient (X only, as Paddle) spreads each output evenly over its bin."""
    x = ctx.input("X")
    n, c, h, w = x.shape
    ph, pw = int(ctx.attr("pooled_height")), int(ctx.attr("pooled_width"))
    oc = int(ctx.attr("output_channels"))
    rois, image, real, offsets = _rois_by_image(ctx, n, "RoisNum", _UNIT_BOX)
    rois = rois.astype(x.dtype)
    scale = jnp.asarray(ctx.attr("spatial_scale"), x.dtype)
    r = _round_half_away(rois)
    x1, y1 = r[:, 0] * scale, r[:, 1] * scale
    x2, y2 = (r[:, 2] + 1) * scale, (r[:, 3] + 1) * scale
    rh, rw = jnp.maximum(y2 - y1, 0.1), jnp.maximum(x2 - x1, 0.1)
    hs, he = _int_bins(y1, rh / ph, ph, h)                                    # [R, ph]
    ws, we = _int_bins(x1, rw / pw, pw, w)                                    # [R, pw]
    rows, cols = jnp.arange(h), jnp.arange(w)
    mh = ((rows >= hs[..., None]) & (rows < he[..., None])).astype(x.dtype)    # [R, ph, H]
    mw = ((cols >= ws[..., None]) & (cols < we[..., None])).astype(x.dtype)    # [R, pw, W]
    images = x[image].reshape(-1, oc, ph, pw, h, w)                           # [R, OC, ph, pw, H, W]
    sums = jnp.einsum("rih,rcijhw,rjw->rcij", mh, images, mw)
    area = ((he - hs)[:, :, None] * (we - ws)[:, None, :]).astype(x.dtype)    # [R, ph, pw]
    empty = (area <= 0)[:, None]
    out = jnp.where(empty, jnp.zeros((), x.dtype), sums / jnp.where(empty, 1, area[:, None]))
    return {"Out": _finish(out, real, offsets)}


# -- prroi_pool -------------------------------------------------------------------------------------
def _prroi_shape(ctx: InferShapeContext) -> None:
    x, rois = _check_rois(ctx, "X", 4)
    ph, pw = _check_pooled(ctx)
    _check_count(ctx, "BatchRoINums", ("int64", "int32"))
    ctx.set_output("Out", (rois.shape[0], x.shape[1], ph, pw), x.dtype, rois.lod_level)


def _hat_integral(u):
    """∫_{-∞}^{u} max(0, 1 - |t|) dt: the mass of a bilinear 'hat' left of u."""
    return jnp.where(u <= -1, 0.0, jnp.where(u <= 0, 0.5 * (u + 1) ** 2,
                                             jnp.where(u <= 1, 1 - 0.5 * (1 - u) ** 2, 1.0))).astype(u.dtype)


def _integral_weights(start, bin_size, pooled: int, size: int):
    """[R, pooled, size]: ∫ over bin p of the interpolation weight of pixel k (hat centred on k)."""
    p = jnp.arange(pooled, dtype=start.dtype)[None, :, None]
    k = jnp.arange(size, dtype=start.dtype)[None, None, :]
    lo = start[:, None, None] + p * bin_size[:, None, None]
    hi = lo + bin_size[:, None, None]
    return _hat_integral(hi - k) - _hat_integral(lo - k)


@op("prroi_pool", inputs="X ROIs BatchRoINums?", outputs="Out",
    attrs={"spatial_scale": 1.0, "pooled_height": 1, "pooled_width": 1},
    infer_shape=_prroi_shape, no_grad_inputs=["BatchRoINums"])
def prroi_pool(ctx):
    """Precise ROI pooling: each bin's output is the integral of the bilinearly interpolated feature
    map (zero outside it) over the bin, divided by the bin's area (0 for an empty bin); ROIs are
    scaled by ``spatial_scale``, not rounded. The integral is separable: pixel k's weight along an
    axis is the integral of its hat function over the bin. Gradients go to X and to the ROIs (the
    exact derivative of this forward)."""
    x = ctx.input("X")
    n, c, h, w = x.shape
    ph, pw = int(ctx.attr("pooled_height")), int(ctx.attr("pooled_width"))
    rois, image, real, offsets = _rois_by_image(ctx, n, "BatchRoINums", _UNIT_BOX)
    rois = rois.astype(x.dtype)
    scale = jnp.asarray(ctx.attr("spatial_scale"), x.dtype)
    x1, y1, x2, y2 = (rois[:, k] * scale for k in range(4))
    bin_w = jnp.maximum(x2 - x1, 0) / pw
    bin_h = jnp.maximum(y2 - y1, 0) / ph
    wy = _integral_weights(y1, bin_h, ph, h)                                  # [R, ph, H]
    wx = _integral_weights(x1, bin_w, pw, w)                                  # [R, pw, W]
    win = jnp.maximum(bin_w * bin_h, 0)[:, None, None, None]
    sums = jnp.einsum("rih,rchw,rjw->rcij", wy, x[image], wx)
    out = jnp.where(win > 0, sums / jnp.where(win > 0, win, 1), jnp.zeros((), x.dtype))
    return {"Out": _finish(out, real, offsets)}


# -- deformable_psroi_pooling -----------------------------------------------------------------------
def _deformable_shape(ctx: InferShapeContext) -> None:
    x, rois = _check_rois(ctx, "Input", 4)
    trans = ctx.input("Trans")
    ph, pw = _check_pooled(ctx)
    group, part = list(ctx.attr("group_size") or []), list(ctx.attr("part_size") or [])
    out_dim, samples = ctx.attr("output_dim"), ctx.attr("sample_per_part")
    ctx.check(len(group) == 2 and min(group) > 0, f"group_size must be 2 positive ints, got {group}")
    ctx.check(len(part) == 2 and min(part) > 0, f"part_size must be 2 positive ints, got {part}")
    ctx.check(out_dim > 0 and samples > 0, f"output_dim and sample_per_part must be positive, got "
                                           f"{out_dim} and {samples}")
    ctx.check(ctx.attr("trans_std") >= 0, f"trans_std must not be negative, got {ctx.attr('trans_std')}")
    ctx.check(x.shape[1] < 0 or out_dim * group[0] * group[1] <= x.shape[1],
              f"output_dim × group_size = {out_dim} × {group[0]} × {group[1]} channels are read, the input "
              f"has {x.shape[1]}")
    ctx.check(trans.ndim == 4, f"Trans must be 4-D [R, 2·classes, part_h, part_w], got {trans.shape}")
    ctx.check((trans.shape[2] < 0 or part[0] <= trans.shape[2]) and (trans.shape[3] < 0 or part[1] <= trans.shape[3]),
              f"part_size {part} exceeds Trans's spatial size {trans.shape[2:]}")
    if not ctx.attr("no_trans") and trans.shape[1] >= 0:
        ctx.check(trans.shape[1] % 2 == 0 and trans.shape[1] > 0 and out_dim % (trans.shape[1] // 2) == 0,
                  f"Trans has {trans.shape[1]} channels: 2 per class, and output_dim {out_dim} must be a "
                  "multiple of the class count")
    shape = (rois.shape[0], out_dim, ph, pw)
    ctx.set_output("Output", shape, x.dtype, rois.lod_level)
    ctx.set_output("TopCount", shape, x.dtype, rois.lod_level)


def _part_index(pooled: int, parts: int) -> np.ndarray:
    """floor(p / pooled · parts) for p < pooled, in float32 and in that order, as Paddle's kernel."""
    p = np.arange(pooled, dtype=np.float32)
    return np.floor(p / np.float32(pooled) * np.float32(parts)).astype(np.int32)


def _group_index(pooled: int, groups: int) -> np.ndarray:
    """floor(p · groups / pooled) for p < pooled, clipped to [0, groups - 1], as Paddle's kernel."""
    p = np.arange(pooled, dtype=np.float32)
    return np.clip(np.floor(p * np.float32(groups) / np.float32(pooled)), 0, groups - 1).astype(np.int32)


@op("deformable_psroi_pooling", inputs="Input ROIs Trans", outputs="TopCount Output",
    attrs={"no_trans": False, "spatial_scale": 1.0, "output_dim": 1, "group_size": Attr("ints", [1, 1]),
           "pooled_height": 1, "pooled_width": 1, "part_size": Attr("ints", [1, 1]), "sample_per_part": 1,
           "trans_std": 0.1},
    infer_shape=_deformable_shape, no_grad_inputs=["ROIs"], no_grad_outputs=["TopCount"])
def deformable_psroi_pooling(ctx):
    """Deformable (position-sensitive) ROI pooling: each bin is shifted by Trans (× ``trans_std`` ×
    the ROI's size; the offset of class c // (output_dim / classes) at part (floor(i·part_h/ph),
    floor(j·part_w/pw))), then averaged over sample_per_part² bilinear samples (those outside the
    map by more than half a pixel are skipped; TopCount counts the rest). Channel
    (c·group_h + gh)·group_w + gw is read, gh = floor(i·group_h/ph). Gradients go to Input and Trans
    (the exact derivative: a sample clamped to the map's edge gives Trans none)."""
    x, trans = ctx.input("Input"), ctx.input("Trans")
    n, c, h, w = x.shape
    ph, pw = int(ctx.attr("pooled_height")), int(ctx.attr("pooled_width"))
    out_dim, samples = int(ctx.attr("output_dim")), int(ctx.attr("sample_per_part"))
    gh_n, gw_n = (int(v) for v in ctx.attr("group_size"))
    part_h, part_w = (int(v) for v in ctx.attr("part_size"))
    no_trans = bool(ctx.attr("no_trans"))
    classes = 1 if no_trans else int(trans.shape[1]) // 2
    per_class = out_dim // classes
    rois, image, real, offsets = _rois_by_image(ctx, n, None, _UNIT_BOX)
    dt = x.dtype
    if trans.shape[0] < rois.shape[0]:         # LoD ROIs padded to a bucket: Trans has the real rows
        trans = jnp.pad(trans, ((0, rois.shape[0] - trans.shape[0]),) + ((0, 0),) * 3)
    rois = rois.astype(dt)
    scale = jnp.asarray(ctx.attr("spatial_scale"), dt)
    r = _round_half_away(rois)
    x1, y1 = r[:, 0] * scale - 0.5, r[:, 1] * scale - 0.5
    x2, y2 = (r[:, 2] + 1) * scale - 0.5, (r[:, 3] + 1) * scale - 0.5
    rw, rh = jnp.maximum(x2 - x1, 0.1), jnp.maximum(y2 - y1, 0.1)
    bin_w, bin_h = rw / pw, rh / ph
    pi, pj = _part_index(ph, part_h), _part_index(pw, part_w)
    cls = np.arange(out_dim) // per_class                                     # [OC]
    if no_trans:
        tx = ty = jnp.zeros((rois.shape[0], out_dim, ph, pw), dt)
    else:
        std = jnp.asarray(ctx.attr("trans_std"), dt)
        t = trans.astype(dt)[:, :, pi][:, :, :, pj]                           # [R, 2·classes, ph, pw]
        tx, ty = t[:, 2 * cls] * std, t[:, 2 * cls + 1] * std                 # [R, OC, ph, pw]
    col = jnp.arange(pw, dtype=dt)[None, None, None, :]
    row = jnp.arange(ph, dtype=dt)[None, None, :, None]
    wstart = col * bin_w[:, None, None, None] + x1[:, None, None, None] + tx * rw[:, None, None, None]
    hstart = row * bin_h[:, None, None, None] + y1[:, None, None, None] + ty * rh[:, None, None, None]
    s = jnp.arange(samples, dtype=dt)
    sx = wstart[..., None, None] + s[None, :] * (bin_w / samples)[:, None, None, None, None, None]
    sy = hstart[..., None, None] + s[:, None] * (bin_h / samples)[:, None, None, None, None, None]
    valid = (sx >= -0.5) & (sx <= w - 0.5) & (sy >= -0.5) & (sy <= h - 0.5)  # [R, OC, ph, pw, S, S]
    sx, sy = jnp.clip(sx, 0, w - 1), jnp.clip(sy, 0, h - 1)
    xl, yl = jnp.floor(sx), jnp.floor(sy)
    xh, yh = jnp.ceil(sx), jnp.ceil(sy)
    dx, dy = sx - xl, sy - yl
    gh, gw = _group_index(ph, gh_n), _group_index(pw, gw_n)
    chan = (np.arange(out_dim)[:, None, None] * gh_n + gh[None, :, None]) * gw_n + gw[None, None, :]
    base = (image[:, None, None, None] * c + jnp.asarray(chan)[None]) * (h * w)   # [R, OC, ph, pw]
    flat = x.reshape(-1)
    base = base[..., None, None]

    def at(yy, xx):
        return jnp.take(flat, base + yy.astype(jnp.int32) * w + xx.astype(jnp.int32))

    val = ((1 - dx) * (1 - dy) * at(yl, xl) + (1 - dx) * dy * at(yh, xl)
           + dx * (1 - dy) * at(yl, xh) + dx * dy * at(yh, xh))
    count = valid.sum(axis=(-2, -1)).astype(dt)
    total = jnp.where(valid, val, jnp.zeros((), dt)).sum(axis=(-2, -1))
    out = jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.zeros((), dt))
    return {"Output": _finish(out, real, offsets), "TopCount": _finish(count, real, offsets)}


# -- roi_perspective_transform ----------------------------------------------------------------------
def _perspective_shape(ctx: InferShapeContext) -> None:
    x, rois = _check_rois(ctx, "X", 8)
    th, tw = ctx.attr("transformed_height"), ctx.attr("transformed_width")
    ctx.check(th > 0 and tw > 0, f"transformed_height and transformed_width must be positive, got {th} × {tw}")
    ctx.check(ctx.attr("spatial_scale") > 0, f"spatial_scale must be positive, got {ctx.attr('spatial_scale')}")
    r = rois.shape[0]
    ctx.set_output("Out", (r, x.shape[1], th, tw), x.dtype, rois.lod_level)
    ctx.set_output("Mask", (r, 1, th, tw), "int32", rois.lod_level)
    ctx.set_output("TransformMatrix", (r, 9), x.dtype, rois.lod_level)
    elems = r * x.shape[1] * th * tw if r >= 0 and x.shape[1] >= 0 else -1
    ctx.set_output("Out2InIdx", (elems, 4), "int32", 0)
    ctx.set_output("Out2InWeights", (elems, 4), x.dtype, 0)


def _gt_e(a, b):
    return (a > b) | (jnp.abs(a - b) < 1e-4)


def _lt_e(a, b):
    return (a < b) | (jnp.abs(a - b) < 1e-4)


def _in_quad(px, py, qx, qy):
    """Whether points (px, py) [..., P] lie in (or, within 1e-4, on) the quadrilateral (qx, qy) [..., 4]."""
    xs, ys = qx[..., None, :], qy[..., None, :]
    xe, ye = jnp.roll(qx, -1, axis=-1)[..., None, :], jnp.roll(qy, -1, axis=-1)[..., None, :]
    x, y = px[..., None], py[..., None]
    flat = jnp.abs(ys - ye) < 1e-4
    dy = jnp.where(flat, 1, ye - ys)
    cross = (y - ys) * (xe - xs) / dy + xs
    on_flat = (flat & (jnp.abs(y - ys) < 1e-4) & (jnp.abs(y - ye) < 1e-4)
               & _gt_e(x, jnp.minimum(xs, xe)) & _lt_e(x, jnp.maximum(xs, xe)))
    on_slant = (~flat & (jnp.abs(cross - x) < 1e-4) & _gt_e(y, jnp.minimum(ys, ye))
                & _lt_e(y, jnp.maximum(ys, ye)))
    spans = ~flat & ~(_lt_e(y, jnp.minimum(ys, ye)) | ((y - jnp.maximum(ys, ye)) > 1e-4))
    on_cross = spans & (jnp.abs(cross - x) < 1e-4)
    crossings = (spans & ((cross - x) > 1e-4)).sum(-1)
    return (on_flat | on_slant | on_cross).any(-1) | (crossings % 2 == 1)


def _perspective_matrix(qx, qy, th: int, tw: int):
    """[R, 9]: the projective map from output (column, row) to input (x, y) of each quadrilateral."""
    x0, x1, x2, x3 = (qx[:, k] for k in range(4))
    y0, y1, y2, y3 = (qy[:, k] for k in range(4))
    side = lambda ax, ay, bx, by: jnp.sqrt((ax - bx) ** 2 + (ay - by) ** 2)  # noqa: E731
    est_w = (side(x0, y0, x1, y1) + side(x2, y2, x3, y3)) / 2
    est_h = (side(x1, y1, x2, y2) + side(x3, y3, x0, y0)) / 2
    nh = max(2, th)
    nw = _round_half_away(est_w * (nh - 1) / est_h) + 1
    nw = jnp.maximum(2, jnp.minimum(nw, tw)).astype(qx.dtype)
    dx1, dx2, dx3 = x1 - x2, x3 - x2, x0 - x1 + x2 - x3
    dy1, dy2, dy3 = y1 - y2, y3 - y2, y0 - y1 + y2 - y3
    den = dx1 * dy2 - dx2 * dy1 + 1e-5
    m6 = (dx3 * dy2 - dx2 * dy3) / den / (nw - 1)
    m7 = (dx1 * dy3 - dx3 * dy1) / den / (nh - 1)
    m3 = (y1 - y0 + m6 * (nw - 1) * y1) / (nw - 1)
    m4 = (y3 - y0 + m7 * (nh - 1) * y3) / (nh - 1)
    m0 = (x1 - x0 + m6 * (nw - 1) * x1) / (nw - 1)
    m1 = (x3 - x0 + m7 * (nh - 1) * x3) / (nh - 1)
    return jnp.stack([m0, m1, x0, m3, m4, y0, m6, m7, jnp.ones_like(m0)], axis=1)


@op("roi_perspective_transform", inputs="X ROIs", outputs="Out Mask TransformMatrix Out2InIdx Out2InWeights",
    attrs={"spatial_scale": 1.0, "transformed_height": 1, "transformed_width": 1},
    infer_shape=_perspective_shape, no_grad_inputs=["ROIs"],
    no_grad_outputs=["Mask", "TransformMatrix", "Out2InIdx", "Out2InWeights"])
def roi_perspective_transform(ctx):
    """Warps each quadrilateral ROI [x0, y0, ..., x3, y3] (clockwise from the top left, × spatial_scale)
    onto a transformed_height × transformed_width grid by the projective map that sends the grid's
    corners to the ROI's (its width normalised to the ROI's aspect ratio); each output pixel is the
    bilinear sample of X at its source point, 0 (Mask 0) where that point lies outside the ROI or
    the map. TransformMatrix holds the 9 map coefficients; Out2InIdx / Out2InWeights, one row per
    output element, the flat X indices of the 4 pixels sampled and their weights (-1 and 0 where
    nothing is). The gradient goes to X only, as in Paddle."""
    x = ctx.input("X")
    n, c, h, w = x.shape
    th, tw = int(ctx.attr("transformed_height")), int(ctx.attr("transformed_width"))
    unit = (0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0)
    rois, image, real, offsets = _rois_by_image(ctx, n, None, unit)
    dt = x.dtype
    rois = rois.astype(dt) * jnp.asarray(ctx.attr("spatial_scale"), dt)
    qx, qy = rois[:, 0::2], rois[:, 1::2]                                     # [R, 4]
    m = _perspective_matrix(qx, qy, th, tw)
    ow = jnp.tile(jnp.arange(tw, dtype=dt), th)[None]                         # [1, P], P = th·tw
    oh = jnp.repeat(jnp.arange(th, dtype=dt), tw)[None]
    den = m[:, 6:7] * ow + m[:, 7:8] * oh + m[:, 8:9]
    sx = (m[:, 0:1] * ow + m[:, 1:2] * oh + m[:, 2:3]) / den                  # [R, P]
    sy = (m[:, 3:4] * ow + m[:, 4:5] * oh + m[:, 5:6]) / den
    outside = _gt_e(-0.5, sx) | _gt_e(sx, w - 0.5) | _gt_e(-0.5, sy) | _gt_e(sy, h - 0.5)
    valid = _in_quad(sx, sy, qx, qy) & ~outside
    if real is not None:
        valid = valid & real[:, None]
    sx = jnp.where(_gt_e(0, sx), 0, sx)
    sy = jnp.where(_gt_e(0, sy), 0, sy)
    sx, sy = jnp.where(valid, sx, 0), jnp.where(valid, sy, 0)
    xl, yl = jnp.floor(sx), jnp.floor(sy)
    x_edge, y_edge = _gt_e(xl, w - 1), _gt_e(yl, h - 1)
    xl, yl = jnp.where(x_edge, w - 1, xl), jnp.where(y_edge, h - 1, yl)
    sx, sy = jnp.where(x_edge, xl, sx), jnp.where(y_edge, yl, sy)
    xh, yh = jnp.where(x_edge, xl, xl + 1), jnp.where(y_edge, yl, yl + 1)
    fx, fy = sx - xl, sy - yl
    corners_y = jnp.stack([yl, yh, yh, yl], -1).astype(jnp.int32)             # [R, P, 4]
    corners_x = jnp.stack([xl, xl, xh, xh], -1).astype(jnp.int32)
    weights = jnp.stack([(1 - fx) * (1 - fy), (1 - fx) * fy, fx * fy, fx * (1 - fy)], -1)
    base = (image[:, None, None] * c + jnp.arange(c)[None, :, None]) * (h * w)     # [R, C, 1]
    idx = base[..., None] + (corners_y * w + corners_x)[:, None]              # [R, C, P, 4]
    ok = valid[:, None, :, None]
    weights = jnp.where(ok, jnp.broadcast_to(weights[:, None], idx.shape), jnp.zeros((), dt))
    vals = jnp.take(x.reshape(-1), jnp.where(ok, idx, 0))
    out = (vals * weights).sum(-1).reshape(-1, c, th, tw)
    idx = jnp.where(ok, idx, -1).astype(jnp.int32).reshape(-1, 4)
    weights = weights.reshape(-1, 4)
    mask = valid.astype(jnp.int32).reshape(-1, 1, th, tw)
    if offsets is not None:
        count = offsets[0][-1].astype(jnp.int32) * (c * th * tw)
        elems = (jnp.stack([jnp.zeros((), jnp.int32), count]),)
        idx, weights = LoDValue(idx, elems), LoDValue(weights, elems)
    return {"Out": _finish(out, real, offsets), "Mask": _finish(mask, real, offsets),
            "TransformMatrix": _finish(m, real, offsets), "Out2InIdx": idx, "Out2InWeights": weights}


lod_aware("psroi_pool", "prroi_pool", "deformable_psroi_pooling", "roi_perspective_transform")
