"""Rules for the ``<type>_grad`` ops Paddle writes, whose slots differ from fluidjax's own.

fluidjax's generic ``<type>_grad`` rule is ``jax.vjp`` of the forward rule, so it needs the
forward op's inputs; fluidjax's own backward writes them. Paddle's grad op makers often do not:
``transpose2_grad`` reads ``XShape`` and ``Out@GRAD`` (no ``X``), ``softmax_with_cross_entropy_grad``
reads ``Softmax`` and ``Label`` (no ``Logits``), ``tanh_grad`` reads ``Out``. Two tables serve them:

- :data:`DIRECT`: op type -> (applies(op), rule(ctx) -> {slot@GRAD: [value]}): the gradient
  computed from the slots Paddle's grad op has, as Paddle's grad kernel computes it.
- :data:`REBUILT`: op type -> fn(ctx) -> {slot: [value]}: the forward inputs the grad op lacks,
  rebuilt so that the generic rule runs: as zeros of the right shape where the gradient does not
  depend on their values (the op is linear in them, or they get no gradient by value), or from
  the slot that carries them (``einsum_grad``'s ``x_shape`` holds the operands).

``lower.auto_grad_compute`` asks :func:`direct_rule` first, then adds :func:`rebuilt_inputs`.
"""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp
import numpy as np

from ..ir import registry
from .lod_value import LoDValue
from .out_grads import OUT_GRADS

_G = "@GRAD"


def _data(value):
    return value.data if value.__class__ is LoDValue else value


def _given(op, slot: str) -> bool:
    return bool(op.inputs.get(slot))


def _attr(ctx, name, default):
    value = ctx.attr(name)
    return default if value is None else value


def _missing(slot: str, *present: str) -> Callable:
    """applies(op): ``slot`` is absent from the grad op and every slot of ``present`` is there."""
    return lambda op: not _given(op, slot) and all(_given(op, p) for p in present)


# -- direct rules ---------------------------------------------------------------------------------
def _from_out(ctx):
    """Activations whose grad op reads ``Out`` (``tanh_grad``): ``out_grads.OUT_GRADS``."""
    out, g = ctx.input("Out"), _data(ctx.input("Out" + _G))
    lod = out if out.__class__ is LoDValue else None
    out = _data(out)
    g = jnp.asarray(g, out.dtype).reshape(out.shape)
    x_grad = OUT_GRADS[ctx.opdef.forward_type](out, g, lambda name, default: _attr(ctx, name, default))
    return {"X" + _G: [LoDValue(x_grad, lod.offsets) if lod is not None else x_grad]}


def _to_xshape(ctx):
    """Reshape family (``reshape2``, ``squeeze2``, ``flatten_contiguous_range``, ...): ``Out@GRAD``
    reshaped to X's shape, which ``XShape`` carries as its dims after the first."""
    x_shape = tuple(ctx.input("XShape").shape[1:])
    return {"X" + _G: [_data(ctx.input("Out" + _G)).reshape(x_shape)]}


def _transpose2(ctx):
    """``transpose2_grad``: ``Out@GRAD`` transposed by the inverse permutation."""
    g = _data(ctx.input("Out" + _G))
    perm = [int(a) % g.ndim for a in ctx.attr("axis")]
    return {"X" + _G: [jnp.transpose(g, np.argsort(perm))]}


def _softmax_with_cross_entropy(ctx):
    """Paddle's ``CrossEntropyWithSoftmaxGradKernel`` from ``Softmax``, ``Label``, ``Loss@GRAD``."""
    softmax = _data(ctx.input("Softmax"))
    label = _data(ctx.input("Label"))
    dloss = jnp.asarray(_data(ctx.input("Loss" + _G)), softmax.dtype)
    axis = int(_attr(ctx, "axis", -1)) % softmax.ndim
    soft = bool(_attr(ctx, "soft_label", False))
    use_softmax = bool(_attr(ctx, "use_softmax", True))
    dloss = dloss.reshape(softmax.shape[:axis] + (1,) + softmax.shape[axis + 1:])
    if soft:
        label = jnp.asarray(label, softmax.dtype).reshape(softmax.shape)
        grad = (softmax - label) if use_softmax else -label / softmax
        return {"Logits" + _G: [grad * dloss]}
    label = jnp.asarray(label).reshape(dloss.shape).astype(jnp.int32)
    classes = jnp.arange(softmax.shape[axis]).reshape((-1,) + (1,) * (softmax.ndim - axis - 1))
    onehot = (classes == label).astype(softmax.dtype)
    keep = (label != int(_attr(ctx, "ignore_index", -100))).astype(softmax.dtype)
    if use_softmax:
        grad = (softmax - onehot) * dloss
    else:                                            # the input held probabilities: -1/p at the label
        grad = onehot * (-1.0 / jnp.where(onehot > 0, softmax, 1)) * dloss
    return {"Logits" + _G: [grad * keep]}


def _huber_loss(ctx):
    """``huber_loss_grad`` from ``Residual = Y - X``: d/dX = -clip(r, -delta, delta), d/dY = +."""
    r = _data(ctx.input("Residual"))
    g = jnp.asarray(_data(ctx.input("Out" + _G)), r.dtype).reshape(r.shape)
    delta = float(_attr(ctx, "delta", 1.0))
    dy = jnp.clip(r, -delta, delta) * g
    return {"X" + _G: [-dy], "Y" + _G: [dy]}


def _top_k(ctx):
    """``top_k_grad`` (Paddle copies no ``k``): ``Out@GRAD`` scattered to X at ``Indices``."""
    x = _data(ctx.input("X"))
    idx = jnp.asarray(_data(ctx.input("Indices"))).astype(jnp.int32)
    g = jnp.asarray(_data(ctx.input("Out" + _G)), x.dtype).reshape(idx.shape)
    flat_x = jnp.zeros((int(np.prod(x.shape[:-1], dtype=np.int64)), x.shape[-1]), x.dtype)
    rows = jnp.arange(flat_x.shape[0])[:, None]
    flat = flat_x.at[rows, idx.reshape(flat_x.shape[0], -1)].add(g.reshape(flat_x.shape[0], -1))
    return {"X" + _G: [flat.reshape(x.shape)]}


def _meshgrid(ctx):
    """``meshgrid_grad`` reads ``outputs@GRAD``: input i's gradient sums output i over the other axes."""
    xs = [_data(x) for x in ctx.inputs("X")]
    gs = ctx.inputs("outputs" + _G)
    grads = []
    for i, x in enumerate(xs):
        g = gs[i] if i < len(gs) else None
        if g is None:
            grads.append(jnp.zeros(x.shape, x.dtype))
            continue
        g = _data(g)
        grads.append(jnp.sum(g, axis=tuple(a for a in range(g.ndim) if a != i)).reshape(x.shape).astype(x.dtype))
    return {"X" + _G: grads}


_RESHAPES = ("reshape2", "squeeze2", "unsqueeze2", "flatten_contiguous_range", "flatten2")

# op type -> (applies(grad op) -> bool, rule(ctx) -> {slot@GRAD: [value]})
DIRECT: dict[str, tuple[Callable, Callable]] = {
    **{t: (_missing("X", "Out"), _from_out) for t in OUT_GRADS},
    **{t: (_missing("X", "XShape"), _to_xshape) for t in _RESHAPES},
    "transpose2": (_missing("X", "XShape"), _transpose2),
    "softmax_with_cross_entropy": (_missing("Logits", "Softmax"), _softmax_with_cross_entropy),
    "huber_loss": (_missing("X", "Residual"), _huber_loss),
    "top_k": (lambda op: "k" not in op.attrs and not _given(op, "K") and _given(op, "Indices"), _top_k),
    "meshgrid": (lambda op: _given(op, "outputs" + _G), _meshgrid),
}


def direct_rule(fwd, op) -> Callable | None:
    """The rule for a grad op Paddle wrote without what the generic rule needs, else None."""
    entry = DIRECT.get(fwd.type)
    return entry[1] if entry is not None and entry[0](op) else None


# -- forward inputs rebuilt as zeros --------------------------------------------------------------
def _first_grad(ctx, slot: str = "Out"):
    return next(_data(g) for g in ctx.inputs(slot + _G) if g is not None)


def _zeros(shape, dtype) -> list:
    return [jnp.zeros(tuple(shape), dtype)]


def _like_out_grad(slot: str = "X") -> Callable:
    """The missing input has the output's shape (elementwise and shape-keeping ops)."""
    def rebuilt(ctx):
        g = _first_grad(ctx)
        return {slot: _zeros(g.shape, g.dtype)}
    return rebuilt


def _pad_input(ctx):
    g = _first_grad(ctx)
    pads = list(ctx.attr("paddings"))
    shape = tuple(d - pads[2 * i] - pads[2 * i + 1] for i, d in enumerate(g.shape))
    return {"X": _zeros(shape, g.dtype)}


def _pixel_shuffle_input(ctx):
    g = _first_grad(ctx)
    r = int(ctx.attr("upscale_factor"))
    if _attr(ctx, "data_format", "NCHW") == "NHWC":
        n, h, w, c = g.shape
        return {"X": _zeros((n, h // r, w // r, c * r * r), g.dtype)}
    n, c, h, w = g.shape
    return {"X": _zeros((n, c * r * r, h // r, w // r), g.dtype)}


def _pixel_unshuffle_input(ctx):
    g = _first_grad(ctx)
    r = int(ctx.attr("downscale_factor"))
    if _attr(ctx, "data_format", "NCHW") == "NHWC":
        n, h, w, c = g.shape
        return {"X": _zeros((n, h * r, w * r, c // (r * r)), g.dtype)}
    n, c, h, w = g.shape
    return {"X": _zeros((n, c // (r * r), h * r, w * r), g.dtype)}


def _unstack_input(ctx):
    g = _first_grad(ctx, "Y")
    axis = int(_attr(ctx, "axis", 0)) % (g.ndim + 1)
    num = len(ctx.inputs("Y" + _G))
    return {"X": _zeros(g.shape[:axis] + (num,) + g.shape[axis:], g.dtype)}


def _channel_bias(ctx):
    """A missing per-channel ``Bias`` (its gradient is a sum of ``Out@GRAD``, whatever its value)."""
    x = _data(ctx.input("X"))
    layout = _attr(ctx, "data_layout", "NCHW")
    return {"Bias": _zeros((x.shape[-1] if layout == "NHWC" else x.shape[1],), x.dtype)}


def _pad_value(ctx):
    x = _data(ctx.input("X"))
    return {"PadValue": _zeros((1,), x.dtype)}


def _batch_norm_stats(ctx):
    """``batch_norm_grad`` has ``MeanOut``/``VarianceOut`` (the same variables as the forward's
    ``Mean``/``Variance``, updated in place): Y reads them only with global stats, before any update."""
    return {"Mean": ctx.inputs("MeanOut"), "Variance": ctx.inputs("VarianceOut")}


def _einsum_operands(ctx):
    """Paddle's einsum writes each operand's data to ``XShape`` (the grad op's ``x_shape``)."""
    return {"Operands": ctx.inputs("x_shape")}


# op type -> fn(ctx) -> {slot: [value]} for the forward inputs a Paddle grad op leaves out
REBUILT: dict[str, Callable] = {
    **{t: _like_out_grad() for t in ("floor", "ceil", "round", "trunc", "tril_triu", "label_smooth",
                                     "channel_shuffle", "shuffle_channel")},
    "set_value": _like_out_grad("Input"),
    "scatter": _like_out_grad("X"),
    "pad": _pad_input,
    "pixel_shuffle": _pixel_shuffle_input,
    "pixel_unshuffle": _pixel_unshuffle_input,
    "unstack": _unstack_input,
    "affine_channel": _channel_bias,
    "instance_norm": _channel_bias,
    "einsum": _einsum_operands,
    "batch_norm": _batch_norm_stats,
    "sequence_pad": _pad_value,
}


def rebuilt_inputs(ctx, fwd) -> dict[str, list]:
    """The forward inputs the grad op lacks, where :data:`REBUILT` knows how to rebuild them."""
    rule = REBUILT.get(fwd.type)
    if rule is None:
        return {}
    missing = [s.name for s in fwd.inputs if not _given(ctx.op, s.name)]
    if not missing:
        return {}
    return {slot: values for slot, values in rule(ctx).items() if slot in missing}


# -- grad ops Paddle names differently ------------------------------------------------------------
def _cross_entropy2(ctx):
    """``cross_entropy_grad2``: -Y@GRAD / MatchX at the label, 0 elsewhere and where ignored."""
    match = _data(ctx.input("MatchX"))
    label = jnp.asarray(_data(ctx.input("Label"))).astype(jnp.int32)
    x_shape = tuple(ctx.input("XShape").shape[:-1])        # XShape is X's dims then a 0
    g = jnp.asarray(_data(ctx.input("Y" + _G)), match.dtype).reshape(match.shape)
    keep = label != int(_attr(ctx, "ignore_index", -100))
    at_label = jnp.where(keep, -g / jnp.where(keep, match, 1), 0)
    onehot = jnp.arange(x_shape[-1]) == label
    return {"X" + _G: [jnp.where(onehot, at_label, jnp.zeros((), match.dtype)).astype(match.dtype)]}


DIRECT["cross_entropy2"] = (_missing("X", "MatchX"), _cross_entropy2)

# Paddle calls cross_entropy2's grad op ``cross_entropy_grad2`` (not ``cross_entropy2_grad``).
registry.register(registry.OpDef(
    type="cross_entropy_grad2", inputs=registry._slots("Label? MatchX? XShape? Y@GRAD?"),
    outputs=registry._slots("X@GRAD?"), attrs={"ignore_index": registry._as_attr(-100)},
    compute=None, grad=None, forward_type="cross_entropy2"))
