"""Convolutions, on ``lax.conv_general_dilated``: conv2d and depthwise_conv2d over 2-D images (NCHW
or NHWC) and their transposes, conv3d and conv3d_transpose, deformable_conv(_v1), and
unfold/fold (im2col and its transpose).

Paddle's padding rules, shared by every op here and by the pooling ops (``pooling.py``):
``paddings`` holds 2 values (height, width; both sides alike) or 4 (top, bottom, left, right) —
3 or 6 for the 3-D ops; ``padding_algorithm`` "SAME" pads so that the output is
ceil(input / stride) (and ignores ``dilations``), "VALID" pads nothing, "EXPLICIT" uses
``paddings``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext
from ..lower import SubBlock


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
    """``values`` as one int per spatial dim (a single value stands for all ``n``)."""
    values = [int(v) for v in values]
    if len(values) == 1:
        values = values * n
    if len(values) != n:
        dims = "(height, width)" if n == 2 else "(depth, height, width)" if n == 3 else "per spatial dim"
        raise ValueError(f"{name} needs {n} values {dims}, got {values}")
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


def _grouped_filter_grad(x, dy, w_shape, strides, pads, dil, last: bool, groups: int, lhs_dil=(1, 1)):
    """The gradient of a grouped convolution's filter: for each of the kh·kw filter taps, the
    strided slice of the padded (and, for ``lhs_dil``, zero-dilated) input it meets, contracted with
    the output gradient per group (one batched matrix product over the groups)."""
    o, cg, kh, kw = w_shape
    h_axis, w_axis = (1, 2) if last else (2, 3)
    cfg = [(0, 0, 0)] * 4
    cfg[h_axis] = (pads[0][0], pads[0][1], lhs_dil[0] - 1)
    cfg[w_axis] = (pads[1][0], pads[1][1], lhs_dil[1] - 1)
    xp = lax.pad(x, jnp.zeros((), x.dtype), cfg)
    oh, ow = dy.shape[h_axis], dy.shape[w_axis]
    n = x.shape[0]
    if last:
        dyg, spec = dy.reshape(n, oh, ow, groups, o // groups), "nhwgc,nhwgo->goc"
    else:
        dyg, spec = dy.reshape(n, groups, o // groups, oh, ow), "ngchw,ngohw->goc"
    taps = []
    for i in range(kh):
        for j in range(kw):
            start, limit, step = [0] * 4, list(xp.shape), [1] * 4
            for axis, offset, size, st in ((h_axis, i * dil[0], oh, strides[0]), (w_axis, j * dil[1], ow, strides[1])):
                start[axis], limit[axis], step[axis] = offset, offset + (size - 1) * st + 1, st
            xs = lax.slice(xp, start, limit, step)
            xs = xs.reshape(n, oh, ow, groups, cg) if last else xs.reshape(n, groups, cg, oh, ow)
            taps.append(jnp.einsum(spec, xs, dyg, preferred_element_type=jnp.float32).reshape(o, cg))
    return jnp.stack(taps, -1).reshape(o, cg, kh, kw)


def _grouped_conv(x, w, strides, pads, dil, last: bool, groups: int, lhs_dil=(1, 1)):
    """A grouped convolution (1 < groups, not depthwise) whose filter gradient is computed tap by
    tap (:func:`_grouped_filter_grad`): XLA's CPU backend runs the filter gradient of a grouped
    convolution (a convolution with ``batch_group_count``) about 100x slower than this — ResNeXt-50's
    32-group 3x3 convolutions, 4x128x56x56: 40 s against 0.3 s a step. The forward and the input's
    gradient stay XLA's convolution; the result is the same derivative. ``lhs_dil`` (a transposed
    convolution's strides) dilates the input."""
    def conv(x_, w_):
        return lax.conv_general_dilated(x_, w_, window_strides=strides, padding=pads, lhs_dilation=lhs_dil,
                                        rhs_dilation=dil, dimension_numbers=_dimension_numbers(last),
                                        feature_group_count=groups)

    return _own_filter_grad(conv, lambda x_, dy, w_shape: _grouped_filter_grad(
        x_, dy, w_shape, strides, pads, dil, last, groups, lhs_dil))(x, w)


def _own_filter_grad(conv, filter_grad):
    """``conv(x, w)`` with its filter gradient from ``filter_grad(x, dy, w.shape)`` (custom_vjp):
    the forward and the input's gradient stay ``conv``'s (XLA's convolution)."""
    @jax.custom_vjp
    def convolve(x_, w_):
        return conv(x_, w_)

    def forward(x_, w_):
        return conv(x_, w_), (x_, w_)

    def backward(res, dy):
        x_, w_ = res
        dx, = jax.vjp(lambda a: conv(a, w_), x_)[1](dy)
        return dx, filter_grad(x_, dy, w_.shape).astype(w_.dtype)

    convolve.defvjp(forward, backward)
    return convolve


_PATCH_LIMIT = 32      # kh·kw·channels up to which a channel-last conv runs as patches × filter
# Output positions (batch·oh·ow) up to which a channel-last conv runs as patches × filter: on tiny
# maps XLA's CPU convolution is slow (ResNet-18's 1×7×7×512 stage, 3×3: 3.0 ms of CPU as a
# convolution, 2.2 ms as patches × filter; at batch 8 the model gained nothing: docs/inference.md).
_SMALL_MAP = 64


def _out_positions(x_shape, w_shape, strides, pads) -> int:
    kh, kw = w_shape[2:]
    oh = (x_shape[1] + pads[0][0] + pads[0][1] - kh) // strides[0] + 1
    ow = (x_shape[2] + pads[1][0] + pads[1][1] - kw) // strides[1] + 1
    return x_shape[0] * oh * ow


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
    if _tiles(_spatial(x.shape, last), w.shape[2:], strides, dil, pads):
        return {"Output": _tiled_conv(x, w, strides, pads, groups, last)}
    if (groups == 1 and last and x.ndim == 4 and tuple(dil) == (1, 1) and w.shape[1] == x.shape[3]
            and all(min(p) >= 0 for p in map(tuple, pads))
            and (int(np.prod(w.shape[1:])) <= _PATCH_LIMIT
                 or (int(np.prod(w.shape[2:])) > 1 and _out_positions(x.shape, w.shape, strides, pads) <= _SMALL_MAP))):
        return {"Output": _few_channels_by_dot(x, w, strides, pads)}
    if groups > 1 and x.ndim == 4:
        return {"Output": _grouped_conv(x, w, list(strides), [tuple(p) for p in pads], list(dil), last, groups)}
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


# -- per-sample blocks -------------------------------------------------------------------------------
# The widest value of a chunk: a ``fluidjax_per_sample`` block runs over chunks of the batch whose
# widest intermediate holds at most this many bytes (docs/inference.md, "Per-sample blocks").
PER_SAMPLE_CHUNK_BYTES = 4 << 20


def _widest_sample_bytes(block) -> int | None:
    """Bytes per sample of the widest value the ops of ``block`` write, from the declared shapes
    (None when a non-batch dimension is unknown)."""
    widest = 0
    for o in block.ops:
        for name in o.output_arg_names:
            var = block.find_var(name) or block.program.global_block().find_var(name)
            if var is None or len(var.shape) < 2 or any(d < 0 for d in var.shape[1:]):
                return None
            try:
                itemsize = np.dtype(var.dtype).itemsize
            except TypeError:
                itemsize = 4
            widest = max(widest, int(np.prod(var.shape[1:])) * itemsize)
    return widest


def _per_sample_shape(ctx: InferShapeContext) -> None:
    """Out keeps the shape the sub-block's ops gave it."""


@op("fluidjax_per_sample", inputs="X Params*?", outputs="Out", attrs={"sub_block": Attr("block", 0)},
    infer_shape=_per_sample_shape, grad=None)
def fluidjax_per_sample(ctx):
    """fluidjax's own op (written by ``fj.passes.per_sample_blocks``, never by Paddle): sub-block
    ``sub_block`` computes Out from the image X, each sample from itself (convolutions, bias adds,
    activations), reading the parameters ``Params``. It runs over chunks of the batch (``lax.map``)
    whose widest intermediate stays under :data:`PER_SAMPLE_CHUNK_BYTES`, so a wide expansion
    (MobileNetV2's 1×1 → depthwise → 1×1 blocks) never exists for the whole batch at once; a batch
    that fits in one chunk runs the block as it is. Results are the sub-block's, sample by sample."""
    sub = SubBlock(ctx.op, ctx.attr("sub_block"), ctx.env)
    x = ctx.input("X")
    x_name, out_name = ctx.op.input("X")[0], ctx.op.output("Out")[0]
    given = dict(zip(ctx.op.input("Params"), ctx.inputs("Params")))

    def run(chunk):
        return sub({**given, x_name: chunk})[out_name]

    n = x.shape[0]
    widest = _widest_sample_bytes(sub.block)
    per_chunk = n if widest is None or widest == 0 else max(1, PER_SAMPLE_CHUNK_BYTES // widest)
    while n % per_chunk:
        per_chunk -= 1
    if per_chunk >= n:
        return {"Out": run(x)}
    out = lax.map(run, x.reshape(n // per_chunk, per_chunk, *x.shape[1:]))
    return {"Out": out.reshape(n, *out.shape[2:])}


# -- transposed convolution ------------------------------------------------------------------------
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


_CONV_TRANSPOSE_ATTRS = {"strides": Attr("ints", [1, 1]), "paddings": Attr("ints", [0, 0]),
                         "output_padding": Attr("ints", []), "output_size": Attr("ints", []),
                         "padding_algorithm": "EXPLICIT", "groups": 1, "dilations": Attr("ints", [1, 1]),
                         "data_format": "NCHW"}


@op("conv2d_transpose", inputs="Input Filter", outputs="Output", attrs=_CONV_TRANSPOSE_ATTRS,
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
    return {"Output": _transposed_conv(x, w, list(strides), [tuple(p) for p in pads], list(dil), list(out), last,
                                       groups)}


def _transposed_conv(x, w, strides, pads, dil, out, last: bool, groups: int):
    """conv2d_transpose of x with Filter w [in_c, out_c / groups, kh, kw]: forward and input
    gradient are XLA's convolution over the stride-dilated input (flipped, transposed kernel);
    the filter gradient is :func:`_transposed_filter_grad`, tap by tap. Autodiff of the forward
    gives XLA CPU a filter gradient with a stride-dilated window, which runs on its generic loop
    path: Mask R-CNN's 2x2 / stride 2 mask upsampling (64 RoIs, 2048 -> 256 channels, 7x7) took
    ~25 s of CPU a step that way."""
    c_in, c_out_g, kh, kw = w.shape
    padding = []
    for size, k, s, d, p, o in zip(_spatial(x.shape, last), (kh, kw), strides, dil, pads, out):
        lo = d * (k - 1) - p[0]
        hi = o - 1 - (size - 1) * s - lo + d * (k - 1)
        padding.append((lo, hi))

    def conv(x_, w_):
        kernel = w_.reshape(groups, c_in // groups, c_out_g, kh, kw).transpose(0, 2, 1, 3, 4)
        kernel = kernel.reshape(groups * c_out_g, c_in // groups, kh, kw)[:, :, ::-1, ::-1]
        return lax.conv_general_dilated(x_, kernel, window_strides=(1, 1), padding=padding, lhs_dilation=strides,
                                        rhs_dilation=dil, dimension_numbers=_dimension_numbers(last),
                                        feature_group_count=groups)

    return _own_filter_grad(conv, lambda x_, dy, w_shape: _transposed_filter_grad(
        x_, dy, w_shape, strides, pads, dil, last, groups))(x, w)


def _transposed_filter_grad(x, dy, w_shape, strides, pads, dil, last: bool, groups: int):
    """The filter gradient of a transposed convolution. Output row u = i·s + a·d - pad_top gets
    x[i]·W[a], so dW[:, :, a, b] = Σ x[n, :, i, j] · dy[n, :, i·s + a·d - pad_top, j·s + b·d - pad_left]
    (rows outside dy count 0): for each of the kh·kw taps one strided slice of the padded output
    gradient, contracted with the input per group (one batched matrix product)."""
    c_in, c_out_g, kh, kw = w_shape
    h_axis, w_axis = (1, 2) if last else (2, 3)
    n, in_h, in_w = x.shape[0], x.shape[h_axis], x.shape[w_axis]
    cfg = [(0, 0, 0)] * 4
    for axis, size, k, s, d, p in ((h_axis, in_h, kh, strides[0], dil[0], pads[0]),
                                   (w_axis, in_w, kw, strides[1], dil[1], pads[1])):
        full = (size - 1) * s + d * (k - 1) + 1                 # the output before the padding is cut
        cfg[axis] = (p[0], full - p[0] - dy.shape[axis], 0)      # negative: rows no tap reaches
    dyp = lax.pad(dy, jnp.zeros((), dy.dtype), cfg)
    cg = c_in // groups
    if last:
        xg, spec = x.reshape(n, in_h, in_w, groups, cg), "nhwgc,nhwgo->gco"
    else:
        xg, spec = x.reshape(n, groups, cg, in_h, in_w), "ngchw,ngohw->gco"
    acc = jnp.promote_types(x.dtype, jnp.float32)
    taps = []
    for a in range(kh):
        for b in range(kw):
            start, limit, step = [0] * 4, list(dyp.shape), [1] * 4
            for axis, offset, size, s in ((h_axis, a * dil[0], in_h, strides[0]),
                                          (w_axis, b * dil[1], in_w, strides[1])):
                start[axis], limit[axis], step[axis] = offset, offset + (size - 1) * s + 1, s
            ds = lax.slice(dyp, start, limit, step)
            ds = ds.reshape(n, in_h, in_w, groups, c_out_g) if last else ds.reshape(n, groups, c_out_g, in_h, in_w)
            taps.append(jnp.einsum(spec, xg, ds, preferred_element_type=acc).reshape(c_in, c_out_g))
    return jnp.stack(taps, -1).reshape(c_in, c_out_g, kh, kw)


@op("depthwise_conv2d_transpose", inputs="Input Filter", outputs="Output", attrs=_CONV_TRANSPOSE_ATTRS,
    infer_shape=_conv_transpose_shape)
def depthwise_conv2d_transpose(ctx):
    """The transpose (gradient) of conv2d: Filter is [in_c, out_c / groups, kh, kw]; the output is
    (in - 1)·stride - pad_top - pad_bottom + dilation·(k - 1) + 1, or ``output_size``, or that
    plus ``output_padding`` (extra rows/columns at the bottom/right)."""
    return conv2d_transpose(ctx)


# -- conv3d / conv3d_transpose ---------------------------------------------------------------------
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
    strides = _pairs(attrs["strides"], "strides", 3)
    pads, dil = _resolve_padding(attrs["paddings"], attrs["padding_algorithm"], _spatial3d(x_shape, last),
                            w_shape[2:], strides, _pairs(attrs["dilations"], "dilations", 3))
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


def _tiles(in_sizes, ksize, strides, dilations, pads) -> bool:
    """Whether a convolution's windows tile its (padded) input without overlap and have more than
    one tap: along every spatial dim, no dilation and either stride == kernel size (BMN's
    [32, 1, 1] kernel at stride [32, 1, 1], a patch embedding) or a single window (C-TCN's
    [1, 402] kernel over its 402-wide scores). A 1x1 convolution is left to the pointwise rule."""
    if not any(int(k) > 1 for k in ksize):
        return False
    for size, k, s, d, p in zip(in_sizes, ksize, strides, dilations, pads):
        size, k, s = int(size), int(k), int(s)
        if int(d) != 1 or p[0] < 0 or p[1] < 0 or size < 0 or size + p[0] + p[1] < k:
            return False
        if k != s and (size + p[0] + p[1] - k) // s + 1 != 1:
            return False
    return True


def _tiled_conv(x, w, strides, pads, groups: int, last: bool):
    """A convolution whose windows tile the input (:func:`_tiles`), as a reshape and one product
    of patches and filter (the same sums); its gradients are plain dot products too.

    XLA CPU runs such convolutions on its generic loop path: the input gradient of BMN's strided
    3-D convolution ([2, 128, 32, 100, 100], kernel = stride [32, 1, 1]) took ~15 minutes a step
    on 2 cores, C-TCN's [1, 402] head convolution 20x longer than the product, forward and
    backward."""
    if last:
        x = jnp.moveaxis(x, -1, 1)
    nsp = x.ndim - 2
    x = jnp.pad(x, [(0, 0), (0, 0)] + [tuple(int(v) for v in p) for p in pads])
    ks = [int(k) for k in w.shape[2:]]
    outs = [(x.shape[2 + i] - ks[i]) // int(strides[i]) + 1 for i in range(nsp)]
    x = x[(slice(None), slice(None)) + tuple(slice(0, o * k) for o, k in zip(outs, ks))]
    n, c = x.shape[:2]
    o_c = w.shape[0]
    split = []
    for o, k in zip(outs, w.shape[2:]):
        split += [o, int(k)]
    x = x.reshape(n, groups, c // groups, *split)               # [N, G, C/G, o1, k1, o2, k2, ...]
    wg = w.reshape(groups, o_c // groups, *w.shape[1:])          # [G, O/G, C/G, k1, k2, ...]
    letters = "defhijlmpqrstuvxyz"
    o_idx, k_idx = letters[:nsp], letters[nsp:2 * nsp]
    x_sub = "ngc" + "".join(a + b for a, b in zip(o_idx, k_idx))
    out = jnp.einsum(f"{x_sub},gac{k_idx}->nga{o_idx}", x, wg.astype(x.dtype))
    out = out.reshape(n, o_c, *outs)
    return jnp.moveaxis(out, 1, -1) if last else out


_CONV3D_ATTRS = {"strides": Attr("ints", [1, 1, 1]), "paddings": Attr("ints", [0, 0, 0]),
                 "padding_algorithm": "EXPLICIT", "groups": 1, "dilations": Attr("ints", [1, 1, 1]),
                 "data_format": "NCDHW"}


@op("conv3d", inputs="Input Filter", outputs="Output", attrs=_CONV3D_ATTRS, infer_shape=_conv3d_shape)
def conv3d(ctx):
    """3-D convolution (cross-correlation) of Input [N, C, D, H, W] (or NDHWC) with Filter
    [out_c, in_c / groups, kd, kh, kw]; ``paddings`` holds 3 values or 6 (before/after per dim)."""
    x, w = ctx.input("Input"), ctx.input("Filter")
    last, strides, pads, dil = _conv3d_geometry(x.shape, w.shape, {k: ctx.attr(k) for k in _CONV3D_ATTRS})
    if _tiles(_spatial3d(x.shape, last), w.shape[2:], strides, dil, pads):
        return {"Output": _tiled_conv(x, w, strides, pads, ctx.attr("groups") or 1, last)}
    dims = ("NDHWC", "OIDHW", "NDHWC") if last else ("NCDHW", "OIDHW", "NCDHW")
    out = lax.conv_general_dilated(x, w, window_strides=strides, padding=pads, rhs_dilation=dil,
                                   dimension_numbers=dims, feature_group_count=ctx.attr("groups") or 1)
    return {"Output": out}


def _conv3d_transpose_geometry(x_shape, w_shape, attrs):
    last = _layout3d(attrs["data_format"])
    strides = _pairs(attrs["strides"], "strides", 3)
    in_sizes = _spatial3d(x_shape, last)
    ksize = w_shape[2:]
    pads, dil = _resolve_padding(attrs["paddings"], attrs["padding_algorithm"], in_sizes, ksize, strides,
                            _pairs(attrs["dilations"], "dilations", 3))
    natural = [-1 if n < 0 or p[0] < 0 else (n - 1) * s - p[0] - p[1] + d * (k - 1) + 1
               for n, k, s, d, p in zip(in_sizes, ksize, strides, dil, pads)]
    if attrs.get("output_size"):
        out = _pairs(attrs["output_size"], "output_size", 3)
    elif attrs.get("output_padding"):
        out = [n + e if n >= 0 else -1 for n, e in zip(natural, _pairs(attrs["output_padding"], "output_padding", 3))]
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


# -- unfold / fold (im2col, col2im) ----------------------------------------------------------------
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
