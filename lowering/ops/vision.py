"""Vision ops beyond 2-D convolution: pixel_shuffle, conv3d/pool3d, resizing (linear, bicubic,
trilinear; sizes from attributes or tensors), affine_grid/grid_sampler, and the detection ops
(roi_align, roi_pool, box_coder, prior_box, yolo_box, multiclass_nms3, matrix_nms,
generate_proposals_v2, distribute_fpn_proposals), deformable_conv(_v1).

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


def _fail(ctx, message: str):
    raise OpRuntimeError(f"op {ctx.opdef.type!r}: {message}")


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


# -- pixel_shuffle ---------------------------------------------------------------------------------
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


# -- conv3d / pool3d ---------------------------------------------------------------------------------
def _triple(values, name: str, n: int = 3) -> list[int]:
    values = [int(v) for v in values]
    if len(values) == 1:
        values = values * n
    if len(values) != n:
        raise ValueError(f"{name} needs {n} values, got {values}")
    return values


def _nd_padding(paddings, algorithm: str, in_sizes, ksize, strides, dilations):
    """Paddle's UpdatePaddingAndDilation for n spatial dims (conv.py's rule)."""
    from .conv import _resolve_padding

    return _resolve_padding(paddings, algorithm, in_sizes, ksize, strides, dilations)


def _layout3d(fmt: str) -> bool:
    """Whether a 3-D data_format is channel-last."""
    return fmt == "NDHWC"


def _spatial3d(shape, last: bool):
    return tuple(shape[1:4]) if last else tuple(shape[2:5])


def _image3d(n, c, dhw, last: bool):
    return (n, *dhw, c) if last else (n, c, *dhw)


def _check_3d_attrs(ctx: InferShapeContext) -> None:
    algo = ctx.attr("padding_algorithm")
    ctx.check(algo in ("EXPLICIT", "SAME", "VALID"),
              f"padding_algorithm must be 'EXPLICIT', 'SAME' or 'VALID', got {algo!r}")
    fmt = ctx.attr("data_format")
    ctx.check(fmt in ("NCDHW", "NDHWC", "AnyLayout"), f"data_format must be 'NCDHW' or 'NDHWC', got {fmt!r}")
    ctx.check(len(ctx.attr("paddings")) in (3, 6), f"paddings needs 3 or 6 values, got {ctx.attr('paddings')}")


def _conv3d_geometry(x_shape, w_shape, attrs):
    last = _layout3d(attrs["data_format"])
    strides = _triple(attrs["strides"], "strides")
    pads, dil = _nd_padding(attrs["paddings"], attrs["padding_algorithm"], _spatial3d(x_shape, last),
                            w_shape[2:], strides, _triple(attrs["dilations"], "dilations"))
    return last, strides, pads, dil


def _conv3d_shape(ctx: InferShapeContext) -> None:
    x, w = ctx.input("Input"), ctx.input("Filter")
    _check_3d_attrs(ctx)
    ctx.check(x.ndim == 5, f"Input must be 5-D ({ctx.attr('data_format')}), got {x.shape}")
    ctx.check(w.ndim == 5, f"Filter must be 5-D [out_c, in_c / groups, kd, kh, kw], got {w.shape}")
    ctx.check(x.dtype == w.dtype, f"Input is {x.dtype} but Filter is {w.dtype}")
    groups = ctx.attr("groups") or 1
    last, strides, pads, dil = _conv3d_geometry(x.shape, w.shape, {k: ctx.attr(k) for k in _CONV3D_ATTRS})
    c = x.shape[4] if last else x.shape[1]
    ctx.check(c < 0 or w.shape[1] < 0 or c == w.shape[1] * groups,
              f"Input has {c} channels but Filter {w.shape} expects {w.shape[1]} × groups={groups}")
    out = []
    for size, k, s, d, p in zip(_spatial3d(x.shape, last), w.shape[2:], strides, dil, pads):
        out.append(-1 if size < 0 or p[0] < 0 else (size + p[0] + p[1] - (d * (k - 1) + 1)) // s + 1)
    ctx.check(all(d > 0 or d == -1 for d in out), f"the output would be empty ({out})")
    ctx.set_output("Output", _image3d(x.shape[0], w.shape[0], out, last), x.dtype, 0)


_CONV3D_ATTRS = {"strides": Attr("ints", [1, 1, 1]), "paddings": Attr("ints", [0, 0, 0]),
                 "padding_algorithm": "EXPLICIT", "groups": 1, "dilations": Attr("ints", [1, 1, 1]),
                 "data_format": "NCDHW"}


@op("conv3d", inputs="Input Filter", outputs="Output", attrs=_CONV3D_ATTRS, infer_shape=_conv3d_shape)
def conv3d(ctx):
    """3-D convolution (cross-correlation) of Input [N, C, D, H, W] (or NDHWC) with Filter
    [out_c, in_c / groups, kd, kh, kw]; ``paddings`` holds 3 values or 6 (before/after per dim)."""
    x, w = ctx.input("Input"), ctx.input("Filter")
    last, strides, pads, dil = _conv3d_geometry(x.shape, w.shape, {k: ctx.attr(k) for k in _CONV3D_ATTRS})
    dims = ("NDHWC", "OIDHW", "NDHWC") if last else ("NCDHW", "OIDHW", "NCDHW")
    out = lax.conv_general_dilated(x, w, window_strides=strides, padding=pads, rhs_dilation=dil,
                                   dimension_numbers=dims, feature_group_count=ctx.attr("groups") or 1)
    return {"Output": out}


_POOL3D_NAMES = ("ksize", "strides", "paddings", "ceil_mode", "exclusive", "global_pooling", "adaptive",
                 "padding_algorithm")


def _pool3d_geometry(in_sizes, attrs):
    """(ksize, strides, pads, output sizes) of a pool3d (Paddle's pool2d rules in 3 dims)."""
    ksize = _triple(attrs["ksize"], "ksize")
    strides = _triple(attrs["strides"], "strides")
    paddings = attrs["paddings"]
    if attrs.get("global_pooling"):
        ksize = list(in_sizes)
        paddings = [0, 0, 0]
    if attrs.get("adaptive"):
        return ksize, strides, [(0, 0)] * 3, list(ksize)
    pads, _ = _nd_padding(paddings, attrs.get("padding_algorithm") or "EXPLICIT", in_sizes, ksize, strides,
                          [1, 1, 1])
    if attrs.get("global_pooling"):
        pads = [(0, 0)] * 3
    out = []
    for size, k, s, p in zip(in_sizes, ksize, strides, pads):
        if size < 0 or k < 0 or p[0] < 0:
            out.append(-1)
        elif attrs.get("ceil_mode"):
            out.append((size + p[0] + p[1] - k + s - 1) // s + 1)
        else:
            out.append((size + p[0] + p[1] - k) // s + 1)
    return ksize, strides, pads, out


def _pool3d_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    _check_3d_attrs(ctx)
    ctx.check(ctx.attr("pooling_type") in ("max", "avg"),
              f"pooling_type must be 'max' or 'avg', got {ctx.attr('pooling_type')!r}")
    ctx.check(x.ndim == 5, f"X must be 5-D ({ctx.attr('data_format')}), got {x.shape}")
    last = _layout3d(ctx.attr("data_format"))
    _, _, _, out = _pool3d_geometry(_spatial3d(x.shape, last), {k: ctx.attr(k) for k in _POOL3D_NAMES})
    ctx.check(all(d > 0 or d == -1 for d in out), f"the output would be empty ({out})")
    ctx.set_output("Out", _image3d(x.shape[0], x.shape[4] if last else x.shape[1], out, last), x.dtype, 0)


@op("pool3d", inputs="X", outputs="Out",
    attrs={"ksize": Attr("ints", [1, 1, 1]), "strides": Attr("ints", [1, 1, 1]), "paddings": Attr("ints", [0, 0, 0]),
           "ceil_mode": False, "exclusive": True, "data_format": "NCDHW", "pooling_type": "max",
           "global_pooling": False, "adaptive": False, "padding_algorithm": "EXPLICIT", "use_cudnn": False},
    infer_shape=_pool3d_shape)
def pool3d(ctx):
    """Max or average pooling over 3-D windows, with pool2d's rules (``global_pooling``,
    ``adaptive`` bins, ``ceil_mode``, ``exclusive`` averages)."""
    from .conv import _adaptive_pool, pool_windows

    x = ctx.input("X")
    last = _layout3d(ctx.attr("data_format"))
    kind = ctx.attr("pooling_type")
    axes = (1, 2, 3) if last else (2, 3, 4)
    in_sizes = _spatial3d(x.shape, last)
    ksize, strides, pads, out = _pool3d_geometry(in_sizes, {k: ctx.attr(k) for k in _POOL3D_NAMES})
    if ctx.attr("adaptive"):
        return {"Out": _adaptive_pool(x, axes, out, kind)}
    return {"Out": pool_windows(x, axes, in_sizes, ksize, strides, pads, out, kind, ctx.attr("exclusive"))}


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


# -- detection: roi_align ----------------------------------------------------------------------------
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


# -- detection: box_coder / prior_box / yolo_box ---------------------------------------------------
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
        ctx.set_output("OutputBox", (target.shape[0], prior.shape[0], 4), target.dtype, 0)
    else:
        ctx.check(target.ndim == 3 and target.shape[2] in (4, -1), f"TargetBox must be [N, M, 4], got {target.shape}")
        ctx.set_output("OutputBox", target.shape, target.dtype, 0)


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


# -- detection: NMS (data-dependent output sizes, docs/ops_data_dependent.md) -----------------------
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
    from .extra import ragged

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


# -- deformable convolution --------------------------------------------------------------------------
def _deform_geometry(ctx, x_shape, w_shape):
    strides = [int(v) for v in ctx.attr("strides")]
    paddings = [int(v) for v in ctx.attr("paddings")]
    dilations = [int(v) for v in ctx.attr("dilations")]
    out = [-1 if n < 0 else (n + 2 * p - (d * (k - 1) + 1)) // s + 1
           for n, k, s, p, d in zip(x_shape[2:], w_shape[2:], strides, paddings, dilations)]
    return strides, paddings, dilations, out


def _deform_shape(ctx: InferShapeContext) -> None:
    x, offset, w = ctx.input("Input"), ctx.input("Offset"), ctx.input("Filter")
    ctx.check(x.ndim == 4 and w.ndim == 4 and offset.ndim == 4,
              f"Input, Offset and Filter must be 4-D, got {x.shape}, {offset.shape}, {w.shape}")
    ctx.check(len(ctx.attr("strides")) == 2 and len(ctx.attr("paddings")) == 2 and len(ctx.attr("dilations")) == 2,
              "strides, paddings and dilations need 2 values each")
    groups, dg = ctx.attr("groups") or 1, ctx.attr("deformable_groups") or 1
    k = w.shape[2] * w.shape[3] if min(w.shape[2:]) >= 0 else -1
    ctx.check(offset.shape[1] < 0 or k < 0 or offset.shape[1] == 2 * dg * k,
              f"Offset has {offset.shape[1]} channels; 2 × deformable_groups {dg} × kernel {k} = {2 * dg * k} expected")
    ctx.check(x.shape[1] < 0 or w.shape[1] < 0 or x.shape[1] == w.shape[1] * groups,
              f"Input has {x.shape[1]} channels but Filter {w.shape} expects {w.shape[1]} × groups={groups}")
    _, _, _, out = _deform_geometry(ctx, x.shape, w.shape)
    ctx.check(all(o > 0 or o == -1 for o in out), f"the output would be empty ({out})")
    ctx.set_output("Output", (x.shape[0], w.shape[0], *out), x.dtype, 0)


def _deformable_conv(ctx, mask):
    """Deformable convolution (v2 with ``mask``, v1 without), Paddle's sampling rules."""
    x, offset, w = ctx.input("Input"), ctx.input("Offset"), ctx.input("Filter")
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    groups, dg = int(ctx.attr("groups") or 1), int(ctx.attr("deformable_groups") or 1)
    (sh, sw), (ph, pw), (dh, dw), (oh, ow) = _deform_geometry(ctx, x.shape, w.shape)
    k = kh * kw
    off = offset.reshape(n, dg, k, 2, oh, ow).astype(x.dtype)
    ki, kj = np.divmod(np.arange(k), kw)
    base_h = (np.arange(oh)[None, :, None] * sh - ph + ki[:, None, None] * dh).astype(np.float64)   # [K, Ho, 1]
    base_w = (np.arange(ow)[None, None, :] * sw - pw + kj[:, None, None] * dw).astype(np.float64)   # [K, 1, Wo]
    ys = jnp.asarray(base_h, x.dtype)[None, None] + off[:, :, :, 0]                                  # [N, dg, K, Ho, Wo]
    xs = jnp.asarray(base_w, x.dtype)[None, None] + off[:, :, :, 1]
    inside = (ys > -1) & (xs > -1) & (ys < h) & (xs < wd)
    y0, x0 = jnp.floor(ys), jnp.floor(xs)
    ly, lx = ys - y0, xs - x0
    y0, x0 = y0.astype(jnp.int32), x0.astype(jnp.int32)
    planes = x.reshape(n, dg, c // dg, h * wd)
    cols = 0
    for dy, dx, weight in ((0, 0, (1 - ly) * (1 - lx)), (0, 1, (1 - ly) * lx), (1, 0, ly * (1 - lx)), (1, 1, ly * lx)):
        yy, xx = y0 + dy, x0 + dx
        ok = inside & (yy >= 0) & (yy <= h - 1) & (xx >= 0) & (xx <= wd - 1)
        flat = (jnp.clip(yy, 0, h - 1) * wd + jnp.clip(xx, 0, wd - 1)).reshape(n, dg, 1, -1)
        vals = jnp.take_along_axis(planes, jnp.broadcast_to(flat, (n, dg, c // dg, flat.shape[-1])), axis=3)
        cols = cols + vals * jnp.where(ok, weight, 0).reshape(n, dg, 1, -1)
    cols = cols.reshape(n, dg, c // dg, k, oh, ow)
    if mask is not None:
        cols = cols * mask.reshape(n, dg, 1, k, oh, ow).astype(x.dtype)
    cols = cols.reshape(n, groups, c // groups, k, oh, ow)
    kernel = w.reshape(groups, o // groups, c // groups, k)
    out = jnp.einsum("ngckhw,gock->ngohw", cols, kernel)
    return {"Output": out.reshape(n, o, oh, ow)}


_DEFORM_ATTRS = {"strides": Attr("ints", [1, 1]), "paddings": Attr("ints", [0, 0]), "dilations": Attr("ints", [1, 1]),
                 "deformable_groups": 1, "groups": 1, "im2col_step": 64}


@op("deformable_conv", inputs="Input Offset Filter Mask", outputs="Output", attrs=_DEFORM_ATTRS,
    infer_shape=_deform_shape)
def deformable_conv(ctx):
    """Deformable convolution v2 (``paddle.vision.ops.deform_conv2d`` with a mask): each kernel tap
    samples Input bilinearly at its grid position plus a learned Offset [N, 2·dg·kh·kw, Ho, Wo]
    (dy, dx per tap; zero outside the image), scaled by Mask [N, dg·kh·kw, Ho, Wo]; the channels
    split into ``deformable_groups`` that share offsets, and into ``groups`` for the filter."""
    return _deformable_conv(ctx, ctx.input("Mask"))


@op("deformable_conv_v1", inputs="Input Offset Filter", outputs="Output", attrs=_DEFORM_ATTRS,
    infer_shape=_deform_shape)
def deformable_conv_v1(ctx):
    """Deformable convolution v1: deformable_conv without the modulation mask."""
    return _deformable_conv(ctx, None)


# -- detection: generate_proposals_v2 ----------------------------------------------------------------
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
    from .extra import ragged

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
        order = jnp.argsort(-sc, stable=True)[:k]
        sc, dl, an, var = sc[order], dl[order], anchors[order], variances[order]
        aw, ah = an[:, 2] - an[:, 0] + offset, an[:, 3] - an[:, 1] + offset
        acx, acy = an[:, 0] + 0.5 * aw, an[:, 1] + 0.5 * ah
        cx, cy = var[:, 0] * dl[:, 0] * aw + acx, var[:, 1] * dl[:, 1] * ah + acy
        bw = jnp.exp(jnp.minimum(var[:, 2] * dl[:, 2], _BBOX_CLIP)) * aw
        bh = jnp.exp(jnp.minimum(var[:, 3] * dl[:, 3], _BBOX_CLIP)) * ah
        im_h, im_w = size[0].astype(dtype), size[1].astype(dtype)
        x1 = jnp.clip(cx - bw / 2, 0, im_w - offset)
        y1 = jnp.clip(cy - bh / 2, 0, im_h - offset)
        x2 = jnp.clip(cx + bw / 2 - offset, 0, im_w - offset)
        y2 = jnp.clip(cy + bh / 2 - offset, 0, im_h - offset)
        boxes = jnp.stack([x1, y1, x2, y2], axis=-1)
        ws, hs = x2 - x1 + offset, y2 - y1 + offset
        keep = (ws >= min_size) & (hs >= min_size)
        if offset:
            keep = keep & (x1 + ws / 2 <= im_w) & (y1 + hs / 2 <= im_h)
        if thr > 0:
            keep = _greedy_keep(_iou_matrix(boxes, not offset), keep, jnp.asarray(thr, dtype), eta)
        if post > 0:
            keep = keep & (jnp.cumsum(keep) <= post)
        none = ~jnp.any(keep)
        first = jnp.arange(k) == 0
        keep = jnp.where(none, first, keep)
        rows = jnp.concatenate([boxes, sc[:, None].astype(dtype)], axis=-1)
        rows = jnp.where(none, jnp.zeros_like(rows), rows)
        take = jnp.argsort(~keep, stable=True)[:capacity]
        return rows[take], keep[take]

    rows, selected = jax.vmap(one_image)(scores, deltas, im)
    packed, counts = _pack_rows(rows, selected, capacity)
    total = jnp.sum(counts)
    out = {"RpnRois": ragged(packed[:, :4], total), "RpnRoiProbs": ragged(packed[:, 4:].astype(scores.dtype), total)}
    if ctx.has_output("RpnRoisNum"):
        out["RpnRoisNum"] = counts
    return out


# -- detection: distribute_fpn_proposals -------------------------------------------------------------
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
    from .extra import ragged

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


# -- detection: roi_pool -----------------------------------------------------------------------------
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
