"""Ops of ``paddle.nn`` layers beyond the core families: channel_shuffle, pixel_unshuffle,
maxout, max pooling with indices (``return_mask`` / AdaptiveMaxPool), unfold/fold, crop_tensor,
rrelu (inference), depthwise_conv2d_transpose and conv3d_transpose.

Each follows its Paddle 2.6.2 kernel; gradients are the vjp of the JAX rule.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir.errors import OpRuntimeError
from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext, same_as
from .conv import _conv_transpose_shape, conv2d_transpose


def _fail(ctx, message: str):
    raise OpRuntimeError(f"op {ctx.opdef.type!r}: {message}")


# -- channel rearrangements ------------------------------------------------------------------------
def _channel_shuffle_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    g = ctx.attr("groups")
    ctx.check(x.ndim == 4, f"X must be 4-D, got {x.shape}")
    c = x.shape[3] if ctx.attr("data_format") == "NHWC" else x.shape[1]
    ctx.check(g > 0 and (c < 0 or c % g == 0), f"X's {c} channels do not split into groups={g}")
    ctx.set_output("Out", x.shape, x.dtype, 0)


@op("channel_shuffle", inputs="X", outputs="Out", attrs={"groups": 1, "data_format": "NCHW"},
    infer_shape=_channel_shuffle_shape)
def channel_shuffle(ctx):
    """Channels viewed as [groups, C / groups] and transposed (ShuffleNet's shuffle)."""
    x = ctx.input("X")
    g = int(ctx.attr("groups"))
    if ctx.attr("data_format") == "NHWC":
        n, h, w, c = x.shape
        return {"Out": x.reshape(n, h, w, g, c // g).transpose(0, 1, 2, 4, 3).reshape(n, h, w, c)}
    n, c, h, w = x.shape
    return {"Out": x.reshape(n, g, c // g, h, w).transpose(0, 2, 1, 3, 4).reshape(n, c, h, w)}


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


def _maxout_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    g, axis = ctx.attr("groups"), ctx.attr("axis")
    ctx.check(x.ndim == 4 and axis in (1, 3, -1), f"X must be 4-D with axis 1 or 3, got {x.shape}, axis {axis}")
    axis %= 4
    ctx.check(g > 0 and (x.shape[axis] < 0 or x.shape[axis] % g == 0),
              f"X's {x.shape[axis]} channels do not split into groups={g}")
    shape = list(x.shape)
    shape[axis] = shape[axis] // g if shape[axis] >= 0 else -1
    ctx.set_output("Out", shape, x.dtype, 0)


@op("maxout", inputs="X", outputs="Out", attrs={"groups": 1, "axis": 1}, infer_shape=_maxout_shape)
def maxout(ctx):
    """The maximum of each run of ``groups`` consecutive channels (along ``axis``)."""
    x = ctx.input("X")
    g, axis = int(ctx.attr("groups")), int(ctx.attr("axis")) % 4
    shape = x.shape[:axis] + (x.shape[axis] // g, g) + x.shape[axis + 1:]
    return {"Out": jnp.max(x.reshape(shape), axis=axis + 1)}


@op("rrelu", inputs="X", outputs="Out Noise", attrs={"is_test": False, "lower": 0.125, "upper": 0.3333333432674408},
    infer_shape=same_as("X"), no_grad_outputs=["Noise"])
def rrelu(ctx):
    """Randomised leaky ReLU at inference (``is_test``): X where X >= 0, else X · (lower + upper) / 2.
    Training mode draws a slope per element; it is not supported here (saved models run is_test).
    Noise (the slope of each element) is required, as Paddle's gradient kernel reads it."""
    x = ctx.input("X")
    if not ctx.attr("is_test"):
        _fail(ctx, "the training form (random slopes) is not supported; run the program with is_test=True")
    slope = jnp.asarray((float(ctx.attr("lower")) + float(ctx.attr("upper"))) / 2, x.dtype)
    return {"Out": jnp.where(x >= 0, x, x * slope), "Noise": jnp.where(x >= 0, jnp.ones((), x.dtype), slope)}


# -- pooling with indices ----------------------------------------------------------------------------
def _window_table(size: int, k: int, s: int, p: int, out: int, adaptive: bool):
    """[out, kmax] input positions of each output's window along one axis (-1: none)."""
    rows = []
    for i in range(out):
        if adaptive:
            start, end = (i * size) // out, -((-(i + 1) * size) // out)
        else:
            start = i * s - p
            end = min(start + k, size)
            start = max(start, 0)
        rows.append(list(range(start, end)))
    width = max(1, max(len(r) for r in rows))
    return np.array([r + [-1] * (width - len(r)) for r in rows], np.int64)


def _pool_with_index_geometry(spatial, attrs, n: int):
    ksize = [int(k) for k in attrs["ksize"]]
    strides = [int(s) for s in attrs["strides"]]
    paddings = [int(p) for p in attrs["paddings"]]
    if attrs.get("global_pooling"):
        ksize, paddings = list(spatial), [0] * n
    if attrs.get("adaptive"):
        return ksize, strides, [0] * n, list(ksize)
    if len(paddings) == 2 * n:
        paddings = paddings[::2]
    out = [-1 if d < 0 else (d + 2 * p - k) // s + 1 for d, k, s, p in zip(spatial, ksize, strides, paddings)]
    return ksize, strides, paddings, out


_POOL_INDEX_NAMES = ("ksize", "strides", "paddings", "global_pooling", "adaptive")


def _pool_with_index_shape(ctx: InferShapeContext, n: int) -> None:
    x = ctx.input("X")
    ctx.check(x.ndim == n + 2, f"X must be {n + 2}-D (channels first), got {x.shape}")
    _, _, _, out = _pool_with_index_geometry(x.shape[2:], {k: ctx.attr(k) for k in _POOL_INDEX_NAMES}, n)
    ctx.check(all(d > 0 or d == -1 for d in out), f"the output would be empty ({out})")
    ctx.set_output("Out", (*x.shape[:2], *out), x.dtype, 0)
    ctx.set_output("Mask", (*x.shape[:2], *out), "int32", 0)


def _pool_with_index(ctx, n: int):
    x = ctx.input("X")
    spatial = x.shape[2:]
    ksize, strides, pads, out = _pool_with_index_geometry(spatial, {k: ctx.attr(k) for k in _POOL_INDEX_NAMES}, n)
    adaptive = bool(ctx.attr("adaptive"))
    tables = [_window_table(d, k, s, p, o, adaptive) for d, k, s, p, o in zip(spatial, ksize, strides, pads, out)]
    # Every (output position, window offset) pair, as flat input positions (-1 outside).
    grids = np.meshgrid(*[np.arange(o) for o in out], indexing="ij")
    offsets = np.meshgrid(*[np.arange(t.shape[1]) for t in tables], indexing="ij")
    flat = np.zeros(tuple(out) + offsets[0].shape, np.int64)
    valid = np.ones_like(flat, bool)
    for axis, table in enumerate(tables):
        pos = table[grids[axis].reshape(grids[axis].shape + (1,) * n), offsets[axis]]
        valid &= pos >= 0
        flat = flat * spatial[axis] + np.maximum(pos, 0)
    flat = flat.reshape(tuple(out) + (-1,))
    valid = valid.reshape(flat.shape)
    plane = x.reshape(x.shape[:2] + (-1,))
    vals = jnp.take(plane, jnp.asarray(flat.reshape(-1)), axis=2).reshape(x.shape[:2] + flat.shape)
    vals = jnp.where(jnp.asarray(valid), vals, jnp.asarray(-jnp.inf, x.dtype))
    # The first maximum of each window (Paddle's strict > scan), and the gradient goes to it alone.
    best = jnp.argmax(vals, axis=-1)
    result = jnp.take_along_axis(vals, best[..., None], axis=-1)[..., 0]
    mask = jnp.take_along_axis(jnp.broadcast_to(jnp.asarray(flat), vals.shape), best[..., None], axis=-1)[..., 0]
    return {"Out": result, "Mask": mask.astype(jnp.int32)}


_POOL_INDEX_ATTRS2 = {"ksize": Attr("ints", [1, 1]), "strides": Attr("ints", [1, 1]), "paddings": Attr("ints", [0, 0]),
                      "global_pooling": False, "adaptive": False}
_POOL_INDEX_ATTRS3 = {"ksize": Attr("ints", [1, 1, 1]), "strides": Attr("ints", [1, 1, 1]),
                      "paddings": Attr("ints", [0, 0, 0]), "global_pooling": False, "adaptive": False}


@op("max_pool2d_with_index", inputs="X", outputs="Out Mask", attrs=_POOL_INDEX_ATTRS2,
    infer_shape=lambda ctx: _pool_with_index_shape(ctx, 2), no_grad_outputs=["Mask"])
def max_pool2d_with_index(ctx):
    """Max pooling of NCHW X that also returns, per output, the position (h·W + w) of its maximum
    in the input plane (Mask, int32); ``adaptive`` makes ``ksize`` the output size."""
    return _pool_with_index(ctx, 2)


@op("max_pool3d_with_index", inputs="X", outputs="Out Mask", attrs=_POOL_INDEX_ATTRS3,
    infer_shape=lambda ctx: _pool_with_index_shape(ctx, 3), no_grad_outputs=["Mask"])
def max_pool3d_with_index(ctx):
    """max_pool2d_with_index over NCDHW X (Mask holds d·H·W + h·W + w)."""
    return _pool_with_index(ctx, 3)


# -- unfold ----------------------------------------------------------------------------------------
def _unfold_geometry(ctx, spatial):
    k = [int(v) for v in ctx.attr("kernel_sizes")]
    s = [int(v) for v in ctx.attr("strides")]
    d = [int(v) for v in ctx.attr("dilations")]
    p = [int(v) for v in ctx.attr("paddings")]
    if len(p) == 2:
        p = [p[0], p[1], p[0], p[1]]
    pads = [(p[0], p[2]), (p[1], p[3])]            # [top, left, bottom, right]
    out = [-1 if n < 0 else (n + lo + hi - (dd * (kk - 1) + 1)) // ss + 1
           for n, kk, ss, dd, (lo, hi) in zip(spatial, k, s, d, pads)]
    return k, s, d, pads, out


def _unfold_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.check(x.ndim == 4, f"X must be 4-D [N, C, H, W], got {x.shape}")
    k, _, _, _, out = _unfold_geometry(ctx, x.shape[2:])
    ctx.check(all(o > 0 or o == -1 for o in out), f"the sliding blocks would be empty ({out})")
    blocks = out[0] * out[1] if min(out) >= 0 else -1
    ctx.set_output("Y", (x.shape[0], x.shape[1] * k[0] * k[1] if x.shape[1] >= 0 else -1, blocks), x.dtype, 0)


@op("unfold", inputs="X", outputs="Y",
    attrs={"kernel_sizes": Attr("ints", []), "strides": Attr("ints", [1, 1]), "paddings": Attr("ints", [0, 0, 0, 0]),
           "dilations": Attr("ints", [1, 1])},
    infer_shape=_unfold_shape)
def unfold(ctx):
    """im2col: the sliding kernel_sizes blocks of X as columns, [N, C·kh·kw, blocks] (channel-major,
    then kernel row, then column); ``paddings`` is [top, left, bottom, right] (or [h, w])."""
    x = ctx.input("X")
    k, s, d, pads, out = _unfold_geometry(ctx, x.shape[2:])
    patches = lax.conv_general_dilated_patches(x, filter_shape=k, window_strides=s, padding=pads, rhs_dilation=d,
                                               dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return {"Y": patches.reshape(x.shape[0], patches.shape[1], -1)}


# -- transposed convolutions -----------------------------------------------------------------------
op("depthwise_conv2d_transpose", inputs="Input Filter", outputs="Output",
   attrs={"strides": Attr("ints", [1, 1]), "paddings": Attr("ints", [0, 0]), "output_padding": Attr("ints", []),
          "output_size": Attr("ints", []), "padding_algorithm": "EXPLICIT", "groups": 1,
          "dilations": Attr("ints", [1, 1]), "data_format": "NCHW"},
   infer_shape=_conv_transpose_shape)(conv2d_transpose)


def _conv3d_transpose_geometry(x_shape, w_shape, attrs):
    from .vision import _layout3d, _nd_padding, _spatial3d, _triple

    last = _layout3d(attrs["data_format"])
    strides = _triple(attrs["strides"], "strides")
    in_sizes = _spatial3d(x_shape, last)
    ksize = w_shape[2:]
    pads, dil = _nd_padding(attrs["paddings"], attrs["padding_algorithm"], in_sizes, ksize, strides,
                            _triple(attrs["dilations"], "dilations"))
    natural = [-1 if n < 0 or p[0] < 0 else (n - 1) * s - p[0] - p[1] + d * (k - 1) + 1
               for n, k, s, d, p in zip(in_sizes, ksize, strides, dil, pads)]
    if attrs.get("output_size"):
        out = _triple(attrs["output_size"], "output_size")
    elif attrs.get("output_padding"):
        out = [n + e if n >= 0 else -1 for n, e in zip(natural, _triple(attrs["output_padding"], "output_padding"))]
    else:
        out = natural
    return last, strides, pads, dil, out, natural


_CONV3DT_ATTRS = {"strides": Attr("ints", [1, 1, 1]), "paddings": Attr("ints", [0, 0, 0]),
                  "output_padding": Attr("ints", []), "output_size": Attr("ints", []), "padding_algorithm": "EXPLICIT",
                  "groups": 1, "dilations": Attr("ints", [1, 1, 1]), "data_format": "NCDHW"}


def _conv3d_transpose_shape(ctx: InferShapeContext) -> None:
    x, w = ctx.input("Input"), ctx.input("Filter")
    ctx.check(x.ndim == 5 and w.ndim == 5, f"Input and Filter must be 5-D, got {x.shape} and {w.shape}")
    ctx.check(x.dtype == w.dtype, f"Input is {x.dtype} but Filter is {w.dtype}")
    groups = ctx.attr("groups") or 1
    last, strides, _, _, out, natural = _conv3d_transpose_geometry(x.shape, w.shape,
                                                                   {k: ctx.attr(k) for k in _CONV3DT_ATTRS})
    c = x.shape[4] if last else x.shape[1]
    ctx.check(c < 0 or w.shape[0] < 0 or c == w.shape[0], f"Input has {c} channels but Filter {w.shape} expects "
                                                          f"{w.shape[0]}")
    for o, n, s in zip(out, natural, strides):
        if o >= 0 and n >= 0:
            ctx.check(n <= o < n + s, f"output size {out} must lie in [{natural}, {natural} + strides {strides})")
    oc = w.shape[1] * groups if w.shape[1] >= 0 else -1
    ctx.set_output("Output", (x.shape[0], *out, oc) if last else (x.shape[0], oc, *out), x.dtype, 0)


@op("conv3d_transpose", inputs="Input Filter", outputs="Output", attrs=_CONV3DT_ATTRS,
    infer_shape=_conv3d_transpose_shape)
def conv3d_transpose(ctx):
    """The transpose of conv3d: Filter is [in_c, out_c / groups, kd, kh, kw]; the output is
    (in - 1)·stride - pads + dilation·(k - 1) + 1 per dim, or ``output_size``, or that plus
    ``output_padding``."""
    x, w = ctx.input("Input"), ctx.input("Filter")
    groups = ctx.attr("groups") or 1
    last, strides, pads, dil, out, _ = _conv3d_transpose_geometry(x.shape, w.shape,
                                                                  {k: ctx.attr(k) for k in _CONV3DT_ATTRS})
    c_in, c_out_g = w.shape[:2]
    ks = w.shape[2:]
    kernel = w.reshape(groups, c_in // groups, c_out_g, *ks).transpose(0, 2, 1, 3, 4, 5)
    kernel = kernel.reshape(groups * c_out_g, c_in // groups, *ks)[:, :, ::-1, ::-1, ::-1]
    spatial = x.shape[1:4] if last else x.shape[2:]
    padding = []
    for size, k, s, d, p, o in zip(spatial, ks, strides, dil, pads, out):
        lo = d * (k - 1) - p[0]
        padding.append((lo, o - 1 - (size - 1) * s - lo + d * (k - 1)))
    dims = ("NDHWC", "OIDHW", "NDHWC") if last else ("NCDHW", "OIDHW", "NCDHW")
    y = lax.conv_general_dilated(x, kernel, window_strides=(1, 1, 1), padding=padding, lhs_dilation=strides,
                                 rhs_dilation=dil, dimension_numbers=dims, feature_group_count=groups)
    return {"Output": y}


def _fold_geometry(ctx):
    out_hw = [int(v) for v in ctx.attr("output_sizes")]
    k = [int(v) for v in ctx.attr("kernel_sizes")]
    s = [int(v) for v in ctx.attr("strides")]
    d = [int(v) for v in ctx.attr("dilations")]
    p = [int(v) for v in ctx.attr("paddings")]
    # paddings is [top, left, bottom, right], but Paddle's fold only runs with bottom = top and
    # right = left (its shape rule pads 2·top and 2·left): both sides take paddings[0] / [1].
    pads = [(p[0], p[0]), (p[1], p[1])]
    blocks = [(n + lo + hi - (dd * (kk - 1) + 1)) // ss + 1 for n, kk, ss, dd, (lo, hi) in zip(out_hw, k, s, d, pads)]
    return out_hw, k, s, d, pads, blocks


def _fold_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.check(x.ndim == 3, f"X must be 3-D [N, C·kh·kw, blocks], got {x.shape}")
    out_hw, k, _, _, _, blocks = _fold_geometry(ctx)
    ctx.check(min(blocks) > 0, f"output_sizes {out_hw} give no sliding blocks")
    ctx.check(x.shape[1] < 0 or x.shape[1] % (k[0] * k[1]) == 0,
              f"X's {x.shape[1]} rows are not a multiple of the kernel's {k[0] * k[1]} positions")
    ctx.check(x.shape[2] < 0 or x.shape[2] == blocks[0] * blocks[1],
              f"X has {x.shape[2]} blocks but output_sizes {out_hw} give {blocks[0] * blocks[1]}")
    c = x.shape[1] // (k[0] * k[1]) if x.shape[1] >= 0 else -1
    ctx.set_output("Y", (x.shape[0], c, *out_hw), x.dtype, 0)


@op("fold", inputs="X", outputs="Y",
    attrs={"output_sizes": Attr("ints", []), "kernel_sizes": Attr("ints", []), "strides": Attr("ints", [1, 1]),
           "paddings": Attr("ints", [0, 0, 0, 0]), "dilations": Attr("ints", [1, 1])},
    infer_shape=_fold_shape)
def fold(ctx):
    """col2im, the transpose of unfold: the columns [N, C·kh·kw, blocks] summed back into an image
    of ``output_sizes`` (overlapping positions add up); ``paddings[0]``/``[1]`` pad the height and
    width on both sides, as Paddle's kernel does."""
    x = ctx.input("X")
    out_hw, k, s, d, pads, blocks = _fold_geometry(ctx)
    n, ckk, _ = x.shape
    c = ckk // (k[0] * k[1])

    def unfold_image(img):
        patches = lax.conv_general_dilated_patches(img, filter_shape=k, window_strides=s, padding=pads,
                                                   rhs_dilation=d, dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return patches.reshape(n, ckk, -1)

    (image,) = jax.linear_transpose(unfold_image, jax.ShapeDtypeStruct((n, c, *out_hw), x.dtype))(x)
    return {"Y": image}


def _crop_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    shape = list(ctx.attr("shape") or [])
    if ctx.input("Shape") is not None or ctx.inputs("ShapeTensor"):
        shape = [-1] * x.ndim
    ctx.check(len(shape) == x.ndim, f"shape {shape} must have one value per dim of X {x.shape}")
    tensor_offsets = ctx.input("Offsets") is not None or bool(ctx.inputs("OffsetsTensor"))
    offsets = [int(v) for v in ctx.attr("offsets") or []] or [0] * x.ndim
    # A -1 takes the rest of the dim past its offset: known when the offset and the dim are.
    out = [t if t != -1 else (d - o if d >= 0 and not tensor_offsets else -1)
           for d, t, o in zip(x.shape, shape, offsets)]
    ctx.set_output("Out", out, x.dtype, 0)


@op("crop_tensor", inputs="X Shape? ShapeTensor*? Offsets? OffsetsTensor*?", outputs="Out",
    attrs={"shape": Attr("ints", []), "offsets": Attr("ints", [])}, infer_shape=_crop_shape,
    no_grad_inputs=["Shape", "ShapeTensor", "Offsets", "OffsetsTensor"])
def crop_tensor(ctx):
    """The block of X of ``shape`` starting at ``offsets`` (a -1 in shape takes the rest of that
    dim). The offsets may be tensors known only at run time; the shape, which sets the output's
    shape, must be known when the block is lowered."""
    from .manipulation import static_ints

    x = ctx.input("X")
    shape = static_ints(ctx, "Shape", "ShapeTensor", what="the crop shape")
    shape = shape if shape is not None else [int(v) for v in ctx.attr("shape")]
    if ctx.input("Offsets") is not None or ctx.inputs("OffsetsTensor"):
        parts = [v.reshape(-1) for s in ("Offsets", "OffsetsTensor") for v in ctx.inputs(s) if v is not None]
        offsets = jnp.concatenate(parts).astype(jnp.int32)
        if any(t == -1 for t in shape):
            _fail(ctx, "a -1 in shape needs static offsets (the output's size would depend on their values)")
        return {"Out": lax.dynamic_slice(x, [offsets[i] for i in range(x.ndim)], shape)}
    offsets = [int(v) for v in ctx.attr("offsets")] or [0] * x.ndim
    sizes = [x.shape[i] - offsets[i] if t == -1 else t for i, t in enumerate(shape)]
    if any(o < 0 or o + sz > dim for o, sz, dim in zip(offsets, sizes, x.shape)):
        _fail(ctx, f"the crop at offsets {offsets} of shape {sizes} does not fit in X {list(x.shape)}")
    return {"Out": lax.slice(x, offsets, [o + sz for o, sz in zip(offsets, sizes)])}
