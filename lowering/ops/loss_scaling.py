"""Loss scaling for mixed-precision training: ``check_finite_and_unscale`` and
``update_loss_scaling``, the two ops Paddle's AMP rewrite (``fj.amp.decorate``) appends after the
backward pass.

The loss is multiplied by a scale before the backward pass, so that small float16 gradients do
not flush to zero; ``check_finite_and_unscale`` divides the gradients by the scale again and
reports whether any of them overflowed; ``update_loss_scaling`` zeroes the gradients of such a
step (the optimizer then moves nothing, or skips the step through its ``SkipUpdate`` input) and
adapts the scale: ``decr_ratio`` times after ``decr_every_n_nan_or_inf`` steps that overflowed,
``incr_ratio`` times after ``incr_every_n_steps`` steps in a row that did not. Both are Paddle
2.6's ops (slots, attributes and the arithmetic of its kernels); the scale and the step counters
are ``[1]`` tensors the program keeps (float32, int32).
"""

from __future__ import annotations

import jax.numpy as jnp

from ...ir.shape import InferShapeContext
from ...ir.registry import op


def _flag(value) -> jnp.ndarray:
    """A one-element bool tensor as a 0-d bool."""
    return jnp.asarray(value).reshape(()).astype(bool)


def _check_shape(ctx: InferShapeContext) -> None:
    xs = ctx.inputs("X")
    scale = ctx.input("Scale")
    ctx.check(scale.dtype in ("float32", "float64"), f"Scale must be float32 or float64, got {scale.dtype}")
    for i, x in enumerate(xs):
        ctx.check(x.dtype in ("float16", "bfloat16", "float32", "float64"),
                  f"X must hold floating-point tensors, {x.name!r} is {x.dtype}")
        ctx.set_output("Out", x.shape, x.dtype, x.lod_level, index=i)
    ctx.set_output("FoundInfinite", (1,), "bool", 0)


@op("check_finite_and_unscale", inputs="X* Scale", outputs="Out* FoundInfinite",
    infer_shape=_check_shape, grad=None)
def check_finite_and_unscale(ctx):
    """Out[i] = X[i] / Scale (computed as ``X * (1 / Scale)`` in float32 for float16/bfloat16
    tensors, as Paddle's kernels do); FoundInfinite ([1] bool) is whether any element of any X is
    inf or nan. Paddle leaves Out unspecified when FoundInfinite is set (its CPU kernel zeroes
    the tensors after the first bad one); here Out is the unscaled X either way, as on its GPU."""
    xs = ctx.inputs("X")
    scale = ctx.input("Scale")
    inverse = 1.0 / scale.reshape(())
    found = jnp.zeros((), bool)
    outs = []
    for x in xs:
        found = found | ~jnp.all(jnp.isfinite(x))
        wide = x.astype(inverse.dtype) if x.dtype in (jnp.float16, jnp.bfloat16) else x
        outs.append((wide * inverse.astype(wide.dtype)).astype(x.dtype))
    return {"Out": outs, "FoundInfinite": found.reshape((1,))}


def _update_shape(ctx: InferShapeContext) -> None:
    for i, x in enumerate(ctx.inputs("X")):
        ctx.set_output("Out", x.shape, x.dtype, x.lod_level, index=i)
    scale = ctx.input("PrevLossScaling")
    ctx.check(scale.dtype in ("float32", "float64"), f"PrevLossScaling must be float32 or float64, got {scale.dtype}")
    ctx.check(ctx.input("FoundInfinite").dtype == "bool", "FoundInfinite must be a bool tensor")
    for slot in ("InGoodSteps", "InBadSteps"):
        ctx.check(ctx.input(slot).dtype == "int32", f"{slot} must be an int32 tensor, got {ctx.input(slot).dtype}")
    ctx.set_output("LossScaling", scale.shape, scale.dtype, 0)
    ctx.set_output("OutGoodSteps", ctx.input("InGoodSteps").shape, "int32", 0)
    ctx.set_output("OutBadSteps", ctx.input("InBadSteps").shape, "int32", 0)


@op("update_loss_scaling", inputs="X* FoundInfinite PrevLossScaling InGoodSteps InBadSteps StopUpdate?",
    outputs="Out* LossScaling OutGoodSteps OutBadSteps",
    attrs={"incr_every_n_steps": 1000, "decr_every_n_nan_or_inf": 2, "incr_ratio": 2.0, "decr_ratio": 0.5,
           "stop_update": False},
    infer_shape=_update_shape, grad=None)
def update_loss_scaling(ctx):
    """Paddle's dynamic loss scaling, one step.

    Out[i] = 0 if FoundInfinite else X[i]. Unless the step is stopped (``StopUpdate`` input, else
    the ``stop_update`` attribute; the outputs then equal the inputs): on an overflow, good steps
    restart at 0 and bad steps count up; when they reach ``decr_every_n_nan_or_inf`` the scale
    becomes ``max(scale * decr_ratio, 1)`` and the count restarts. Without one, bad steps restart
    at 0 and good steps count up; when they reach ``incr_every_n_steps`` the scale becomes
    ``scale * incr_ratio`` (kept as it was if that is not finite) and the count restarts.
    The counts are compared with ``==``, as Paddle's kernel does.
    """
    found = _flag(ctx.input("FoundInfinite"))
    outs = [jnp.where(found, jnp.zeros((), x.dtype), x) for x in ctx.inputs("X")]
    prev = ctx.input("PrevLossScaling")
    good_in, bad_in = ctx.input("InGoodSteps"), ctx.input("InBadSteps")
    scale, good, bad = prev.reshape(()), good_in.reshape(()), bad_in.reshape(())
    decr_n, incr_n = int(ctx.attr("decr_every_n_nan_or_inf")), int(ctx.attr("incr_every_n_steps"))
    decr = jnp.asarray(ctx.attr("decr_ratio"), jnp.float32).astype(scale.dtype)
    incr = jnp.asarray(ctx.attr("incr_ratio"), jnp.float32).astype(scale.dtype)

    bad_count = bad + 1
    shrink = bad_count == decr_n
    lower = jnp.maximum(scale * decr, jnp.ones((), scale.dtype))
    good_count = good + 1
    grow = good_count == incr_n
    higher = scale * incr
    higher = jnp.where(jnp.isfinite(higher), higher, scale)

    new_scale = jnp.where(found, jnp.where(shrink, lower, scale), jnp.where(grow, higher, scale))
    new_good = jnp.where(found, jnp.zeros_like(good), jnp.where(grow, jnp.zeros_like(good), good_count))
    new_bad = jnp.where(found, jnp.where(shrink, jnp.zeros_like(bad), bad_count), jnp.zeros_like(bad))

    stop = ctx.input("StopUpdate")
    stop = _flag(stop) if stop is not None else bool(ctx.attr("stop_update"))
    if stop is True:
        new_scale, new_good, new_bad = scale, good, bad
    elif stop is not False:
        new_scale = jnp.where(stop, scale, new_scale)
        new_good = jnp.where(stop, good, new_good)
        new_bad = jnp.where(stop, bad, new_bad)
    return {"Out": outs, "LossScaling": new_scale.reshape(prev.shape),
            "OutGoodSteps": new_good.reshape(good_in.shape).astype(good_in.dtype),
            "OutBadSteps": new_bad.reshape(bad_in.shape).astype(bad_in.dtype)}
