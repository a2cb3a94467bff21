"""Normalization: batch_norm (with moving statistics), layer_norm, group_norm, instance_norm;
Fluid 1.x's lrn (across channels), norm (L2 along an axis) and affine_channel (a frozen
batch norm).

Variances are the biased (population) ones, as in Paddle. ``SavedVariance`` outputs hold the
inverse standard deviation 1 / sqrt(var + epsilon) of the batch, which is what Paddle saves for
its backward pass.
"""

from __future__ import annotations

import contextlib
import threading

import jax
import jax.numpy as jnp
from jax import lax

from ...ir.registry import op
from ...ir.shape import InferShapeContext
from ..lower import row_statistics
from ._shapes import dims_equal, prod

_CHANNEL_LAST = ("NHWC", "NDHWC", "NLC", "NWC")


def _channel_axis(ndim: int, layout: str) -> int:
    return ndim - 1 if layout in _CHANNEL_LAST and ndim > 2 else 1


def _check_channel_vector(ctx: InferShapeContext, slot: str, c: int) -> None:
    v = ctx.input(slot)
    if v is None:
        return
    ctx.check(v.ndim == 1 and dims_equal(v.shape[0], c),
              f"{slot} must be a vector of {c} channels, got shape {v.shape}")


def _moments(x, axes):
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    return mean, var


def _row_mask(x, real_rows):
    """[rows, 1, ...] of x's rank: 1 for the first ``real_rows`` rows (a LoD value's real rows)."""
    mask = jnp.arange(x.shape[0]) < real_rows
    return mask.reshape((x.shape[0],) + (1,) * (x.ndim - 1))


# The mesh axis a data-parallel step with LoD feeds runs under (``parallel.py``'s per-device step) when
# ``BuildStrategy.sync_batch_norm`` asks for the global batch's statistics; None: each device's own.
_SYNC = threading.local()


@contextlib.contextmanager
def statistics_across(axis: str | None):
    """While tracing a per-device (``shard_map``) step: training ``batch_norm`` statistics are summed
    over the mesh axis ``axis`` (Paddle's ``sync_batch_norm``: the mean and variance of every device's
    real rows together), or each device's own when ``axis`` is None (Paddle's default)."""
    old = getattr(_SYNC, "axis", None)
    _SYNC.axis = axis
    try:
        yield
    finally:
        _SYNC.axis = old


def _synced_moments(x, axes, mask, axis_name):
    """Mean and biased variance over ``axes`` of every device's rows (``mask``: each one's real
    rows; None: all): sums and counts ``psum``-ed over ``axis_name`` (two passes, as Paddle's
    sync_batch_norm reduces the sums). Its gradient reaches every device's rows through the
    psums' transposes."""
    if mask is None:
        mask = jnp.ones((x.shape[0],) + (1,) * (x.ndim - 1), bool)
    count = jnp.sum(mask, axis=axes, keepdims=True).astype(x.dtype) * prod([x.shape[i] for i in axes if i != 0])
    count = jnp.maximum(jax.lax.psum(count, axis_name), jnp.ones((), x.dtype))
    xm = jnp.where(mask, x, jnp.zeros((), x.dtype))
    mean = jax.lax.psum(jnp.sum(xm, axis=axes, keepdims=True), axis_name) / count
    sq = jnp.where(mask, jnp.square(x - mean), jnp.zeros((), x.dtype))
    var = jax.lax.psum(jnp.sum(sq, axis=axes, keepdims=True), axis_name) / count
    return mean, var


def _masked_moments(x, axes, mask):
    """Mean and biased variance over ``axes`` (row axis 0 among them) of the rows ``mask`` keeps:
    padding rows of a LoD value never enter a statistic (nor, masked, its gradient)."""
    count = jnp.sum(mask, axis=axes, keepdims=True).astype(x.dtype) * \
        prod([x.shape[i] for i in axes if i != 0])
    count = jnp.maximum(count, jnp.ones((), x.dtype))
    xm = jnp.where(mask, x, jnp.zeros((), x.dtype))
    mean = jnp.sum(xm, axis=axes, keepdims=True) / count
    var = jnp.sum(jnp.where(mask, jnp.square(x - mean), jnp.zeros((), x.dtype)), axis=axes, keepdims=True) / count
    return mean, var


# -- batch_norm ------------------------------------------------------------------------------------------
def _batch_norm_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    layout = ctx.attr("data_layout")
    ctx.check(layout in ("NCHW", "NHWC", "AnyLayout"), f"data_layout must be 'NCHW' or 'NHWC', got {layout!r}")
    ctx.check(2 <= x.ndim <= 5, f"X must have rank 2 to 5, got {x.shape}")
    c = x.shape[_channel_axis(x.ndim, layout)]
    for slot in ("Scale", "Bias", "Mean", "Variance"):
        _check_channel_vector(ctx, slot, c)
    stat_dtype = ctx.input("Mean").dtype
    ctx.set_output("Y", x.shape, x.dtype, x.lod_level)
    for slot in ("MeanOut", "VarianceOut", "SavedMean", "SavedVariance"):
        ctx.set_output(slot, (c,), stat_dtype, 0)
    ctx.set_output("ReserveSpace", (0,), x.dtype, 0)


@op("batch_norm", inputs="X Scale? Bias? Mean Variance MomentumTensor?",
    outputs="Y MeanOut VarianceOut SavedMean SavedVariance ReserveSpace?",
    attrs={"is_test": False, "momentum": 0.9, "epsilon": 1e-5, "data_layout": "NCHW",
           "use_global_stats": False, "trainable_statistics": False},
    infer_shape=_batch_norm_shape, no_grad_inputs=["Mean", "Variance", "MomentumTensor"],
    no_grad_outputs=["MeanOut", "VarianceOut", "SavedMean", "SavedVariance", "ReserveSpace"])
def batch_norm(ctx):
    """Y = (X - mean) / sqrt(var + epsilon) · Scale + Bias per channel.

    Training uses the batch's mean and (biased) variance and updates the moving statistics:
    MeanOut = momentum · Mean + (1 - momentum) · batch mean (VarianceOut alike). With ``is_test``
    (unless ``trainable_statistics``) or ``use_global_stats`` the moving Mean/Variance are used
    and left unchanged.
    """
    x = ctx.input("X")
    mean_in, var_in = ctx.input("Mean"), ctx.input("Variance")
    axis = _channel_axis(x.ndim, ctx.attr("data_layout"))
    c = x.shape[axis]
    bshape = tuple(c if i == axis else 1 for i in range(x.ndim))
    eps = ctx.attr("epsilon")
    scale = ctx.input("Scale")
    bias = ctx.input("Bias")
    scale = jnp.ones((c,), x.dtype) if scale is None else scale.astype(x.dtype)
    bias = jnp.zeros((c,), x.dtype) if bias is None else bias.astype(x.dtype)
    global_stats = (ctx.attr("is_test") and not ctx.attr("trainable_statistics")) or ctx.attr("use_global_stats")
    if global_stats:
        mean, var = mean_in.astype(x.dtype), var_in.astype(x.dtype)
        inv_std = jax.lax.rsqrt(var + jnp.asarray(eps, x.dtype))
        y = (x - mean.reshape(bshape)) * (inv_std * scale).reshape(bshape) + bias.reshape(bshape)
        return {"Y": y, "MeanOut": mean_in, "VarianceOut": var_in,
                "SavedMean": jnp.zeros_like(mean_in), "SavedVariance": jnp.zeros_like(var_in),
                "ReserveSpace": jnp.zeros((0,), x.dtype)}
    axes = tuple(i for i in range(x.ndim) if i != axis)
    mask = None if ctx.real_rows is None else _row_mask(x, ctx.real_rows)
    synced = getattr(_SYNC, "axis", None)
    if synced is not None:       # a per-device data-parallel step with sync_batch_norm
        mean, var = _synced_moments(x, axes, mask, synced)
    elif mask is None:
        mean, var = _moments(x, axes)
    else:     # a LoD input (row_statistics): the statistics of its real rows, padding rows zero
        mean, var = _masked_moments(x, axes, mask)
    inv_std = jax.lax.rsqrt(var + jnp.asarray(eps, x.dtype))
    y = (x - mean) * inv_std * scale.reshape(bshape) + bias.reshape(bshape)
    if ctx.real_rows is not None:
        y = jnp.where(mask, y, jnp.zeros((), y.dtype))
    momentum = ctx.input("MomentumTensor")
    momentum = ctx.attr("momentum") if momentum is None else momentum.reshape(()).astype(mean_in.dtype)
    batch_mean = jax.lax.stop_gradient(mean.reshape(c)).astype(mean_in.dtype)
    batch_var = jax.lax.stop_gradient(var.reshape(c)).astype(var_in.dtype)
    return {"Y": y,
            "MeanOut": mean_in * momentum + batch_mean * (1 - momentum),
            "VarianceOut": var_in * momentum + batch_var * (1 - momentum),
            "SavedMean": batch_mean,
            "SavedVariance": jax.lax.stop_gradient(inv_std.reshape(c)).astype(var_in.dtype),
            # Paddle's cuDNN workspace; nothing to keep here.
            "ReserveSpace": jnp.zeros((0,), x.dtype)}


# A LoD input's rows are the batch: every frame of every utterance, its statistics over the real
# rows only (Fluid's ShareLoD passes the LoD on to Y).
row_statistics("batch_norm", "sync_batch_norm")


# -- layer_norm ----------------------------------------------------------------------------------------
def _layer_norm_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    begin = ctx.attr("begin_norm_axis")
    ctx.check(0 < begin < x.ndim or (x.ndim == 1 and begin == 0),
              f"begin_norm_axis={begin} must lie in [1, rank of X = {x.ndim})")
    right = prod(x.shape[begin:])
    for slot in ("Scale", "Bias"):
        v = ctx.input(slot)
        if v is not None:
            ctx.check(dims_equal(prod(v.shape), right),
                      f"{slot} must hold {right} values (the normalized dims {x.shape[begin:]}), got {v.shape}")
    ctx.set_output("Y", x.shape, x.dtype, x.lod_level)
    ctx.set_output("Mean", x.shape[:begin], x.dtype, 0)
    ctx.set_output("Variance", x.shape[:begin], x.dtype, 0)


@op("layer_norm", inputs="X Scale? Bias?", outputs="Y Mean Variance",
    attrs={"epsilon": 1e-5, "begin_norm_axis": 1}, infer_shape=_layer_norm_shape,
    no_grad_outputs=["Mean", "Variance"])
def layer_norm(ctx):
    """Normalize each example over the dims from ``begin_norm_axis`` on; Scale and Bias (one value
    per normalized element) follow. Mean and Variance have the shape X.shape[:begin_norm_axis]."""
    x = ctx.input("X")
    begin = ctx.attr("begin_norm_axis")
    axes = tuple(range(begin, x.ndim))
    mean, var = _moments(x, axes)
    y = (x - mean) * jax.lax.rsqrt(var + jnp.asarray(ctx.attr("epsilon"), x.dtype))
    norm_shape = x.shape[begin:]
    if ctx.input("Scale") is not None:
        y = y * ctx.input("Scale").reshape(norm_shape).astype(x.dtype)
    if ctx.input("Bias") is not None:
        y = y + ctx.input("Bias").reshape(norm_shape).astype(x.dtype)
    return {"Y": y, "Mean": mean.reshape(x.shape[:begin]), "Variance": var.reshape(x.shape[:begin])}


# -- group_norm ----------------------------------------------------------------------------------------
def _group_norm_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    layout = ctx.attr("data_layout")
    ctx.check(layout in ("NCHW", "NHWC"), f"data_layout must be 'NCHW' or 'NHWC', got {layout!r}")
    ctx.check(x.ndim >= 2, f"X must have rank >= 2, got {x.shape}")
    groups = ctx.attr("groups")
    c = x.shape[_channel_axis(x.ndim, layout)]
    ctx.check(groups is not None and groups >= 1, f"groups must be >= 1, got {groups}")
    ctx.check(c < 0 or c % groups == 0, f"the {c} channels do not split into groups={groups}")
    _check_channel_vector(ctx, "Scale", c)
    _check_channel_vector(ctx, "Bias", c)
    ctx.set_output("Y", x.shape, x.dtype, x.lod_level)
    ctx.set_output("Mean", (x.shape[0], groups), x.dtype, 0)
    ctx.set_output("Variance", (x.shape[0], groups), x.dtype, 0)


@op("group_norm", inputs="X Scale? Bias?", outputs="Y Mean Variance",
    attrs={"epsilon": 1e-5, "groups": 1, "data_layout": "NCHW"}, infer_shape=_group_norm_shape,
    no_grad_outputs=["Mean", "Variance"])
def group_norm(ctx):
    """Normalize each example over groups of ``groups`` consecutive channels (and all spatial
    positions), then scale and shift per channel. Mean and Variance are [N, groups]."""
    x = ctx.input("X")
    groups = ctx.attr("groups")
    channel_last = ctx.attr("data_layout") == "NHWC" and x.ndim > 2
    xc = jnp.moveaxis(x, -1, 1) if channel_last else x
    n, c = xc.shape[:2]
    g = xc.reshape((n, groups, -1))
    mean, var = _moments(g, (2,))
    y = ((g - mean) * jax.lax.rsqrt(var + jnp.asarray(ctx.attr("epsilon"), x.dtype))).reshape(xc.shape)
    bshape = (1, c) + (1,) * (xc.ndim - 2)
    if ctx.input("Scale") is not None:
        y = y * ctx.input("Scale").reshape(bshape).astype(x.dtype)
    if ctx.input("Bias") is not None:
        y = y + ctx.input("Bias").reshape(bshape).astype(x.dtype)
    if channel_last:
        y = jnp.moveaxis(y, 1, -1)
    return {"Y": y, "Mean": mean.reshape(n, groups), "Variance": var.reshape(n, groups)}


# -- instance_norm -----------------------------------------------------------------------------------
def _instance_norm_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.check(x.ndim >= 2, f"X must be [N, C, ...], got {x.shape}")
    _check_channel_vector(ctx, "Scale", x.shape[1])
    _check_channel_vector(ctx, "Bias", x.shape[1])
    ctx.set_output("Y", x.shape, x.dtype, x.lod_level)
    nc = prod(x.shape[:2])
    ctx.set_output("SavedMean", (nc,), x.dtype, 0)
    ctx.set_output("SavedVariance", (nc,), x.dtype, 0)


@op("instance_norm", inputs="X Scale? Bias?", outputs="Y SavedMean? SavedVariance?",
    attrs={"epsilon": 1e-5}, infer_shape=_instance_norm_shape,
    no_grad_outputs=["SavedMean", "SavedVariance"])
def instance_norm(ctx):
    """Normalize each channel of each example over its spatial positions, then scale and shift per
    channel. SavedMean / SavedVariance ([N·C]) are the mean and the inverse standard deviation."""
    x = ctx.input("X")
    axes = tuple(range(2, x.ndim))
    mean, var = _moments(x, axes)
    inv_std = jax.lax.rsqrt(var + jnp.asarray(ctx.attr("epsilon"), x.dtype))
    y = (x - mean) * inv_std
    bshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    if ctx.input("Scale") is not None:
        y = y * ctx.input("Scale").reshape(bshape).astype(x.dtype)
    if ctx.input("Bias") is not None:
        y = y + ctx.input("Bias").reshape(bshape).astype(x.dtype)
    nc = x.shape[0] * x.shape[1]
    return {"Y": y, "SavedMean": mean.reshape(nc), "SavedVariance": inv_std.reshape(nc)}


# -- lrn, norm, affine_channel --------------------------------------------------------------------
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


def _spectral_norm_shape(ctx: InferShapeContext) -> None:
    w = ctx.input("Weight")
    dim = ctx.attr("dim")
    ctx.check(w.ndim >= 2 and dim in (0, 1), f"spectral_norm needs Weight of rank >= 2 and dim 0 or 1, "
                                             f"got {w.shape} and dim {dim}")
    ctx.set_output("Out", w.shape, w.dtype, 0)


@op("spectral_norm", inputs="Weight U V", outputs="Out", attrs={"dim": 0, "power_iters": 1, "eps": 1e-12},
    infer_shape=_spectral_norm_shape, no_grad_inputs=["U", "V"])
def spectral_norm(ctx):
    """Weight / sigma, sigma its largest singular value estimated by ``power_iters`` power iterations
    from U [h] and V [w] (Weight with ``dim`` moved first, flattened to [h, w]). U and V are read, not
    updated (Paddle's kernel iterates on copies). The gradient is W / sigma's with the iterated u, v
    held constant (the full derivative once they have converged); Paddle's grad kernel computes
    dOut * (1 - u v^T * sum(W / sigma)) / sigma instead, which finite differences contradict
    (docs/fluid1.md)."""
    w, u, v = ctx.input("Weight"), ctx.input("U"), ctx.input("V")
    dim, eps = ctx.attr("dim"), ctx.attr("eps")
    perm = [dim] + [i for i in range(w.ndim) if i != dim]
    mat = jnp.transpose(w, perm).reshape(w.shape[dim], -1)
    const = lax.stop_gradient(mat)
    u, v = u.reshape(-1), v.reshape(-1)
    for _ in range(ctx.attr("power_iters")):
        v = const.T @ u
        v = v / (jnp.sqrt(jnp.sum(v * v)) + eps)
        u = const @ v
        u = u / (jnp.sqrt(jnp.sum(u * u)) + eps)
    u, v = lax.stop_gradient(u), lax.stop_gradient(v)
    sigma = u @ mat @ v
    return {"Out": w / sigma}
