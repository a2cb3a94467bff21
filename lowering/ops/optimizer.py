"""Optimizer ops (``sgd``, ``momentum``, ``adam``, ``adamw``, ``adagrad``, ``rmsprop``, ``adamax``,
``lamb``) and the gradient-clipping helpers Paddle emits with them (``squared_l2_norm``,
``clip_by_norm``).

An optimizer op reads a parameter, its gradient, the learning rate and its accumulators, and
writes the updated values; the frontend points each ``…Out`` slot at the same variable as its
input, so the Executor donates the buffer and XLA updates it in place. Slots, attributes and
formulas are Paddle 2.6's. Where optax has exactly Paddle's formula the rule calls optax; where it
does not (usually because Paddle's op takes the running products ``Beta1Pow``/``Beta2Pow`` as
tensors, while optax derives bias corrections from an integer step count it keeps itself) the
rule writes the formula and says why.

``multi_precision`` with a ``MasterParam`` updates the master copy (float32) and writes the
parameter as its cast, as Paddle does for float16 parameters.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax

from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext

# -- shared pieces ----------------------------------------------------------------------------


def _inplace_shape(*pairs: tuple[str, str]):
    """A shape rule: each output slot has its input slot's shape and dtype (absent ones skipped)."""

    def rule(ctx: InferShapeContext) -> None:
        for out, src in pairs:
            info = ctx.input(src)
            if info is not None and ctx.has_output(out):
                ctx.set_output(out, info.shape, info.dtype, info.lod_level)

    return rule


_PARAM_OUTS = (("ParamOut", "Param"), ("MasterParamOut", "MasterParam"))


class _Update:
    """The parameter an update works on (the master copy under ``multi_precision``), its gradient
    and learning rate in that dtype, and how to write the results back."""

    def __init__(self, ctx) -> None:
        self.param = ctx.input("Param")
        master = ctx.input("MasterParam")
        self.use_master = bool(ctx.attr("multi_precision")) and master is not None
        self.p = master if self.use_master else self.param
        self.g = jnp.asarray(ctx.input("Grad"), self.p.dtype)
        self.lr = _scalar(ctx.input("LearningRate"), self.p.dtype)
        skip = ctx.input("SkipUpdate")
        self.skip = None if skip is None else jnp.asarray(skip).reshape(()).astype(bool)

    def keep(self, new, old):
        """``new``, or ``old`` when the op's ``SkipUpdate`` flag is set (AMP found an inf/nan)."""
        return new if self.skip is None else jnp.where(self.skip, old, new)

    def outputs(self, new_p, **others) -> dict:
        out = {"ParamOut": self.keep(new_p, self.p).astype(self.param.dtype)}
        if self.use_master:
            out["MasterParamOut"] = self.keep(new_p, self.p)
        return {**out, **others}


def _scalar(value, dtype):
    """A one-element tensor (shape ``[]`` or ``[1]``) as a 0-d array of ``dtype``."""
    return jnp.asarray(value, dtype).reshape(())


def _f(ctx, name: str) -> float:
    """A FLOAT attribute as Paddle holds it: rounded to float32 (it matters for float64 params)."""
    return float(np.float32(ctx.attr(name)))


def _tensor_or_attr(ctx, slot: str, attr: str, dtype):
    t = ctx.input(slot)
    return _scalar(t, dtype) if t is not None else jnp.asarray(_f(ctx, attr), dtype)


# -- sgd / momentum ---------------------------------------------------------------------------


@op("sgd", inputs="Param LearningRate Grad MasterParam?", outputs="ParamOut MasterParamOut?",
    attrs={"multi_precision": False}, infer_shape=_inplace_shape(*_PARAM_OUTS), grad=None)
def sgd(ctx):
    """ParamOut = Param - LearningRate * Grad.

    Written out: optax.sgd without momentum is this same product, and calling it would add nothing.
    """
    u = _Update(ctx)
    return u.outputs(u.p - u.lr * u.g)


@op("momentum", inputs="Param Grad Velocity LearningRate MasterParam?",
    outputs="ParamOut VelocityOut MasterParamOut?",
    attrs={"mu": 0.9, "use_nesterov": False, "regularization_method": "", "regularization_coeff": 0.0,
           "multi_precision": False, "rescale_grad": 1.0},
    infer_shape=_inplace_shape(*_PARAM_OUTS, ("VelocityOut", "Velocity")), grad=None)
def momentum(ctx):
    """Momentum SGD (Paddle's formula, which is optax's ``add_decayed_weights`` + ``trace``):

    g = rescale_grad * Grad (+ regularization_coeff * Param when regularization_method is
    "l2_decay"); VelocityOut = mu * Velocity + g; ParamOut = Param - lr * VelocityOut, or with
    ``use_nesterov`` Param - lr * (g + mu * VelocityOut).

    ``rescale_grad`` is applied as Paddle documents it and its GPU kernel does; Paddle's CPU kernel
    ignores it.
    """
    u = _Update(ctx)
    g = u.g * jnp.asarray(_f(ctx, "rescale_grad"), u.p.dtype)
    if ctx.attr("regularization_method") == "l2_decay":
        g, _ = optax.add_decayed_weights(_f(ctx, "regularization_coeff")).update(g, optax.EmptyState(), u.p)
    velocity = ctx.input("Velocity")
    step, state = optax.trace(decay=_f(ctx, "mu"), nesterov=bool(ctx.attr("use_nesterov"))).update(
        g, optax.TraceState(trace=velocity))
    return u.outputs(u.p - u.lr * step, VelocityOut=u.keep(state.trace, velocity))


# -- the Adam family ----------------------------------------------------------------------------

_ADAM_INPUTS = ("Param Grad LearningRate Moment1 Moment2 Beta1Pow Beta2Pow MasterParam? SkipUpdate? "
                "Beta1Tensor? Beta2Tensor? EpsilonTensor?")
_ADAM_OUTPUTS = "ParamOut Moment1Out Moment2Out Beta1PowOut Beta2PowOut MasterParamOut?"
_ADAM_ATTRS = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "lazy_mode": False,
               "min_row_size_to_use_multithread": Attr("long", 1000), "multi_precision": False,
               "use_global_beta_pow": False}
_ADAM_SHAPES = _inplace_shape(*_PARAM_OUTS, ("Moment1Out", "Moment1"), ("Moment2Out", "Moment2"),
                              ("Beta1PowOut", "Beta1Pow"), ("Beta2PowOut", "Beta2Pow"))


def _adam(ctx, decoupled_decay: bool) -> dict:
    """Adam as Paddle computes it, shared by ``adam`` and ``adamw``.

    The moment averages are optax's (``optax.tree.update_moment``: the same EMA). The step is
    written out: Paddle's bias correction uses the ``Beta1Pow``/``Beta2Pow`` tensors (state the
    program holds and may be set), and places epsilon as ``epsilon * sqrt(1 - beta2^t)`` next to
    the raw ``sqrt(Moment2)``; optax's ``scale_by_adam`` corrects by ``b ** count`` from its own
    integer counter, which cannot take those inputs.
    """
    u = _Update(ctx)
    dt = u.p.dtype
    beta1 = _tensor_or_attr(ctx, "Beta1Tensor", "beta1", dt)
    beta2 = _tensor_or_attr(ctx, "Beta2Tensor", "beta2", dt)
    eps = _tensor_or_attr(ctx, "EpsilonTensor", "epsilon", dt)
    b1p_in, b2p_in = ctx.input("Beta1Pow"), ctx.input("Beta2Pow")
    b1p, b2p = _scalar(b1p_in, dt), _scalar(b2p_in, dt)
    m1_in, m2_in = ctx.input("Moment1"), ctx.input("Moment2")
    m1 = optax.tree.update_moment(u.g, m1_in, beta1, 1)
    m2 = optax.tree.update_moment_per_elem_norm(u.g, m2_in, beta2, 2)
    p = u.p
    lr = u.lr
    if decoupled_decay:
        # AdamW: the decay acts on the parameter before the Adam step, scaled by lr * lr_ratio.
        lr = lr * jnp.asarray(_f(ctx, "lr_ratio"), dt)
        if ctx.attr("with_decay"):
            p = p * (1 - lr * jnp.asarray(_f(ctx, "coeff"), dt))
    lr_t = lr * jnp.sqrt(1 - b2p) / (1 - b1p)
    new_p = p - lr_t * (m1 / (jnp.sqrt(m2) + eps * jnp.sqrt(1 - b2p)))
    if ctx.attr("use_global_beta_pow"):
        b1p_out, b2p_out = b1p_in, b2p_in
    else:
        b1p_out = (b1p_in * beta1.astype(b1p_in.dtype)).astype(b1p_in.dtype)
        b2p_out = (b2p_in * beta2.astype(b2p_in.dtype)).astype(b2p_in.dtype)
        # The pows are updated in place (donated) and also read for lr_t by another fusion: with
        # nothing ordering the two, XLA copies each pow before the step (two copy kernels per
        # parameter on a GPU). A select on a predicate computed from lr_t, true whatever lr_t
        # holds (NaN > inf is false too), makes the update come after the read; XLA cannot fold it.
        after_read = ~(lr_t > jnp.inf)
        b1p_out = jnp.where(after_read, b1p_out, b1p_in)
        b2p_out = jnp.where(after_read, b2p_out, b2p_in)
    return u.outputs(new_p, Moment1Out=u.keep(m1, m1_in), Moment2Out=u.keep(m2, m2_in),
                     Beta1PowOut=u.keep(b1p_out, b1p_in), Beta2PowOut=u.keep(b2p_out, b2p_in))


@op("adam", inputs=_ADAM_INPUTS, outputs=_ADAM_OUTPUTS, attrs=_ADAM_ATTRS, infer_shape=_ADAM_SHAPES,
    grad=None)
def adam(ctx):
    """Adam: Moment1Out = beta1 m1 + (1-beta1) g; Moment2Out = beta2 m2 + (1-beta2) g²;
    lr_t = lr sqrt(1 - beta2^t) / (1 - beta1^t);
    ParamOut = Param - lr_t Moment1Out / (sqrt(Moment2Out) + epsilon sqrt(1 - beta2^t));
    Beta{1,2}PowOut = Beta{1,2}Pow * beta{1,2} (unless ``use_global_beta_pow``).
    """
    return _adam(ctx, decoupled_decay=False)


@op("adamw", inputs=_ADAM_INPUTS, outputs=_ADAM_OUTPUTS,
    attrs={**_ADAM_ATTRS, "lr_ratio": 1.0, "coeff": 0.01, "with_decay": False},
    infer_shape=_ADAM_SHAPES, grad=None)
def adamw(ctx):
    """AdamW: with ``with_decay``, Param is first scaled by (1 - lr * lr_ratio * coeff); then the
    Adam step of ``adam`` with learning rate lr * lr_ratio.

    ``lr_ratio`` scales both, as Paddle documents it and its GPU kernel does; Paddle's CPU kernel
    applies it to the decay only (and its Python API refuses ``lr_ratio`` on CPU).
    """
    return _adam(ctx, decoupled_decay=True)


@op("adamax", inputs="Param Grad LearningRate Moment InfNorm Beta1Pow MasterParam?",
    outputs="ParamOut MomentOut InfNormOut MasterParamOut?",
    attrs={"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "multi_precision": False},
    infer_shape=_inplace_shape(*_PARAM_OUTS, ("MomentOut", "Moment"), ("InfNormOut", "InfNorm")),
    grad=None)
def adamax(ctx):
    """Adamax: MomentOut = beta1 m + (1-beta1) g; InfNormOut = max(beta2 u + epsilon, |g|);
    ParamOut = Param - lr / (1 - Beta1Pow) * MomentOut / InfNormOut. Beta1Pow is read only (the
    optimizer appends a ``scale`` op that advances it).

    The moment is optax's EMA; the infinity norm is written out because optax's
    ``update_infinity_moment`` adds epsilon to |g| (max(|g| + eps, b2 u)), Paddle to the decayed
    norm, and optax's Adamax corrects by its own step counter rather than the Beta1Pow tensor.
    """
    u = _Update(ctx)
    dt = u.p.dtype
    b1p = _scalar(ctx.input("Beta1Pow"), dt)
    m = optax.tree.update_moment(u.g, ctx.input("Moment"), _f(ctx, "beta1"), 1)
    inf = jnp.maximum(_f(ctx, "beta2") * ctx.input("InfNorm") + jnp.asarray(_f(ctx, "epsilon"), dt),
                      jnp.abs(u.g))
    new_p = u.p - (u.lr / (1 - b1p)) * (m / inf)
    return u.outputs(new_p, MomentOut=m, InfNormOut=inf)


@op("lamb", inputs="Param Grad LearningRate Moment1 Moment2 Beta1Pow Beta2Pow MasterParam? SkipUpdate?",
    outputs="ParamOut Moment1Out Moment2Out Beta1PowOut? Beta2PowOut? MasterParamOut?",
    attrs={"weight_decay": 0.0, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-6, "always_adapt": False,
           "multi_precision": False},
    infer_shape=_ADAM_SHAPES, grad=None)
def lamb(ctx):
    """LAMB: the Adam moments, r = m̂ / (sqrt(v̂) + epsilon) + weight_decay * Param with
    m̂ = Moment1Out / (1 - Beta1Pow), v̂ = Moment2Out / (1 - Beta2Pow); ParamOut = Param - lr *
    trust * r with trust = ||Param|| / ||r|| (1 when either norm is 0).

    The moment EMAs and the trust ratio are optax's (``update_moment``, ``scale_by_trust_ratio``:
    the same formulas); the bias correction is written out because it reads the Beta*Pow tensors.
    Paddle 2.6 skips the trust ratio when weight_decay is 0, unless ``always_adapt``.
    """
    u = _Update(ctx)
    dt = u.p.dtype
    b1p_in, b2p_in = ctx.input("Beta1Pow"), ctx.input("Beta2Pow")
    b1p, b2p = _scalar(b1p_in, dt), _scalar(b2p_in, dt)
    m1_in, m2_in = ctx.input("Moment1"), ctx.input("Moment2")
    m1 = optax.tree.update_moment(u.g, m1_in, _f(ctx, "beta1"), 1)
    m2 = optax.tree.update_moment_per_elem_norm(u.g, m2_in, _f(ctx, "beta2"), 2)
    decay = _f(ctx, "weight_decay")
    r = (m1 / (1 - b1p)) / (jnp.sqrt(m2 / (1 - b2p)) + jnp.asarray(_f(ctx, "epsilon"), dt)) + decay * u.p
    if decay != 0 or ctx.attr("always_adapt"):
        r, _ = optax.scale_by_trust_ratio().update(r, optax.EmptyState(), u.p)
    new_p = u.p - u.lr * r
    b1p_out = (b1p_in * _f(ctx, "beta1")).astype(b1p_in.dtype)
    b2p_out = (b2p_in * _f(ctx, "beta2")).astype(b2p_in.dtype)
    return u.outputs(new_p, Moment1Out=u.keep(m1, m1_in), Moment2Out=u.keep(m2, m2_in),
                     Beta1PowOut=u.keep(b1p_out, b1p_in), Beta2PowOut=u.keep(b2p_out, b2p_in))


# -- Adagrad / RMSProp ----------------------------------------------------------------------------


@op("adagrad", inputs="Param Grad Moment LearningRate MasterParam?", outputs="ParamOut MomentOut MasterParamOut?",
    attrs={"epsilon": 1e-6, "multi_precision": False},
    infer_shape=_inplace_shape(*_PARAM_OUTS, ("MomentOut", "Moment")), grad=None)
def adagrad(ctx):
    """Adagrad: MomentOut = Moment + g²; ParamOut = Param - lr g / (sqrt(MomentOut) + epsilon).

    Written out: optax's ``scale_by_rss`` puts epsilon inside the square root.
    """
    u = _Update(ctx)
    moment = ctx.input("Moment") + u.g * u.g
    new_p = u.p - u.lr * u.g / (jnp.sqrt(moment) + jnp.asarray(_f(ctx, "epsilon"), u.p.dtype))
    return u.outputs(new_p, MomentOut=moment)


@op("rmsprop", inputs="Param MeanSquare Grad Moment LearningRate MeanGrad? MasterParam?",
    outputs="ParamOut MomentOut MeanSquareOut MeanGradOut MasterParamOut?",
    attrs={"epsilon": 1e-10, "decay": 0.9, "momentum": 0.0, "centered": False, "multi_precision": False},
    infer_shape=_inplace_shape(*_PARAM_OUTS, ("MomentOut", "Moment"), ("MeanSquareOut", "MeanSquare"),
                               ("MeanGradOut", "MeanGrad")),
    grad=None)
def rmsprop(ctx):
    """RMSProp: MeanSquareOut = decay ms + (1-decay) g²; MomentOut = momentum * Moment +
    lr g / sqrt(MeanSquareOut + epsilon); ParamOut = Param - MomentOut. ``centered`` also keeps
    MeanGradOut = decay mg + (1-decay) g and divides by sqrt(MeanSquareOut - MeanGradOut² + epsilon).

    All of it is optax's: ``scale_by_rms`` / ``scale_by_stddev`` (epsilon inside the root), then
    ``trace`` of the lr-scaled step, whose trace is Paddle's Moment.
    """
    u = _Update(ctx)
    decay, eps = _f(ctx, "decay"), _f(ctx, "epsilon")
    mean_square, mean_grad = ctx.input("MeanSquare"), ctx.input("MeanGrad")
    if ctx.attr("centered"):
        step, state = optax.scale_by_stddev(decay=decay, eps=eps).update(
            u.g, optax.ScaleByRStdDevState(mu=mean_grad, nu=mean_square))
        mean_square, mean_grad = state.nu, state.mu
    else:
        step, state = optax.scale_by_rms(decay=decay, eps=eps).update(u.g, optax.ScaleByRmsState(nu=mean_square))
        mean_square = state.nu
    _, moment = optax.trace(decay=_f(ctx, "momentum")).update(u.lr * step, optax.TraceState(trace=ctx.input("Moment")))
    outs = {"MomentOut": moment.trace, "MeanSquareOut": mean_square}
    if mean_grad is not None:
        outs["MeanGradOut"] = mean_grad
    return u.outputs(u.p - moment.trace, **outs)


# -- gradient-clipping helpers ---------------------------------------------------------------------


def _norm_shape(ctx: InferShapeContext) -> None:
    ctx.set_output("Out", (1,), ctx.input("X").dtype, 0)


@op("squared_l2_norm", inputs="X", outputs="Out", infer_shape=_norm_shape)
def squared_l2_norm(ctx):
    """Out = sum(X²), a one-element tensor of shape [1] (ClipGradByGlobalNorm's building block)."""
    x = ctx.input("X")
    return {"Out": jnp.sum(jnp.square(x)).reshape((1,))}


@op("clip_by_norm", inputs="X", outputs="Out", attrs={"max_norm": 1.0},
    infer_shape=_inplace_shape(("Out", "X")), grad=None)
def clip_by_norm(ctx):
    """Out = X * max_norm / ||X|| when the L2 norm ||X|| exceeds ``max_norm``, else X.

    No gradient, as in Paddle (it only rescales gradients).
    """
    x = ctx.input("X")
    max_norm = jnp.asarray(_f(ctx, "max_norm"), x.dtype)
    norm = jnp.sqrt(jnp.sum(jnp.square(x)))
    # Paddle adds 1e-6 to a (near) zero norm before dividing; only reachable with max_norm < 0.
    safe = norm + jnp.where(norm <= 1e-30, jnp.asarray(1e-6, x.dtype), jnp.asarray(0, x.dtype))
    scale = jnp.where(norm <= max_norm, jnp.asarray(1, x.dtype), max_norm / safe)
    return {"Out": x * scale}
