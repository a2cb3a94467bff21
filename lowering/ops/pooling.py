"""Pooling, on ``lax.reduce_window``: pool2d and pool3d (max or average, global, adaptive,
``ceil_mode``, ``exclusive`` averages) and max pooling that also returns where each maximum is
(max_pool2d_with_index, max_pool3d_with_index: ``return_mask`` / AdaptiveMaxPool).

The windows follow the convolutions' padding rules (``conv.py``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext
from .conv import (_channel_last, _channels, _check_3d_attrs, _check_algorithm, _image3d, _image_shape,
                   _layout3d, _pairs, _resolve_padding, _spatial, _spatial3d)


# -- pool2d ----------------------------------------------------------------------------------------
def _pool_geometry(in_sizes, attrs):
    """(ksize, strides, [(before, after)] per spatial dim, output spatial dims) of a pool2d or
    pool3d (Paddle's rules, in as many dims as ``in_sizes`` has)."""
    n = len(in_sizes)
    ksize = _pairs(attrs["ksize"], "ksize", n)
    strides = _pairs(attrs["strides"], "strides", n)
    paddings = attrs["paddings"]
    if attrs.get("global_pooling"):
        ksize = list(in_sizes)
        paddings = [0] * n
    if attrs.get("adaptive"):
        return ksize, strides, [(0, 0)] * n, list(ksize)
    pads, _ = _resolve_padding(paddings, attrs.get("padding_algorithm") or "EXPLICIT", in_sizes, ksize, strides,
                               [1] * n)
    if attrs.get("global_pooling"):
        pads = [(0, 0)] * n
    out = []
    for size, k, s, p in zip(in_sizes, ksize, strides, pads):
        if size < 0 or k < 0 or p[0] < 0:
            out.append(-1)
        elif attrs.get("ceil_mode"):
            out.append(_c_div(size + p[0] + p[1] - k + s - 1, s) + 1)
        else:
            out.append(_c_div(size + p[0] + p[1] - k, s) + 1)
    return ksize, strides, pads, out


def _c_div(a: int, b: int) -> int:
    """``a / b`` in C++ ints (Paddle's PoolOutputSize): truncated toward zero, so a window larger
    than the padded input by less than a stride still gives one output (GoogLeNet's 7x7 stride-7
    pool of a 6x6 map: ``(6 - 7) / 7 + 1 = 1``), whose window the kernel cuts to the input."""
    q = abs(a) // b
    return q if a >= 0 else -q


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


# -- pool3d ----------------------------------------------------------------------------------------
_POOL3D_NAMES = ("ksize", "strides", "paddings", "ceil_mode", "exclusive", "global_pooling", "adaptive",
                 "padding_algorithm")


def _pool3d_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    _check_3d_attrs(ctx)
    ctx.check(ctx.attr("pooling_type") in ("max", "avg"),
              f"pooling_type must be 'max' or 'avg', got {ctx.attr('pooling_type')!r}")
    ctx.check(x.ndim == 5, f"X must be 5-D ({ctx.attr('data_format')}), got {x.shape}")
    last = _layout3d(ctx.attr("data_format"))
    _, _, _, out = _pool_geometry(_spatial3d(x.shape, last), {k: ctx.attr(k) for k in _POOL3D_NAMES})
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
    x = ctx.input("X")
    last = _layout3d(ctx.attr("data_format"))
    kind = ctx.attr("pooling_type")
    axes = (1, 2, 3) if last else (2, 3, 4)
    in_sizes = _spatial3d(x.shape, last)
    ksize, strides, pads, out = _pool_geometry(in_sizes, {k: ctx.attr(k) for k in _POOL3D_NAMES})
    if ctx.attr("adaptive"):
        return {"Out": _adaptive_pool(x, axes, out, kind)}
    return {"Out": pool_windows(x, axes, in_sizes, ksize, strides, pads, out, kind, ctx.attr("exclusive"))}


# -- max pooling with indices ------------------------------------------------------------------------
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
