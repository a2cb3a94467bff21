"""Optimizer ops of Fluid 1.x's other optimizers: ``decayed_adagrad``, ``adadelta``, ``ftrl`` and
``lars_momentum`` (the rest of the family is in :mod:`.optimizer`, whose helpers these share).

Slots, attributes and formulas are Paddle 2.6's kernels', which are Fluid 1.x's, with two
differences Fluid 1.x programs need: ``adadelta``'s ``LearningRate`` may be absent (Fluid 1.x's
op had none, and its update was not scaled: a missing rate is 1), and ``lars_momentum`` takes its
``lars_weight_decay`` as one float (Fluid 1.x) or as a list with one per parameter (Paddle 2.6).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax

from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext
from .optimizer import _PARAM_OUTS, _Update, _f, _inplace_shape, _scalar


@op("decayed_adagrad", inputs="Param Grad Moment LearningRate", outputs="ParamOut MomentOut",
    attrs={"decay": 0.95, "epsilon": 1e-6},
    infer_shape=_inplace_shape(("ParamOut", "Param"), ("MomentOut", "Moment")), grad=None)
def decayed_adagrad(ctx):
    """Decayed Adagrad: MomentOut = decay * Moment + (1 - decay) * g²;
    ParamOut = Param - lr * g / (sqrt(MomentOut) + epsilon).

    Written out: optax's ``scale_by_rms`` has this moment but puts epsilon inside the root.
    """
    u = _Update(ctx)
    decay = jnp.asarray(_f(ctx, "decay"), u.p.dtype)
    moment = decay * ctx.input("Moment") + (1 - decay) * u.g * u.g
    new_p = u.p - u.lr * u.g / (jnp.sqrt(moment) + jnp.asarray(_f(ctx, "epsilon"), u.p.dtype))
    return u.outputs(new_p, MomentOut=moment)


@op("adadelta", inputs="Param Grad AvgSquaredGrad AvgSquaredUpdate LearningRate? MasterParam?",
    outputs="ParamOut AvgSquaredGradOut AvgSquaredUpdateOut MasterParamOut?",
    attrs={"rho": 0.95, "epsilon": 1e-6, "multi_precision": False},
    infer_shape=_inplace_shape(*_PARAM_OUTS, ("AvgSquaredGradOut", "AvgSquaredGrad"),
                               ("AvgSquaredUpdateOut", "AvgSquaredUpdate")),
    grad=None)
def adadelta(ctx):
    """Adadelta: AvgSquaredGradOut = rho E[g²] + (1-rho) g²; update = -sqrt((E[dx²] + eps) /
    (AvgSquaredGradOut + eps)) * g; AvgSquaredUpdateOut = rho E[dx²] + (1-rho) update²;
    ParamOut = Param + lr * update (lr = 1 when ``LearningRate`` is absent, as in Fluid 1.x).

    All of it is optax's ``scale_by_adadelta`` (the same averages and step).
    """
    param, master = ctx.input("Param"), ctx.input("MasterParam")
    use_master = bool(ctx.attr("multi_precision")) and master is not None
    p = master if use_master else param
    g = jnp.asarray(ctx.input("Grad"), p.dtype)
    rate = ctx.input("LearningRate")
    lr = jnp.asarray(1, p.dtype) if rate is None else _scalar(rate, p.dtype)
    state = optax.ScaleByAdaDeltaState(e_g=ctx.input("AvgSquaredGrad"), e_x=ctx.input("AvgSquaredUpdate"))
    step, state = optax.scale_by_adadelta(rho=_f(ctx, "rho"), eps=_f(ctx, "epsilon")).update(g, state)
    new_p = p - lr * step
    out = {"ParamOut": new_p.astype(param.dtype), "AvgSquaredGradOut": state.e_g, "AvgSquaredUpdateOut": state.e_x}
    if use_master:
        out["MasterParamOut"] = new_p
    return out


@op("ftrl", inputs="Param SquaredAccumulator LinearAccumulator Grad LearningRate",
    outputs="ParamOut SquaredAccumOut LinearAccumOut",
    attrs={"l1": 0.0, "l2": 0.0, "lr_power": -0.5},
    infer_shape=_inplace_shape(("ParamOut", "Param"), ("SquaredAccumOut", "SquaredAccumulator"),
                               ("LinearAccumOut", "LinearAccumulator")),
    grad=None)
def ftrl(ctx):
    """FTRL-Proximal: n' = n + g²; z' = z + g - (n'^-p - n^-p) / lr * Param (p = lr_power, the
    roots for p = -0.5); ParamOut = (l1 sign(z') - z') / (n'^-p / lr + 2 l2) where |z'| > l1, else
    0; SquaredAccumOut = n'. Paddle's kernel adds 1e-10 to l1 and l2.

    Written out: optax has no FTRL.
    """
    p, g = ctx.input("Param"), ctx.input("Grad")
    dt = p.dtype
    sq, lin = ctx.input("SquaredAccumulator"), ctx.input("LinearAccumulator")
    lr = _scalar(ctx.input("LearningRate"), dt)
    l1 = jnp.asarray(_f(ctx, "l1"), dt) + jnp.asarray(1e-10, dt)
    l2 = jnp.asarray(_f(ctx, "l2"), dt) + jnp.asarray(1e-10, dt)
    power = _f(ctx, "lr_power")
    new_sq = sq + g * g
    if power == -0.5:
        new_root, old_root = jnp.sqrt(new_sq), jnp.sqrt(sq)
    else:
        new_root, old_root = new_sq ** jnp.asarray(-power, dt), sq ** jnp.asarray(-power, dt)
    new_lin = lin + g - (new_root - old_root) / lr * p
    shrunk = (l1 * jnp.sign(new_lin) - new_lin) / (new_root / lr + 2 * l2)
    new_p = jnp.where(jnp.abs(new_lin) > l1, shrunk, jnp.zeros_like(p))
    return {"ParamOut": new_p, "SquaredAccumOut": new_sq, "LinearAccumOut": new_lin}


def _lars_shapes(ctx: InferShapeContext) -> None:
    for slot, src in (("ParamOut", "Param"), ("VelocityOut", "Velocity"), ("MasterParamOut", "MasterParam")):
        for i, info in enumerate(ctx.inputs(src)):
            if info is not None:
                ctx.set_output(slot, info.shape, info.dtype, info.lod_level, index=i)


@op("lars_momentum", inputs="Param* Grad* Velocity* LearningRate* MasterParam*?",
    outputs="ParamOut* VelocityOut* MasterParamOut*?",
    attrs={"mu": 0.0, "lars_coeff": 0.001, "lars_weight_decay": Attr("floats", [0.0005]), "epsilon": 0.0,
           "multi_precision": False, "rescale_grad": 1.0},
    infer_shape=_lars_shapes, grad=None)
def lars_momentum(ctx):
    """LARS momentum, per parameter i: g = rescale_grad * Grad; local_lr = lr * lars_coeff *
    ||Param|| / (||g|| + wd * ||Param|| + epsilon) when wd > 0 and both norms are > 0, else lr;
    VelocityOut = mu * Velocity + local_lr * (g + wd * Param); ParamOut = Param - VelocityOut.

    ``wd`` is ``lars_weight_decay[i]`` (a single float applies to every parameter). The norms and
    the trust ratio are written out: optax's ``lars`` scales by its own trust ratio without
    Paddle's epsilon and keeps no velocity of the lr-scaled step.
    """
    params, grads, velocities = ctx.inputs("Param"), ctx.inputs("Grad"), ctx.inputs("Velocity")
    rates = ctx.inputs("LearningRate")
    decays = ctx.attr("lars_weight_decay")
    decays = [float(decays)] if np.ndim(decays) == 0 else [float(d) for d in decays]
    if len(decays) == 1:
        decays = decays * len(params)
    if len(decays) != len(params):
        raise ValueError(f"lars_momentum: lars_weight_decay has {len(decays)} values for {len(params)} parameters")
    mu, coeff, eps, rescale = (_f(ctx, k) for k in ("mu", "lars_coeff", "epsilon", "rescale_grad"))
    new_params, new_velocities = [], []
    for i, (p, g, v) in enumerate(zip(params, grads, velocities)):
        dt = p.dtype
        lr = _scalar(rates[i] if i < len(rates) else rates[0], dt)
        g = jnp.asarray(g, dt) * jnp.asarray(rescale, dt)
        wd = jnp.asarray(np.float32(decays[i]), dt)
        p_norm, g_norm = jnp.sqrt(jnp.sum(p * p)), jnp.sqrt(jnp.sum(g * g))
        trusted = (wd > 0) & (p_norm > 0) & (g_norm > 0)
        local_lr = jnp.where(trusted, lr * jnp.asarray(coeff, dt) * p_norm / (g_norm + wd * p_norm + eps), lr)
        v_new = jnp.asarray(mu, dt) * v + local_lr * (g + wd * p)
        new_velocities.append(v_new)
        new_params.append(p - v_new)
    return {"ParamOut": new_params, "VelocityOut": new_velocities}
