"""Resampling images: the ``*_interp_v2`` resizes (linear, bilinear, trilinear, bicubic, nearest;
sizes from attributes or tensors) and Fluid 1.x's nearest_interp/bilinear_interp,
affine_grid/grid_sampler, and the sub-pixel rearrangements pixel_shuffle/pixel_unshuffle.

Tensor-valued sizes (``OutSize``, ``SizeTensor``, ``Scale`` of the ``*_interp_v2`` ops) change the
output's shape, and XLA compiles static shapes: their values must be known when the block is
lowered. A rule reads them when they are concrete (computed from static shapes and constants
before tracing); otherwise it falls back to the output shape the program declares (a program
whose sizes never change declares them), and failing that raises a clear error. A fed size
tensor is a run-time value inside ``jax.jit``: supporting it means making such feeds part of the
compile key, as a shape is (a job for the Executor; docs/ops_data_dependent.md, last section).
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir.errors import OpRuntimeError
from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext
from ._errors import _fail
from ._tensor_attrs import static_ints


def _static(ctx, slots, what: str, kind=int) -> list | None:
    """The values of tensor-input slots when concrete; None when the slots are empty; raises a
    :class:`OpRuntimeError` (``_NotStatic``) when a value is only known at run time."""
    values = [v for s in slots for v in ctx.inputs(s) if v is not None]
    if not values:
        return None
    out = []
    for v in values:
        if isinstance(v, jax.core.Tracer):
            raise _NotStatic(f"op {ctx.opdef.type!r}: {what} given as a tensor is only known at run time, but "
                             f"it sets the output's shape and XLA needs static shapes")
        out.extend(kind(i) for i in np.asarray(v).reshape(-1))
    return out


class _NotStatic(OpRuntimeError):
    """A shape-setting tensor whose value is not known while the block is lowered."""


# -- resizing ----------------------------------------------------------------------------------------
INTERP_ATTRS = {"data_layout": "NCHW", "out_d": 0, "out_h": 0, "out_w": 0, "scale": Attr("floats", []),
                "interp_method": "bilinear", "align_corners": True, "align_mode": 1}


_INTERP_RANK = {"linear_interp_v2": (3,), "bilinear_interp_v2": (4,), "bicubic_interp_v2": (4,),
                "trilinear_interp_v2": (5,), "nearest_interp_v2": (4, 5)}


_SIZE_ATTRS = {1: ("out_w",), 2: ("out_h", "out_w"), 3: ("out_d", "out_h", "out_w")}


def _channel_last(layout: str) -> bool:
    return layout in ("NHWC", "NDHWC", "NWC")


def interp_sizes(ctx, x_shape, tensors: bool = True):
    """(spatial input dims, output dims, per-dim scales or None) of a ``*_interp_v2`` op, Paddle's way:
    ``SizeTensor`` wins; else a scale (``Scale`` tensor, else the ``scale`` attribute) sets the size,
    which ``OutSize`` then overrides; else ``out_d``/``out_h``/``out_w``. The scale, when given,
    also sets the sampling ratio. ``tensors`` False (build time) makes tensor-given dims -1."""
    last = _channel_last(ctx.attr("data_layout"))
    spatial = list(x_shape[1:-1] if last else x_shape[2:])
    n = len(spatial)
    has = {s: bool([v for v in ctx.inputs(s) if v is not None]) for s in ("SizeTensor", "Scale", "OutSize")}
    if has["SizeTensor"]:
        sizes = _static(ctx, ["SizeTensor"], "SizeTensor") if tensors else None
        return spatial, (sizes if sizes is not None else [-1] * n), None
    scale = None
    if has["Scale"]:
        scale = _static(ctx, ["Scale"], "Scale", float) if tensors else None
        if scale is None:
            return spatial, [-1] * n, None
    else:
        scale = [float(s) for s in (ctx.attr("scale") or [])]
    if scale is not None and len(scale) == 1:
        scale = scale * n
    if scale and (len(scale) != n or not all(s > 0 for s in scale)):
        scale = None
    if scale:
        out = [int(np.float32(d) * np.float32(s)) if d >= 0 else -1 for d, s in zip(spatial, scale)]
    else:
        scale = None
        out = [int(ctx.attr(k) or 0) for k in _SIZE_ATTRS[n]]
    if has["OutSize"]:
        sizes = _static(ctx, ["OutSize"], "OutSize") if tensors else None
        out = sizes if sizes is not None else [-1] * n
    return spatial, out, scale


def interp_shape(ctx: InferShapeContext) -> None:
    """Shape rule of every ``*_interp_v2`` op (sizes from tensors are -1 at build time)."""
    x = ctx.input("X")
    ranks = _INTERP_RANK[ctx.op.type]
    ctx.check(x.ndim in ranks, f"X must be {' or '.join(f'{r}-D' for r in ranks)} ({ctx.attr('data_layout')}), "
                               f"got {x.shape}")
    _, out, _ = interp_sizes(ctx, x.shape, tensors=False)
    ctx.check(len(out) == x.ndim - 2, f"the output size needs {x.ndim - 2} values, got {out}")
    ctx.check(all(d > 0 or d == -1 for d in out),
              f"the output size must be positive: set {'/'.join(_SIZE_ATTRS[x.ndim - 2])} or a positive scale "
              f"(got {out})")
    last = _channel_last(ctx.attr("data_layout"))
    shape = (x.shape[0], *out, x.shape[-1]) if last else (*x.shape[:2], *out)
    ctx.set_output("Out", shape, x.dtype, x.lod_level)


def _ratio(in_size: int, out_size: int, scale, align_corners: bool) -> np.float32:
    if out_size <= 1:
        return np.float32(0.0)
    if align_corners:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(1.0 / scale) if scale is not None and scale > 0 else np.float32(in_size) / np.float32(out_size)


def _linear_axis(x, axis: int, n_in: int, n_out: int, ratio, align_corners: bool, align_mode: int):
    k = np.arange(n_out, dtype=np.float32)
    half_pixel = align_mode == 0 and not align_corners
    if half_pixel:
        src = np.maximum(ratio * (k + np.float32(0.5)) - np.float32(0.5), np.float32(0.0))
    else:
        src = ratio * k
    lo = np.minimum(np.maximum(src.astype(np.int64), 0), n_in - 1)
    hi = np.where(lo < n_in - 1, lo + 1, lo)
    frac = (src - lo.astype(np.float32)).astype(np.float32)
    shape = [1] * x.ndim
    shape[axis] = n_out
    w_hi = jnp.asarray(frac.reshape(shape), x.dtype)
    w_lo = jnp.asarray((np.float32(1.0) - frac).reshape(shape), x.dtype)
    return jnp.take(x, jnp.asarray(lo), axis=axis) * w_lo + jnp.take(x, jnp.asarray(hi), axis=axis) * w_hi


def _cubic_weights(t: np.ndarray, a: float = -0.75) -> np.ndarray:
    """Keys' cubic convolution weights (A = -0.75, Paddle's) of the 4 taps around fraction t."""
    def near(d):            # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):             # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=-1)


def _cubic_axis(x, axis: int, n_in: int, n_out: int, ratio, align_corners: bool):
    k = np.arange(n_out, dtype=np.float32)
    src = ratio * k if align_corners else ratio * (k + np.float32(0.5)) - np.float32(0.5)
    base = np.floor(src).astype(np.int64)
    t = (src - base).astype(np.float32)
    weights = _cubic_weights(t)                               # [n_out, 4]
    out = 0
    shape = [1] * x.ndim
    shape[axis] = n_out
    for tap in range(4):
        idx = np.clip(base - 1 + tap, 0, n_in - 1)
        out = out + jnp.take(x, jnp.asarray(idx), axis=axis) * jnp.asarray(weights[:, tap].reshape(shape), x.dtype)
    return out


def _nearest_axis(x, axis: int, n_in: int, n_out: int, ratio, align_corners: bool):
    k = np.arange(n_out, dtype=np.float32)
    src = (ratio * k + np.float32(0.5)) if align_corners else ratio * k
    idx = np.minimum(src.astype(np.int64), n_in - 1)
    return jnp.take(x, jnp.asarray(idx), axis=axis)


def resize(ctx, method: str):
    """The ``*_interp_v2`` JAX rule: ``method`` "linear" (bi-/trilinear too), "cubic" or "nearest",
    separably along each spatial axis."""
    x = ctx.input("X")
    try:
        spatial, out, scale = interp_sizes(ctx, x.shape)
    except _NotStatic as e:
        var = ctx.out_var("Out")
        declared = tuple(var.shape) if var is not None else ()
        last = _channel_last(ctx.attr("data_layout"))
        declared_spatial = list(declared[1:-1] if last else declared[2:])
        if len(declared_spatial) != x.ndim - 2 or any(d < 0 for d in declared_spatial):
            raise OpRuntimeError(f"{e}; feed the size as an attribute (out_h/out_w or scale), or compute it from "
                                 f"shapes and constants of the program") from None
        spatial, out, scale = list(x.shape[1:-1] if last else x.shape[2:]), declared_spatial, None
    if any(d <= 0 for d in out):
        _fail(ctx, f"the output size must be positive, got {out}")
    align_corners, align_mode = bool(ctx.attr("align_corners")), int(ctx.attr("align_mode"))
    first = 1 if _channel_last(ctx.attr("data_layout")) else 2
    for i, (n_in, n_out) in enumerate(zip(spatial, out)):
        axis = first + i
        ratio = _ratio(n_in, n_out, scale[i] if scale else None, align_corners)
        if method == "nearest":
            x = _nearest_axis(x, axis, n_in, n_out, ratio, align_corners)
        elif method == "cubic":
            x = _cubic_axis(x, axis, n_in, n_out, ratio, align_corners)
        else:
            x = _linear_axis(x, axis, n_in, n_out, ratio, align_corners, align_mode)
    return {"Out": x}


_INTERP_SLOTS = "X OutSize? SizeTensor*? Scale?"


_INTERP_NO_GRAD = ["OutSize", "SizeTensor", "Scale"]


@op("linear_interp_v2", inputs=_INTERP_SLOTS, outputs="Out", attrs=INTERP_ATTRS, infer_shape=interp_shape,
    no_grad_inputs=_INTERP_NO_GRAD)
def linear_interp_v2(ctx):
    """Linear resize of a 3-D X (NCW, or NWC written "NHWC" as Paddle does) to ``out_w`` (or width × ``scale``, or the OutSize /
    SizeTensor / Scale tensors); ``align_corners`` and ``align_mode`` as in bilinear_interp_v2."""
    return resize(ctx, "linear")


@op("bilinear_interp_v2", inputs=_INTERP_SLOTS, outputs="Out", attrs=INTERP_ATTRS, infer_shape=interp_shape,
    no_grad_inputs=_INTERP_NO_GRAD)
def bilinear_interp_v2(ctx):
    """Bilinear resize of a 4-D X to out_h × out_w (or input size × ``scale``).

    ``align_corners`` maps corner pixels onto corner pixels; otherwise ``align_mode`` 0 uses
    half-pixel centres and 1 maps output index i to input i·(in/out). The size may also come from
    the OutSize/SizeTensor/Scale tensors when their values are known at lowering (see ``resize``)."""
    return resize(ctx, "linear")


@op("trilinear_interp_v2", inputs=_INTERP_SLOTS, outputs="Out", attrs=INTERP_ATTRS, infer_shape=interp_shape,
    no_grad_inputs=_INTERP_NO_GRAD)
def trilinear_interp_v2(ctx):
    """Trilinear resize of a 5-D X (NCDHW or NDHWC) to out_d × out_h × out_w (or the input × scale,
    or the size tensors)."""
    return resize(ctx, "linear")


@op("bicubic_interp_v2", inputs=_INTERP_SLOTS, outputs="Out", attrs=INTERP_ATTRS, infer_shape=interp_shape,
    no_grad_inputs=_INTERP_NO_GRAD)
def bicubic_interp_v2(ctx):
    """Bicubic resize of a 4-D X (Keys' kernel, A = -0.75; edge pixels repeat): ``align_corners``
    maps corners onto corners, otherwise half-pixel centres (``align_mode`` is not used)."""
    return resize(ctx, "cubic")


@op("nearest_interp_v2", inputs=_INTERP_SLOTS, outputs="Out", attrs=INTERP_ATTRS, infer_shape=interp_shape,
    no_grad_inputs=_INTERP_NO_GRAD)
def nearest_interp_v2(ctx):
    """Nearest-neighbour resize of a 4-D or 5-D X (out_h, out_w / out_d, out_h, out_w, or ``scale``);
    ``align_corners`` rounds the source index instead of truncating it."""
    return resize(ctx, "nearest")


# -- resizing, first version (Fluid 1.x) -----------------------------------------------------------
_INTERP1_ATTRS = {"data_layout": "NCHW", "out_d": 0, "out_h": 0, "out_w": 0, "scale": 0.0,
                  "interp_method": "bilinear", "align_corners": True, "align_mode": 1}


def _interp1_sizes(ctx, x_shape, tensors: bool = True):
    """Fluid's first resize: SizeTensor, else OutSize, else ``scale`` (a float) × input, else
    out_h/out_w; the sampling ratio never uses the scale."""
    last = ctx.attr("data_layout") == "NHWC"
    spatial = list(x_shape[1:-1] if last else x_shape[2:])
    n = len(spatial)
    for slot in ("SizeTensor", "OutSize"):
        if [v for v in ctx.inputs(slot) if v is not None]:
            sizes = static_ints(ctx, slot, what=slot) if tensors else None
            return spatial, (sizes if sizes is not None else [-1] * n)
    scale = float(ctx.attr("scale") or 0)
    if scale > 0:
        return spatial, [int(np.float32(d) * np.float32(scale)) if d >= 0 else -1 for d in spatial]
    names = ("out_h", "out_w") if n == 2 else ("out_d", "out_h", "out_w")
    return spatial, [int(ctx.attr(k) or 0) for k in names]


def _interp1_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.check(x.ndim in (4, 5), f"X must be 4-D or 5-D, got {x.shape}")
    _, out = _interp1_sizes(ctx, x.shape, tensors=False)
    ctx.check(all(d > 0 or d == -1 for d in out), f"the output size must be positive (got {out})")
    last = ctx.attr("data_layout") == "NHWC"
    ctx.set_output("Out", (x.shape[0], *out, x.shape[-1]) if last else (*x.shape[:2], *out), x.dtype, x.lod_level)


def _interp1(ctx, method: str):
    x = ctx.input("X")
    spatial, out = _interp1_sizes(ctx, x.shape)
    if any(d <= 0 for d in out):
        _fail(ctx, f"the output size must be positive, got {out}")
    align_corners, align_mode = bool(ctx.attr("align_corners")), int(ctx.attr("align_mode"))
    first = 1 if ctx.attr("data_layout") == "NHWC" else 2
    for i, (n_in, n_out) in enumerate(zip(spatial, out)):
        ratio = _ratio(n_in, n_out, None, align_corners)
        if method == "nearest":
            x = _nearest_axis(x, first + i, n_in, n_out, ratio, align_corners)
        else:
            x = _linear_axis(x, first + i, n_in, n_out, ratio, align_corners, align_mode)
    return {"Out": x}


@op("nearest_interp", inputs="X OutSize? SizeTensor*? Scale?", outputs="Out", attrs=_INTERP1_ATTRS,
    infer_shape=_interp1_shape, no_grad_inputs=["OutSize", "SizeTensor", "Scale"])
def nearest_interp(ctx):
    """Fluid 1.x's nearest-neighbour resize (see nearest_interp_v2; ``scale`` is one float and
    the ratio is always in / out)."""
    return _interp1(ctx, "nearest")


@op("bilinear_interp", inputs="X OutSize? SizeTensor*? Scale?", outputs="Out", attrs=_INTERP1_ATTRS,
    infer_shape=_interp1_shape, no_grad_inputs=["OutSize", "SizeTensor", "Scale"])
def bilinear_interp(ctx):
    """Fluid 1.x's bilinear resize (see bilinear_interp_v2; ``scale`` is one float and the ratio is
    always in / out)."""
    return _interp1(ctx, "linear")


# -- affine_grid / grid_sampler --------------------------------------------------------------------
def _affine_out_shape(ctx, theta_ndim: int) -> list[int] | None:
    shape = _static(ctx, ["OutputShape"], "OutputShape") if ctx.input("OutputShape") is not None else None
    return shape if shape is not None else [int(d) for d in ctx.attr("output_shape")]


def _affine_grid_shape(ctx: InferShapeContext) -> None:
    theta = ctx.input("Theta")
    ctx.check(theta.ndim == 3 and theta.shape[1:] in ((2, 3), (3, 4), (-1, 3), (-1, 4), (2, -1), (3, -1)),
              f"Theta must be [N, 2, 3] or [N, 3, 4], got {theta.shape}")
    if ctx.input("OutputShape") is not None:
        n = ctx.input("OutputShape").shape[0] if ctx.input("OutputShape").ndim else -1
        spatial = [-1] * (n - 2 if n >= 4 else (2 if theta.shape[1] == 2 else 3))
    else:
        shape = list(ctx.attr("output_shape"))
        ctx.check(len(shape) in (4, 5), f"output_shape must be [N, C, H, W] or [N, C, D, H, W], got {shape}")
        spatial = shape[2:]
    ctx.set_output("Output", (theta.shape[0], *spatial, len(spatial)), theta.dtype, 0)


def _base_coords(n: int, align_corners: bool, dtype) -> np.ndarray:
    """n points in [-1, 1]: the ends themselves (align_corners), else the pixel centres."""
    if n <= 1:
        return np.zeros((max(n, 1),), dtype)
    base = np.linspace(-1.0, 1.0, n)
    if not align_corners:
        base = base * (n - 1) / n
    return base.astype(dtype)


@op("affine_grid", inputs="Theta OutputShape?", outputs="Output",
    attrs={"output_shape": Attr("ints", []), "align_corners": True}, infer_shape=_affine_grid_shape,
    no_grad_inputs=["OutputShape"])
def affine_grid(ctx):
    """The sampling grid of an affine transform: Output[n, h, w] = Theta[n] @ (x_w, y_h, 1) for the
    normalised coordinates of an output of ``output_shape`` [N, C, H, W] (3-D: [N, C, D, H, W] with
    Theta [N, 3, 4]); the grid grid_sampler takes."""
    theta = ctx.input("Theta")
    try:
        shape = _affine_out_shape(ctx, theta.ndim)
    except _NotStatic as e:
        var = ctx.out_var("Output")
        if var is None or any(d < 0 for d in var.shape[1:]):
            raise OpRuntimeError(f"{e}; give output_shape as the attribute") from None
        shape = [theta.shape[0], 1, *var.shape[1:-1]]
    align = bool(ctx.attr("align_corners"))
    dtype = np.dtype(theta.dtype)
    spatial = shape[2:]
    axes = [_base_coords(s, align, dtype) for s in spatial]          # (d,) h, w
    mesh = np.meshgrid(*axes, indexing="ij")
    # The homogeneous coordinate vector is (x, y[, z], 1): x runs along the last (width) axis.
    coords = np.stack(list(reversed(mesh)) + [np.ones_like(mesh[0])], axis=-1)   # [(D,) H, W, k+1]
    grid = jnp.einsum("...k,njk->n...j", jnp.asarray(coords, theta.dtype), theta)
    return {"Output": grid}


def _grid_sampler_shape(ctx: InferShapeContext) -> None:
    x, grid = ctx.input("X"), ctx.input("Grid")
    ctx.check(x.ndim in (4, 5), f"X must be 4-D or 5-D, got {x.shape}")
    ctx.check(grid.ndim == x.ndim and grid.shape[-1] in (x.ndim - 2, -1),
              f"Grid must be [N, H, W, 2] (or [N, D, H, W, 3] for a 5-D X), got {grid.shape}")
    ctx.check(ctx.attr("mode") in ("bilinear", "nearest"), f"mode must be 'bilinear' or 'nearest', got "
                                                           f"{ctx.attr('mode')!r}")
    ctx.check(ctx.attr("padding_mode") in ("zeros", "border", "reflection"),
              f"padding_mode must be 'zeros', 'border' or 'reflection', got {ctx.attr('padding_mode')!r}")
    n = x.shape[0] if x.shape[0] >= 0 else grid.shape[0]
    ctx.set_output("Output", (n, x.shape[1], *grid.shape[1:-1]), x.dtype, 0)


def _source_coords(g, size: int, align_corners: bool, padding_mode: str):
    """Paddle's grid_sample coordinates: unnormalise, then clip (border) or reflect (reflection)."""
    max_val = size - 1
    if align_corners:
        c = (g + 1) * (max_val * 0.5)
    else:
        c = (g + 1) * ((max_val + 1) * 0.5) - 0.5
    if padding_mode == "border":
        c = jnp.clip(c, 0, max_val)
    elif padding_mode == "reflection":
        if align_corners:
            span = max_val * 2
            if span == 0:
                return jnp.zeros_like(c)
            a = jnp.abs(c)
            extra = a - jnp.floor(a / span) * span
            c = jnp.minimum(extra, span - extra)
        else:
            span = (max_val + 1) * 2
            a = jnp.abs(c + 0.5)
            extra = a - jnp.floor(a / span) * span
            c = jnp.clip(jnp.minimum(extra, span - extra) - 0.5, 0, max_val)
    return c


@op("grid_sampler", inputs="X Grid", outputs="Output",
    attrs={"mode": "bilinear", "padding_mode": "zeros", "align_corners": True}, infer_shape=_grid_sampler_shape)
def grid_sampler(ctx):
    """Samples X [N, C, H, W] at the normalised (x, y) positions of Grid [N, Ho, Wo, 2] (-1 is the
    first pixel, 1 the last; 5-D X with Grid [..., 3] in 3-D): ``mode`` bilinear or nearest;
    ``padding_mode`` zeros (outside reads 0), border (clamped) or reflection."""
    x, grid = ctx.input("X"), ctx.input("Grid")
    align = bool(ctx.attr("align_corners"))
    padding = ctx.attr("padding_mode")
    spatial = x.shape[2:]                       # (D,) H, W
    k = len(spatial)
    # Grid's last axis is (x, y[, z]): coordinate j indexes spatial axis k - 1 - j.
    coords = [_source_coords(grid[..., k - 1 - i].astype(x.dtype), spatial[i], align, padding) for i in range(k)]
    batch = jnp.arange(x.shape[0]).reshape((-1,) + (1,) * (grid.ndim - 2))
    xt = jnp.moveaxis(x, 1, -1)                 # [N, (D,) H, W, C]

    def gather(idx):
        inside = jnp.ones(idx[0].shape, bool)
        clipped = []
        for i, c in enumerate(idx):
            inside = inside & (c >= 0) & (c <= spatial[i] - 1)
            clipped.append(jnp.clip(c, 0, spatial[i] - 1))
        vals = xt[(batch, *clipped)]
        return jnp.where(inside[..., None], vals, jnp.zeros((), x.dtype))

    if ctx.attr("mode") == "nearest":
        idx = [lax.round(c, lax.RoundingMethod.AWAY_FROM_ZERO).astype(jnp.int32) for c in coords]
        out = gather(idx)
    else:
        lows = [jnp.floor(c) for c in coords]
        out = 0
        for corner in itertools.product((0, 1), repeat=k):
            idx, weight = [], 1
            for i, bit in enumerate(corner):
                low = lows[i]
                frac = coords[i] - low
                idx.append((low + bit).astype(jnp.int32))
                weight = weight * (frac if bit else 1 - frac)
            out = out + gather(idx) * weight[..., None]
    return {"Output": jnp.moveaxis(out, -1, 1)}


# -- pixel_shuffle / pixel_unshuffle ---------------------------------------------------------------
def _pixel_shuffle_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    r = ctx.attr("upscale_factor")
    last = ctx.attr("data_format") == "NHWC"
    ctx.check(x.ndim == 4, f"X must be 4-D, got {x.shape}")
    ctx.check(r > 0, f"upscale_factor must be positive, got {r}")
    n, c, h, w = (x.shape[0], x.shape[3], x.shape[1], x.shape[2]) if last else x.shape
    ctx.check(c < 0 or c % (r * r) == 0, f"X's {c} channels are not divisible by upscale_factor² = {r * r}")
    oc = c // (r * r) if c >= 0 else -1
    oh, ow = (h * r if h >= 0 else -1), (w * r if w >= 0 else -1)
    ctx.set_output("Out", (n, oh, ow, oc) if last else (n, oc, oh, ow), x.dtype, 0)


@op("pixel_shuffle", inputs="X", outputs="Out", attrs={"upscale_factor": 1, "data_format": "NCHW"},
    infer_shape=_pixel_shuffle_shape)
def pixel_shuffle(ctx):
    """[N, C·r², H, W] -> [N, C, H·r, W·r]: each group of r² channels becomes an r × r block."""
    x = ctx.input("X")
    r = int(ctx.attr("upscale_factor"))
    if ctx.attr("data_format") == "NHWC":
        n, h, w, c = x.shape
        y = x.reshape(n, h, w, c // (r * r), r, r).transpose(0, 1, 4, 2, 5, 3)
        return {"Out": y.reshape(n, h * r, w * r, c // (r * r))}
    n, c, h, w = x.shape
    y = x.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3)
    return {"Out": y.reshape(n, c // (r * r), h * r, w * r)}


def _pixel_unshuffle_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    r = ctx.attr("downscale_factor")
    last = ctx.attr("data_format") == "NHWC"
    ctx.check(x.ndim == 4 and r > 0, f"X must be 4-D and downscale_factor positive, got {x.shape}, {r}")
    n, c, h, w = (x.shape[0], x.shape[3], x.shape[1], x.shape[2]) if last else x.shape
    ctx.check((h < 0 or h % r == 0) and (w < 0 or w % r == 0), f"X's {h} × {w} is not divisible by {r}")
    oc, oh, ow = (c * r * r if c >= 0 else -1), (h // r if h >= 0 else -1), (w // r if w >= 0 else -1)
    ctx.set_output("Out", (n, oh, ow, oc) if last else (n, oc, oh, ow), x.dtype, 0)


@op("pixel_unshuffle", inputs="X", outputs="Out", attrs={"downscale_factor": 1, "data_format": "NCHW"},
    infer_shape=_pixel_unshuffle_shape)
def pixel_unshuffle(ctx):
    """[N, C, H·r, W·r] -> [N, C·r², H, W], the inverse of pixel_shuffle."""
    x = ctx.input("X")
    r = int(ctx.attr("downscale_factor"))
    if ctx.attr("data_format") == "NHWC":
        n, h, w, c = x.shape
        y = x.reshape(n, h // r, r, w // r, r, c).transpose(0, 1, 3, 5, 2, 4)
        return {"Out": y.reshape(n, h // r, w // r, c * r * r)}
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // r, r, w // r, r).transpose(0, 1, 3, 5, 2, 4)
    return {"Out": y.reshape(n, c * r * r, h // r, w // r)}
