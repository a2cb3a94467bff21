"""Convolutions and pooling over 2-D images (NCHW or NHWC), on ``lax.conv_general_dilated`` and
``lax.reduce_window``.

Paddle's padding rules, shared by every op here: ``paddings`` holds 2 values (height, width; both
sides alike) or 4 (top, bottom, left, right); ``padding_algorithm`` "SAME" pads so that the
output is ceil(input / stride) (and ignores ``dilations``), "VALID" pads nothing, "EXPLICIT"
uses ``paddings``.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext

_CHANNEL_LAST = ("NHWC",)


def _channel_last(fmt: str) -> bool:
    return fmt in _CHANNEL_LAST


def _spatial(shape, channel_last: bool):
    return tuple(shape[1:3]) if channel_last else tuple(shape[2:4])


def _channels(shape, channel_last: bool) -> int:
    return shape[3] if channel_last else shape[1]


def _image_shape(n, c, hw, channel_last: bool):
    return (n, *hw, c) if channel_last else (n, c, *hw)


def _pairs(values, name: str, n: int = 2) -> list[int]:
    values = [int(v) for v in values]
    if len(values) == 1:
        values = values * n
    if len(values) != n:
        raise ValueError(f"{name} needs {n} values (height, width), got {values}")
    return values


def _resolve_padding(paddings, algorithm: str, in_sizes, ksize, strides, dilations):
    """Paddle's UpdatePaddingAndDilation for any number of spatial dims: [(before, after)] per
    dim ([(top, bottom), (left, right)] for images) and the dilations to use."""
    n = len(in_sizes)
    paddings = [int(p) for p in paddings]
    if len(paddings) == n:
        pads = [(p, p) for p in paddings]
    elif len(paddings) == 2 * n:
        pads = [(paddings[2 * i], paddings[2 * i + 1]) for i in range(n)]
    else:
        raise ValueError(f"paddings needs {n} or {2 * n} values, got {paddings}")
    dilations = list(dilations)
    if algorithm == "VALID":
        pads = [(0, 0)] * n
    elif algorithm == "SAME":
        pads = []
        for i, (size, k, s) in enumerate(zip(in_sizes, ksize, strides)):
            if size < 0:
                pads.append((-1, -1))
                continue
            out = (size + s - 1) // s
            total = max((out - 1) * s + k - size, 0)
            pads.append((total // 2, total - total // 2))
            dilations[i] = 1
    return pads, dilations


def _check_algorithm(ctx: InferShapeContext) -> None:
    algo = ctx.attr("padding_algorithm")
    ctx.check(algo in ("EXPLICIT", "SAME", "VALID"),
              f"padding_algorithm must be 'EXPLICIT', 'SAME' or 'VALID', got {algo!r}")
    fmt = ctx.attr("data_format")
    ctx.check(fmt in ("NCHW", "NHWC", "AnyLayout"), f"data_format must be 'NCHW' or 'NHWC', got {fmt!r}")
    ctx.check(len(ctx.attr("paddings")) in (2, 4), f"paddings needs 2 or 4 values, got {ctx.attr('paddings')}")


# -- convolution ---------------------------------------------------------------------------------------
def _conv_out(size: int, k: int, s: int, d: int, pad) -> int:
    if size < 0 or pad[0] < 0:
        return -1
    return (size + pad[0] + pad[1] - (d * (k - 1) + 1)) // s + 1


def _conv_shape(ctx: InferShapeContext) -> None:
    x, w = ctx.input("Input"), ctx.input("Filter")
    _check_algorithm(ctx)
    last = _channel_last(ctx.attr("data_format"))
    ctx.check(x.ndim == 4, f"Input must be 4-D ({ctx.attr('data_format')}), got {x.shape}")
    ctx.check(w.ndim == 4, f"Filter must be 4-D [out_channels, in_channels / groups, kh, kw], got {w.shape}")
    ctx.check(x.dtype == w.dtype, f"Input is {x.dtype} but Filter is {w.dtype}")
    groups = ctx.attr("groups") or 1
    c = _channels(x.shape, last)
    ctx.check(c < 0 or w.shape[1] < 0 or c == w.shape[1] * groups,
              f"Input has {c} channels but Filter {w.shape} expects {w.shape[1]} × groups={groups} = "
              f"{w.shape[1] * groups}")
    ctx.check(w.shape[0] < 0 or w.shape[0] % groups == 0,
              f"Filter's {w.shape[0]} output channels do not split into groups={groups}")
    strides = _pairs(ctx.attr("strides"), "strides")
    ksize = w.shape[2:]
    pads, dil = _resolve_padding(ctx.attr("paddings"), ctx.attr("padding_algorithm"), _spatial(x.shape, last),
                                 ksize, strides, _pairs(ctx.attr("dilations"), "dilations"))
    hw = tuple(_conv_out(size, k, s, d, p) for size, k, s, d, p in zip(_spatial(x.shape, last), ksize,
                                                                           strides, dil, pads))
    ctx.check(all(d != 0 and d >= -1 for d in hw),
              f"the output would be empty ({hw}): the filter {tuple(ksize)} is larger than the padded input")
    ctx.set_output("Output", _image_shape(x.shape[0], w.shape[0], hw, last), x.dtype, x.lod_level)


def _dimension_numbers(channel_last: bool):
    return ("NHWC", "OIHW", "NHWC") if channel_last else ("NCHW", "OIHW", "NCHW")


def _depthwise_by_shifts(x, w, strides, pads, dil, last: bool):
    """A depthwise convolution (one filter per channel) as a sum of kh·kw shifted, strided slices
    of the padded input, each times its per-channel weight. XLA's CPU grouped convolution with
    groups == channels is 5-20x slower than this (docs/inference.md: MobileNetV2)."""
    h_axis, w_axis = (1, 2) if last else (2, 3)
    pad_cfg = [(0, 0)] * 4
    pad_cfg[h_axis], pad_cfg[w_axis] = tuple(pads[0]), tuple(pads[1])
    xp = jnp.pad(x, pad_cfg)
    if any(p != (0, 0) for p in pad_cfg):
        # The padded input made once: fused into the sum of slices, the padding kept XLA's CPU
        # backend from running that loop on more than one thread (8x112x112x32: 11.5 -> 6.6 ms).
        xp = lax.optimization_barrier(xp)
    kh, kw = w.shape[2:]
    out_h = (xp.shape[h_axis] - (dil[0] * (kh - 1) + 1)) // strides[0] + 1
    out_w = (xp.shape[w_axis] - (dil[1] * (kw - 1) + 1)) // strides[1] + 1
    channel_shape = (1, 1, 1, -1) if last else (1, -1, 1, 1)
    out = None
    for i in range(kh):
        for j in range(kw):
            start, limit, step = [0] * 4, list(xp.shape), [1] * 4
            for axis, offset, n, s in ((h_axis, i * dil[0], out_h, strides[0]), (w_axis, j * dil[1], out_w, strides[1])):
                start[axis], limit[axis], step[axis] = offset, offset + (n - 1) * s + 1, s
            term = lax.slice(xp, start, limit, step) * w[:, 0, i, j].reshape(channel_shape)
            out = term if out is None else out + term
    return out


def _pointwise_by_dot(x, w, strides, last: bool):
    """A 1×1 convolution without padding as a matrix product over the channels (after a strided
    slice for strides > 1): XLA's CPU convolution runs these 1.5-10x slower than its dot."""
    if strides != [1, 1]:
        step = [1, strides[0], strides[1], 1] if last else [1, 1, strides[0], strides[1]]
        x = lax.slice(x, [0] * 4, list(x.shape), step)
    spec = "nhwc,oc->nhwo" if last else "nchw,oc->nohw"
    return jnp.einsum(spec, x, w[:, :, 0, 0])


def _few_channels_by_dot(x, w, strides, pads):
    """A channel-last convolution of an input with few channels (an image's 3) as one matrix
    product of its patches: XLA's CPU convolution runs these poorly (MobileNetV2's first layer,
    8×224×224×3 → 32, 3×3 stride 2: 8.1 ms as a convolution, 3.5 ms as patches × filter)."""
    n, c = x.shape[0], x.shape[3]
    o, _, kh, kw = w.shape
    xp = jnp.pad(x, [(0, 0), tuple(pads[0]), tuple(pads[1]), (0, 0)])
    out_h = (xp.shape[1] - kh) // strides[0] + 1
    out_w = (xp.shape[2] - kw) // strides[1] + 1
    cols = [lax.slice(xp, (0, i, j, 0), (n, i + (out_h - 1) * strides[0] + 1, j + (out_w - 1) * strides[1] + 1, c),
                      (1, strides[0], strides[1], 1)) for i in range(kh) for j in range(kw)]
    patches = jnp.concatenate(cols, axis=-1)                              # [n, oh, ow, (i, j, c)]
    return patches @ jnp.transpose(w, (2, 3, 1, 0)).reshape(kh * kw * c, o)


_PATCH_LIMIT = 32      # kh·kw·channels up to which a channel-last conv runs as patches × filter


def _conv(ctx):
    x, w = ctx.input("Input"), ctx.input("Filter")
    last = _channel_last(ctx.attr("data_format"))
    strides = _pairs(ctx.attr("strides"), "strides")
    pads, dil = _resolve_padding(ctx.attr("paddings"), ctx.attr("padding_algorithm"), _spatial(x.shape, last),
                                 w.shape[2:], strides, _pairs(ctx.attr("dilations"), "dilations"))
    groups = ctx.attr("groups") or 1
    if groups > 1 and groups == _channels(x.shape, last) == w.shape[0] and w.shape[1] == 1:
        return {"Output": _depthwise_by_shifts(x, w, strides, pads, dil, last)}
    if groups == 1 and tuple(w.shape[2:]) == (1, 1) and all(p == (0, 0) for p in map(tuple, pads)):
        return {"Output": _pointwise_by_dot(x, w, strides, last)}
    if (groups == 1 and last and x.ndim == 4 and tuple(dil) == (1, 1) and w.shape[1] == x.shape[3]
            and int(np.prod(w.shape[1:])) <= _PATCH_LIMIT and all(min(p) >= 0 for p in map(tuple, pads))):
        return {"Output": _few_channels_by_dot(x, w, strides, pads)}
    out = lax.conv_general_dilated(x, w, window_strides=strides, padding=pads, rhs_dilation=dil,
                                   dimension_numbers=_dimension_numbers(last),
                                   feature_group_count=ctx.attr("groups") or 1)
    return {"Output": out}


_CONV_ATTRS = {"strides": Attr("ints", [1, 1]), "paddings": Attr("ints", [0, 0]),
               "padding_algorithm": "EXPLICIT", "dilations": Attr("ints", [1, 1]), "groups": 1,
               "data_format": "NCHW"}


@op("conv2d", inputs="Input Filter", outputs="Output", attrs=_CONV_ATTRS, infer_shape=_conv_shape)
def conv2d(ctx):
    """2-D convolution (cross-correlation) of Input with Filter [out_c, in_c / groups, kh, kw], with
    ``strides``, ``paddings``/``padding_algorithm``, ``dilations`` and ``groups``."""
    return _conv(ctx)


@op("depthwise_conv2d", inputs="Input Filter", outputs="Output", attrs=_CONV_ATTRS, infer_shape=_conv_shape)
def depthwise_conv2d(ctx):
    """conv2d with ``groups`` equal to the input channels (each channel has its own filters)."""
    return _conv(ctx)


def _transpose_geometry(x_shape, w_shape, attrs, last: bool):
    """(pads, dilations, output spatial dims, natural spatial dims) of a transposed convolution."""
    strides = _pairs(attrs["strides"], "strides")
    in_hw = _spatial(x_shape, last)
    ksize = w_shape[2:]
    pads, dil = _resolve_padding(attrs["paddings"], attrs["padding_algorithm"], in_hw, ksize, strides,
                                 _pairs(attrs["dilations"], "dilations"))
    natural = []
    for size, k, s, d, p in zip(in_hw, ksize, strides, dil, pads):
        natural.append(-1 if size < 0 or k < 0 or p[0] < 0 else (size - 1) * s - p[0] - p[1] + d * (k - 1) + 1)
    output_size = list(attrs.get("output_size") or [])
    output_padding = list(attrs.get("output_padding") or [])
    if output_size:
        out = _pairs(output_size, "output_size")
    elif output_padding:
        pad = _pairs(output_padding, "output_padding")
        out = [n + p if n >= 0 else -1 for n, p in zip(natural, pad)]
    else:
        out = list(natural)
    return pads, dil, strides, out, natural


def _conv_transpose_shape(ctx: InferShapeContext) -> None:
    x, w = ctx.input("Input"), ctx.input("Filter")
    _check_algorithm(ctx)
    last = _channel_last(ctx.attr("data_format"))
    ctx.check(x.ndim == 4, f"Input must be 4-D ({ctx.attr('data_format')}), got {x.shape}")
    ctx.check(w.ndim == 4, f"Filter must be 4-D [in_channels, out_channels / groups, kh, kw], got {w.shape}")
    ctx.check(x.dtype == w.dtype, f"Input is {x.dtype} but Filter is {w.dtype}")
    groups = ctx.attr("groups") or 1
    c = _channels(x.shape, last)
    ctx.check(c < 0 or w.shape[0] < 0 or c == w.shape[0],
              f"Input has {c} channels but Filter {w.shape} expects {w.shape[0]}")
    ctx.check(w.shape[0] < 0 or w.shape[0] % groups == 0,
              f"Filter's {w.shape[0]} input channels do not split into groups={groups}")
    pads, dil, strides, out, natural = _transpose_geometry(x.shape, w.shape, ctx.op.attrs, last)
    for o, n, s in zip(out, natural, strides):
        if o >= 0 and n >= 0:
            ctx.check(n <= o < n + s, f"output_size/output_padding give {out}, but with these strides the output "
                                      f"must lie in [{natural}, {natural} + strides {strides})")
    ctx.check(all(d > 0 or d == -1 for d in out), f"the output would be empty ({out})")
    ctx.set_output("Output", _image_shape(x.shape[0], w.shape[1] * groups if w.shape[1] >= 0 else -1, out, last),
                   x.dtype, x.lod_level)


@op("conv2d_transpose", inputs="Input Filter", outputs="Output",
    attrs={"strides": Attr("ints", [1, 1]), "paddings": Attr("ints", [0, 0]),
           "output_padding": Attr("ints", []), "output_size": Attr("ints", []),
           "padding_algorithm": "EXPLICIT", "groups": 1, "dilations": Attr("ints", [1, 1]),
           "data_format": "NCHW"},
    infer_shape=_conv_transpose_shape)
def conv2d_transpose(ctx):
    """The transpose (gradient) of conv2d: Filter is [in_c, out_c / groups, kh, kw]; the output is
    (in - 1)·stride - pad_top - pad_bottom + dilation·(k - 1) + 1, or ``output_size``, or that
    plus ``output_padding`` (extra rows/columns at the bottom/right)."""
    x, w = ctx.input("Input"), ctx.input("Filter")
    last = _channel_last(ctx.attr("data_format"))
    groups = ctx.attr("groups") or 1
    attrs = {k: ctx.attr(k) for k in ("strides", "paddings", "padding_algorithm", "dilations", "output_size",
                                      "output_padding")}
    pads, dil, strides, out, _ = _transpose_geometry(x.shape, w.shape, attrs, last)
    c_in, c_out_g, kh, kw = w.shape
    kernel = w.reshape(groups, c_in // groups, c_out_g, kh, kw).transpose(0, 2, 1, 3, 4)
    kernel = kernel.reshape(groups * c_out_g, c_in // groups, kh, kw)[:, :, ::-1, ::-1]
    padding = []
    for size, k, s, d, p, o in zip(_spatial(x.shape, last), (kh, kw), strides, dil, pads, out):
        lo = d * (k - 1) - p[0]
        hi = o - 1 - (size - 1) * s - lo + d * (k - 1)
        padding.append((lo, hi))
    y = lax.conv_general_dilated(x, kernel, window_strides=(1, 1), padding=padding, lhs_dilation=strides,
                                 rhs_dilation=dil, dimension_numbers=_dimension_numbers(last),
                                 feature_group_count=groups)
    return {"Output": y}


# -- pooling ---------------------------------------------------------------------------------------------
def _pool_geometry(in_hw, attrs):
    """(ksize, strides, [(top, bottom), (left, right)], output spatial dims) of a pool2d."""
    ksize = _pairs(attrs["ksize"], "ksize")
    strides = _pairs(attrs["strides"], "strides")
    paddings = attrs["paddings"]
    if attrs.get("global_pooling"):
        ksize = list(in_hw)
        paddings = [0, 0]
    if attrs.get("adaptive"):
        return ksize, strides, [(0, 0), (0, 0)], list(ksize)
    pads, _ = _resolve_padding(paddings, attrs.get("padding_algorithm") or "EXPLICIT", in_hw, ksize, strides,
                               [1, 1])
    if attrs.get("global_pooling"):
        pads = [(0, 0), (0, 0)]
    out = []
    for size, k, s, p in zip(in_hw, ksize, strides, pads):
        if size < 0 or k < 0 or p[0] < 0:
            out.append(-1)
        elif attrs.get("ceil_mode"):
            out.append((size + p[0] + p[1] - k + s - 1) // s + 1)
        else:
            out.append((size + p[0] + p[1] - k) // s + 1)
    return ksize, strides, pads, out


_POOL_ATTR_NAMES = ("ksize", "strides", "paddings", "ceil_mode", "exclusive", "global_pooling", "adaptive",
                    "padding_algorithm")


def _pool_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    _check_algorithm(ctx)
    ctx.check(ctx.attr("pooling_type") in ("max", "avg"),
              f"pooling_type must be 'max' or 'avg', got {ctx.attr('pooling_type')!r}")
    last = _channel_last(ctx.attr("data_format"))
    ctx.check(x.ndim == 4, f"X must be 4-D ({ctx.attr('data_format')}), got {x.shape}")
    ctx.check(len(ctx.attr("ksize")) in (1, 2), f"ksize needs 2 values, got {ctx.attr('ksize')}")
    _, _, _, out = _pool_geometry(_spatial(x.shape, last), {k: ctx.attr(k) for k in _POOL_ATTR_NAMES})
    ctx.check(all(d > 0 or d == -1 for d in out),
              f"the output would be empty ({out}): the window is larger than the padded input")
    ctx.set_output("Out", _image_shape(x.shape[0], _channels(x.shape, last), out, last), x.dtype, x.lod_level)


def _adaptive_bins(size: int, out: int) -> np.ndarray:
    """[out, size] membership of Paddle's adaptive bins: [floor(i·size/out), ceil((i+1)·size/out))."""
    i = np.arange(out)
    start = (i * size) // out
    end = -((-(i + 1) * size) // out)
    j = np.arange(size)
    return (j[None, :] >= start[:, None]) & (j[None, :] < end[:, None])


def _adaptive_pool(x, axes, out_sizes, kind: str):
    for axis, n_out in zip(axes, out_sizes):
        member = _adaptive_bins(x.shape[axis], n_out)            # [out, in]
        moved = jnp.moveaxis(x, axis, -1)                         # [..., in]
        if kind == "max":
            masked = jnp.where(jnp.asarray(member), moved[..., None, :], jnp.asarray(-jnp.inf, x.dtype))
            reduced = jnp.max(masked, axis=-1)
        else:
            weights = member / member.sum(axis=1, keepdims=True)
            reduced = moved @ jnp.asarray(weights.T, x.dtype)
        x = jnp.moveaxis(reduced, -1, axis)
    return x


def _window_counts(size: int, k: int, s: int, pad, out: int, exclusive: bool) -> np.ndarray:
    """Divisors of average pooling along one axis: the window's real elements (``exclusive``), or
    its part inside [-pad_before, size + pad_before): Paddle counts padding but not a ceil_mode
    overhang, and clips the end with the *leading* pad even when the paddings are asymmetric."""
    start = np.arange(out) * s - pad[0]
    end = np.minimum(start + k, size + pad[0])
    if exclusive:
        return np.maximum(np.minimum(end, size) - np.maximum(start, 0), 1)
    return end - start


@op("pool2d", inputs="X", outputs="Out",
    attrs={"ksize": Attr("ints", [1, 1]), "strides": Attr("ints", [1, 1]), "paddings": Attr("ints", [0, 0]),
           "ceil_mode": False, "exclusive": True, "data_format": "NCHW", "pooling_type": "max",
           "global_pooling": False, "adaptive": False, "padding_algorithm": "EXPLICIT", "use_cudnn": False},
    infer_shape=_pool_shape)
def pool2d(ctx):
    """Max or average pooling over ``ksize`` windows.

    ``global_pooling`` pools each whole map; ``adaptive`` makes ``ksize`` the output size (bin i
    covers [floor(i·in/out), ceil((i+1)·in/out))); ``ceil_mode`` rounds the output size up; an
    ``exclusive`` average divides by the number of real (unpadded) elements, otherwise by the
    window area.
    """
    x = ctx.input("X")
    last = _channel_last(ctx.attr("data_format"))
    kind = ctx.attr("pooling_type")
    axes = (1, 2) if last else (2, 3)
    in_hw = _spatial(x.shape, last)
    ksize, strides, pads, out = _pool_geometry(in_hw, {k: ctx.attr(k) for k in _POOL_ATTR_NAMES})
    if ctx.attr("adaptive"):
        return {"Out": _adaptive_pool(x, axes, out, kind)}
    if ctx.attr("global_pooling") and kind == "avg":
        # The mean as a matrix product: as a reduction, XLA's CPU layout assignment may give the
        # convolution before it a layout its fast kernel does not take (ResNet-18 at batch 1:
        # 68 ms against 41 ms with the product; docs/inference.md).
        return {"Out": _adaptive_pool(x, axes, [1, 1], "avg")}
    return {"Out": pool_windows(x, axes, in_hw, ksize, strides, pads, out, kind, ctx.attr("exclusive"))}


def pool_windows(x, axes, in_sizes, ksize, strides, pads, out, kind: str, exclusive: bool):
    """Max or average pooling of ``x`` over ``axes`` (any number of spatial dims): windows start
    at i·s - pad_before, and the far side is padded to fit ``out`` windows (or the rows no window
    reaches are cut off: negative padding would not differentiate)."""
    rank = x.ndim
    window, stride, padding = [1] * rank, [1] * rank, [(0, 0)] * rank
    for axis, size, k, s, p, o in zip(axes, in_sizes, ksize, strides, pads, out):
        window[axis], stride[axis] = k, s
        high = (o - 1) * s + k - size - p[0]
        if high < 0:
            x = lax.slice_in_dim(x, 0, size + high, axis=axis)
            high = 0
        padding[axis] = (p[0], high)
    if kind == "max":
        # NumPy scalars as init values let JAX pick its differentiable max/sum window reductions.
        return lax.reduce_window(x, np.array(-np.inf, x.dtype), lax.max, window, stride, padding)
    total = lax.reduce_window(x, np.array(0, x.dtype), lax.add, window, stride, padding)
    count = np.ones((), np.float64)
    for axis, size, k, s, p, o in zip(axes, in_sizes, ksize, strides, pads, out):
        shape = [1] * rank
        shape[axis] = o
        count = count * _window_counts(size, k, s, p, o, exclusive).reshape(shape)
    return total / jnp.asarray(count, x.dtype)
