"""Ops of Fluid 1.x programs that Paddle 2.6.2 still runs: the first versions of reshape,
transpose, flatten (flatten2), expand and the resize ops (nearest_interp, bilinear_interp), and
pad2d, fill_zeros_like, affine_channel, lrn, norm, label_smooth, shuffle_channel and roi_pool —
what models saved in Fluid's directory layout (``__model__`` + parameter files) use.

Each follows its Paddle 2.6.2 kernel; gradients are the vjp of the JAX rule.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ...ir.errors import OpRuntimeError
from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext, same_as
from ._shapes import prod
from .manipulation import reshape_target, static_ints


def _fail(ctx, message: str):
    raise OpRuntimeError(f"op {ctx.opdef.type!r}: {message}")


# -- reshape / transpose / flatten2 / expand -------------------------------------------------------
def _reshape_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    if ctx.input("Shape") is not None or ctx.inputs("ShapeTensor"):
        n = ctx.input("Shape").shape[0] if ctx.input("Shape") is not None else len(ctx.inputs("ShapeTensor"))
        ctx.set_output("Out", (-1,) * max(n, 0), x.dtype, 0)
        return
    ctx.set_output("Out", reshape_target(x.shape, ctx.attr("shape"), ctx.fail), x.dtype, 0)


@op("reshape", inputs="X Shape? ShapeTensor*?", outputs="Out", attrs={"shape": Attr("ints", [])},
    infer_shape=_reshape_shape, no_grad_inputs=["Shape", "ShapeTensor"])
def reshape(ctx):
    """Fluid 1.x's reshape (reshape2 without XShape): ``0`` copies X's dim, one ``-1`` is inferred;
    a Shape/ShapeTensor input, when its values are known at lowering, wins over the attribute."""
    x = ctx.input("X")
    shape = static_ints(ctx, "Shape", "ShapeTensor", what="the target shape")
    shape = reshape_target(x.shape, shape if shape is not None else ctx.attr("shape"), lambda m: _fail(ctx, m))
    return {"Out": x.reshape(shape)}


def _transpose_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    axis = [int(a) % max(x.ndim, 1) for a in ctx.attr("axis")]
    ctx.check(sorted(axis) == list(range(x.ndim)), f"axis {ctx.attr('axis')} is not a permutation of X's {x.ndim} dims")
    ctx.set_output("Out", tuple(x.shape[a] for a in axis), x.dtype, 0)


# data_format is one of Paddle's "extra" attributes, but its transpose_grad reads it.
@op("transpose", inputs="X", outputs="Out", attrs={"axis": Attr("ints", []), "data_format": "AnyLayout"},
    infer_shape=_transpose_shape)
def transpose(ctx):
    """Fluid 1.x's transpose (transpose2 without XShape): X's dims permuted by ``axis``."""
    x = ctx.input("X")
    return {"Out": jnp.transpose(x, [int(a) % x.ndim for a in ctx.attr("axis")])}


def _flatten_dims(shape, axis: int):
    return (prod(shape[:axis]) if axis else 1, prod(shape[axis:]))


def _flatten2_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    axis = ctx.attr("axis")
    ctx.check(0 <= axis <= x.ndim, f"axis {axis} must lie in [0, {x.ndim}]")
    ctx.set_output("Out", _flatten_dims(x.shape, axis), x.dtype, 0)
    ctx.set_output("XShape", (0, *x.shape), x.dtype, 0)


@op("flatten2", inputs="X", outputs="Out XShape", attrs={"axis": 1}, infer_shape=_flatten2_shape,
    no_grad_outputs=["XShape"])
def flatten2(ctx):
    """X as a matrix: the dims before ``axis`` make the rows, the rest the columns (Fluid 1.x's
    flatten; XShape carries X's shape, as in reshape2, and Paddle's flatten2_grad needs it)."""
    x = ctx.input("X")
    axis = int(ctx.attr("axis"))
    return {"Out": x.reshape(_flatten_dims(x.shape, axis)), "XShape": jnp.zeros((0, *x.shape), x.dtype)}


def _expand_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    if ctx.input("ExpandTimes") is not None or ctx.inputs("expand_times_tensor"):
        ctx.set_output("Out", (-1,) * x.ndim, x.dtype, x.lod_level)
        return
    times = [int(t) for t in ctx.attr("expand_times")]
    ctx.check(len(times) == x.ndim, f"expand_times {times} needs one value per dim of X {x.shape}")
    ctx.set_output("Out", tuple(d * t if d >= 0 else -1 for d, t in zip(x.shape, times)), x.dtype, x.lod_level)


@op("expand", inputs="X ExpandTimes? expand_times_tensor*?", outputs="Out", attrs={"expand_times": Attr("ints", [])},
    infer_shape=_expand_shape, no_grad_inputs=["ExpandTimes", "expand_times_tensor"])
def expand(ctx):
    """Fluid 1.x's expand: X tiled ``expand_times[i]`` times along each dim (tile with one value
    per dim)."""
    x = ctx.input("X")
    times = static_ints(ctx, "ExpandTimes", "expand_times_tensor", what="expand_times")
    times = [int(t) for t in (times if times is not None else ctx.attr("expand_times"))]
    if len(times) != x.ndim:
        _fail(ctx, f"expand_times {times} needs one value per dim of X {list(x.shape)}")
    return {"Out": jnp.tile(x, times)}


# -- padding, filling, per-channel affine ------------------------------------------------------------
_PAD2D_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge"}


def _pad2d_widths(x_ndim: int, pads, fmt: str):
    top, bottom, left, right = (int(p) for p in pads)
    if fmt == "NHWC":
        return [(0, 0), (top, bottom), (left, right), (0, 0)]
    return [(0, 0), (0, 0), (top, bottom), (left, right)]


def _pad2d_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.check(x.ndim == 4, f"X must be 4-D, got {x.shape}")
    ctx.check(ctx.attr("mode") in _PAD2D_MODES, f"mode must be one of {list(_PAD2D_MODES)}, got {ctx.attr('mode')!r}")
    if ctx.input("Paddings") is not None:
        shape = list(x.shape)
        for a in ((1, 2) if ctx.attr("data_format") == "NHWC" else (2, 3)):
            shape[a] = -1
        ctx.set_output("Out", shape, x.dtype, 0)
        return
    pads = list(ctx.attr("paddings"))
    ctx.check(len(pads) == 4, f"paddings needs [top, bottom, left, right], got {pads}")
    widths = _pad2d_widths(x.ndim, pads, ctx.attr("data_format"))
    ctx.set_output("Out", tuple(d + a + b if d >= 0 else -1 for d, (a, b) in zip(x.shape, widths)), x.dtype, 0)


@op("pad2d", inputs="X Paddings?", outputs="Out",
    attrs={"paddings": Attr("ints", [0, 0, 0, 0]), "pad_value": 0.0, "mode": "constant", "data_format": "NCHW"},
    infer_shape=_pad2d_shape, no_grad_inputs=["Paddings"])
def pad2d(ctx):
    """A 4-D X padded by ``paddings`` = [top, bottom, left, right]: ``mode`` constant
    (``pad_value``), reflect or edge."""
    x = ctx.input("X")
    pads = static_ints(ctx, "Paddings", what="paddings")
    widths = _pad2d_widths(x.ndim, pads if pads is not None else ctx.attr("paddings"), ctx.attr("data_format"))
    mode = _PAD2D_MODES[ctx.attr("mode")]
    if mode == "constant":
        return {"Out": jnp.pad(x, widths, constant_values=jnp.asarray(ctx.attr("pad_value"), x.dtype))}
    return {"Out": jnp.pad(x, widths, mode=mode)}


@op("fill_zeros_like", inputs="X", outputs="Out", infer_shape=same_as("X"), grad=None)
def fill_zeros_like(ctx):
    """Zeros of X's shape and dtype."""
    return {"Out": jnp.zeros_like(ctx.input("X"))}


def _affine_channel_shape(ctx: InferShapeContext) -> None:
    x, scale, bias = ctx.input("X"), ctx.input("Scale"), ctx.input("Bias")
    c = x.shape[-1] if ctx.attr("data_layout") == "NHWC" else x.shape[1]
    for name, t in (("Scale", scale), ("Bias", bias)):
        ctx.check(t.ndim == 1 and (c < 0 or t.shape[0] < 0 or t.shape[0] == c),
                  f"{name} must be [C] with C = {c}, got {t.shape}")
    ctx.set_output("Out", x.shape, x.dtype, x.lod_level)


@op("affine_channel", inputs="X Scale Bias", outputs="Out", attrs={"data_layout": "AnyLayout"},
    infer_shape=_affine_channel_shape)
def affine_channel(ctx):
    """X · Scale + Bias per channel (a frozen batch norm): channels on axis 1, or last for NHWC."""
    x, scale, bias = ctx.input("X"), ctx.input("Scale"), ctx.input("Bias")
    if ctx.attr("data_layout") == "NHWC":
        return {"Out": x * scale + bias}
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return {"Out": x * scale.reshape(shape) + bias.reshape(shape)}


# -- normalisation ---------------------------------------------------------------------------------
def _lrn_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.check(x.ndim == 4, f"X must be 4-D, got {x.shape}")
    ctx.check(ctx.attr("n") > 0, f"n must be positive, got {ctx.attr('n')}")
    ctx.set_output("Out", x.shape, x.dtype, 0)
    if ctx.has_output("MidOut"):
        ctx.set_output("MidOut", x.shape, x.dtype, 0)


@op("lrn", inputs="X", outputs="Out MidOut", attrs={"n": 5, "k": 2.0, "alpha": 1e-4, "beta": 0.75,
                                                    "data_format": "AnyLayout"},
    infer_shape=_lrn_shape, no_grad_outputs=["MidOut"])
def lrn(ctx):
    """Local response normalisation across channels: MidOut = k + alpha · Σ X² over the ``n``
    channels centred on each (zero beyond the ends), Out = X / MidOut^beta."""
    x = ctx.input("X")
    last = ctx.attr("data_format") == "NHWC"
    xc = jnp.moveaxis(x, 3, 1) if last else x
    n = int(ctx.attr("n"))
    before = (n - 1) // 2
    sq = jnp.pad(jnp.square(xc), [(0, 0), (before, n - 1 - before), (0, 0), (0, 0)])
    window = sum(sq[:, i:i + xc.shape[1]] for i in range(n))
    mid = jnp.asarray(ctx.attr("k"), x.dtype) + jnp.asarray(ctx.attr("alpha"), x.dtype) * window
    out = xc * jnp.power(mid, -jnp.asarray(ctx.attr("beta"), x.dtype))
    if last:
        out, mid = jnp.moveaxis(out, 1, 3), jnp.moveaxis(mid, 1, 3)
    return {"Out": out, "MidOut": mid}


def _norm_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    axis = ctx.attr("axis")
    ctx.check(-x.ndim <= axis < x.ndim, f"axis {axis} is out of range for a rank-{x.ndim} X")
    ctx.set_output("Out", x.shape, x.dtype, x.lod_level)
    shape = list(x.shape)
    shape[axis % x.ndim] = 1
    ctx.set_output("Norm", shape, x.dtype, 0)


@op("norm", inputs="X", outputs="Out Norm", attrs={"axis": 1, "epsilon": 1e-10, "is_test": False},
    infer_shape=_norm_shape, no_grad_outputs=["Norm"])
def norm(ctx):
    """L2 normalisation along ``axis``: Norm = sqrt(Σ X² + epsilon), Out = X / Norm (Norm is
    required: Paddle's kernel writes it)."""
    x = ctx.input("X")
    axis = int(ctx.attr("axis")) % x.ndim
    n = jnp.sqrt(jnp.sum(jnp.square(x), axis=axis, keepdims=True) + jnp.asarray(ctx.attr("epsilon"), x.dtype))
    return {"Out": x / n, "Norm": n}


@op("label_smooth", inputs="X PriorDist?", outputs="Out", attrs={"epsilon": 0.0}, infer_shape=same_as("X"),
    no_grad_inputs=["PriorDist"])
def label_smooth(ctx):
    """(1 - epsilon) · X + epsilon · PriorDist (or epsilon / classes, classes being X's last dim)."""
    x, prior = ctx.input("X"), ctx.input("PriorDist")
    eps = jnp.asarray(ctx.attr("epsilon"), x.dtype)
    other = prior.reshape(-1).astype(x.dtype) if prior is not None else 1.0 / x.shape[-1]
    return {"Out": (1 - eps) * x + eps * other}


@op("shuffle_channel", inputs="X", outputs="Out", attrs={"group": 1}, infer_shape=same_as("X"))
def shuffle_channel(ctx):
    """Fluid 1.x's channel shuffle of NCHW X: channels viewed as [group, C / group], transposed."""
    x = ctx.input("X")
    g = int(ctx.attr("group"))
    n, c = x.shape[:2]
    if c % g:
        _fail(ctx, f"X's {c} channels do not split into group={g}")
    return {"Out": x.reshape(n, g, c // g, *x.shape[2:]).swapaxes(1, 2).reshape(x.shape)}


# -- resizing, first version -----------------------------------------------------------------------
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
    from .vision import _linear_axis, _nearest_axis, _ratio

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
