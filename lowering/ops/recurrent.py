"""``recurrent`` (StaticRNN's op) and ``recurrent_grad``: a step block run once per time step, as
one ``lax.scan``.

Paddle's wire structure (Fluid's ``StaticRNN._complete_op``): the sub-block reads each step
input under the outer input's own name (``inputs``, each [T, ...], sliced on its first dim), the
previous step's states under the names ``ex_states`` (the first step reads ``initial_states``,
in the same order), and writes the new states under ``states`` and each step's outputs under the
names of the op's ``outputs`` (stacked to [T, ...]). ``parameters`` lists the outer variables
the block reads (a layer's weights, other outer values). ``reverse`` runs the steps from T-1
down to 0 (outputs stay aligned with the inputs' time).

The step block lowers through ``ctx.sub_block()`` into a pure function, which ``lax.scan``
carries over time; the outer ``parameters`` are passed to it explicitly, so they are
differentiated like the inputs and the initial states (a weight read inside the step gets its
gradient, the case Fluid users found broken). ``recurrent_grad`` is ``jax.vjp`` of that scan;
it runs Paddle's ``recurrent_grad`` ops too, differentiating the forward block (whose index a
grad block's ``forward_block_idx`` names) instead of running Paddle's grad block.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ...ir.errors import OpRuntimeError, ShapeError
from ...ir.program import EMPTY_VAR_NAME
from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext, grad_rule
from ..checks import reduce_stacked
from ..lower import CHECKS

_ATTRS = {"sub_block": Attr("block", 0), "ex_states": Attr("strings", []), "states": Attr("strings", []),
          "reverse": False, "has_states": False, "is_train": True,
          "skip_eager_deletion_vars": Attr("strings", [])}


def _where(op) -> str:
    return f"op {op.type!r} at {op.location}"


def _recurrent_shape(ctx: InferShapeContext) -> None:
    """outputs: [T] + the step block's shape of the variable of the same name (when it declares
    one); otherwise the declared shape is kept."""
    inputs = [x for x in ctx.inputs("inputs") if x is not None]
    ctx.check(bool(inputs), "recurrent needs at least one step input (its first dim is the sequence length)")
    steps = inputs[0].shape[0] if inputs[0].ndim else -1
    for x in inputs[1:]:
        ctx.check(x.ndim >= 1 and x.shape[0] in (-1, steps) or steps == -1,
                  f"every step input must have {steps} steps (its first dim), got {x.name!r} {x.shape}")
    ex_states, states = list(ctx.attr("ex_states") or []), list(ctx.attr("states") or [])
    inits = [s for s in ctx.inputs("initial_states") if s is not None]
    ctx.check(len(ex_states) == len(states) == len(inits),
              f"ex_states {ex_states}, states {states} and initial_states ({len(inits)}) must pair up")
    ref = ctx.attr("sub_block")
    program = ctx.op.block.program
    idx = getattr(ref, "idx", ref)
    if not isinstance(idx, int) or not 0 < idx < len(program.blocks):
        return
    block = program.blocks[idx]
    for i, name in enumerate(ctx.op.outputs.get("outputs", [])):
        inner = block.vars.get(name)
        if inner is not None and inner.shape is not None and name != EMPTY_VAR_NAME:
            ctx.set_output("outputs", (steps,) + tuple(inner.shape), inner.dtype, 0, index=i)


class _Recurrence:
    """The scan of one ``recurrent`` op (or of the forward op a ``recurrent_grad`` differentiates)."""

    def __init__(self, ctx, sub, key) -> None:
        op = ctx.op
        self.op, self.sub, self.key, self.env = op, sub, key, ctx.env
        self.in_names = [n for n in op.input("inputs")]
        self.init_names = [n for n in op.input("initial_states")]
        self.param_names = [n for n in op.input("parameters")]
        self.ex_states = list(ctx.attr("ex_states") or [])
        self.states = list(ctx.attr("states") or [])
        self.out_names = [n for n in (op.output("outputs") if not op.type.endswith("_grad") else op.input("outputs"))]
        self.reverse = bool(ctx.attr("reverse"))
        if len(self.ex_states) != len(self.states) or len(self.states) != len(self.init_names):
            raise OpRuntimeError(f"{_where(op)}: ex_states {self.ex_states}, states {self.states} and "
                                 f"initial_states {self.init_names} must pair up one to one")
        if not self.in_names:
            raise OpRuntimeError(f"{_where(op)}: needs at least one step input")

    def run(self, xs: list, inits: list, params: list):
        """(outputs stacked [T, ...], final states, the step block's run-time checks over every
        step, packed, or None)."""
        steps = {int(x.shape[0]) for x in xs}
        if len(steps) != 1:
            raise OpRuntimeError(f"{_where(self.op)}: the step inputs {self.in_names} have different numbers of "
                                 f"steps {[tuple(x.shape) for x in xs]} (their first dims)")
        count = steps.pop()
        param_values = dict(zip(self.param_names, params))
        inits = [jnp.asarray(v) for v in inits]

        def step(carry, scanned):
            x_t, t = scanned
            values = {**param_values, **dict(zip(self.in_names, x_t)), **dict(zip(self.ex_states, carry))}
            key = None if self.key is None else jax.random.fold_in(self.key, t)
            written = self.sub(values, key)
            new = []
            for name, before in zip(self.states, carry):
                value = written.get(name, values.get(name, self.env.get(name)))
                if value is None:
                    raise OpRuntimeError(f"{_where(self.op)}: state {name!r} is not written by the step block")
                value = jnp.asarray(value)
                if value.shape != before.shape:
                    raise ShapeError(f"{_where(self.op)}: state {name!r} has shape {tuple(value.shape)} after a "
                                     f"step but {tuple(before.shape)} before it (its initial state); a scan "
                                     "carries one shape")
                new.append(value.astype(before.dtype))
            outs = []
            for name in self.out_names:
                if name not in written:
                    raise OpRuntimeError(f"{_where(self.op)}: output {name!r} is not written by the step block")
                outs.append(jnp.asarray(written[name]))
            return new, (outs, written.get(CHECKS))

        final, (ys, checks) = lax.scan(step, inits, (xs, jnp.arange(count)), reverse=self.reverse)
        if checks is not None:
            checks = reduce_stacked(checks, self.sub.check_infos)
        return ys, final, checks


_SLOTS = ("inputs", "initial_states", "parameters")


def _wanted(grad_op, primal: dict) -> dict:
    """Per slot, the indices of the inputs ``grad_op`` writes a gradient for (floating ones)."""
    wanted = {}
    for s in _SLOTS:
        grads = grad_op.output(s + "@GRAD")
        wanted[s] = tuple(i for i, v in enumerate(primal[s]) if i < len(grads) and grads[i] != EMPTY_VAR_NAME
                          and v is not None and hasattr(v, "dtype") and jnp.issubdtype(v.dtype, jnp.inexact))
    return wanted


def _differentiated(rec: "_Recurrence", primal: dict, wanted: dict):
    """(outputs, vjp, the step block's packed checks or None) of the scan with respect to the
    ``wanted`` inputs."""
    def forward(diff: dict) -> list:
        values = {s: list(primal[s]) for s in _SLOTS}
        for s in _SLOTS:
            for i, v in zip(wanted[s], diff[s]):
                values[s][i] = v
        ys, _, checks = rec.run(values["inputs"], values["initial_states"], values["parameters"])
        return ys, checks

    return jax.vjp(forward, {s: [primal[s][i] for i in wanted[s]] for s in _SLOTS}, has_aux=True)


def _grad_op_of(op):
    names = op.output("outputs")
    return next((o for o in op.block.ops if o.type == "recurrent_grad" and o.input("outputs") == names), None)


@op("recurrent", inputs="inputs* initial_states* parameters*", outputs="outputs* step_scopes",
    attrs=_ATTRS, infer_shape=_recurrent_shape, grad="custom")
def recurrent(ctx):
    """Run the step block over the first dim of ``inputs`` (see the module docstring); ``outputs``
    are the per-step outputs stacked in time. ``step_scopes`` keeps the op's key for its gradient."""
    sub = ctx.sub_block()
    key = sub.base_key()
    rec = _Recurrence(ctx, sub, key)
    scope = {"key": key}
    grad_op = _grad_op_of(ctx.op)
    if grad_op is not None:
        # Differentiated in this program: run the scan once, keeping its residuals for
        # recurrent_grad (XLA does not merge the two identical loops a recomputation would make).
        primal = {s: list(ctx.inputs(s)) for s in _SLOTS}
        wanted = _wanted(grad_op, primal)
        ys, vjp, checks = _differentiated(rec, primal, wanted)
        scope.update(vjp=vjp, wanted=wanted, outputs=ys)
    else:
        ys, _, checks = rec.run(ctx.inputs("inputs"), ctx.inputs("initial_states"), ctx.inputs("parameters"))
    sub.report(checks)
    return {"outputs": ys, "step_scopes": scope}


# Paddle's recurrent_grad also lists step_scopes@GRAD (its own scopes again): accepted, unused.
@op("recurrent_grad",
    inputs="inputs* initial_states*? parameters*? outputs* outputs@GRAD*? step_scopes? step_scopes@GRAD?",
    outputs="inputs@GRAD*? initial_states@GRAD*? parameters@GRAD*?", attrs=_ATTRS, infer_shape=grad_rule,
    grad=None)
def recurrent_grad(ctx):
    """``jax.vjp`` of the forward scan with respect to ``inputs``, ``initial_states`` and
    ``parameters`` (a missing ``outputs@GRAD`` counts as zeros), from the residuals the forward
    op kept in ``step_scopes`` when it has them; otherwise the forward is recomputed, its
    randomness replayed from the forward op's key."""
    op = ctx.op
    sub = ctx.sub_block()
    saved = ctx.input("step_scopes")
    key = saved.get("key") if isinstance(saved, dict) else None
    rec = _Recurrence(ctx, sub, key)
    primal = {s: list(ctx.inputs(s)) for s in _SLOTS}
    wanted = _wanted(op, primal)
    if isinstance(saved, dict) and saved.get("wanted") == wanted and "vjp" in saved:
        ys, vjp = saved["outputs"], saved["vjp"]
    else:
        ys, vjp, _ = _differentiated(rec, primal, wanted)
    given = dict(zip(op.input("outputs@GRAD"), ctx.inputs("outputs@GRAD")))
    positional = ctx.inputs("outputs@GRAD")
    cts = []
    for j, (name, y) in enumerate(zip(rec.out_names, ys)):
        g = given.get(name + "@GRAD")
        if g is None and len(positional) == len(ys) and op.input("outputs@GRAD")[j] != EMPTY_VAR_NAME:
            g = positional[j]
        cts.append(jnp.zeros_like(y) if g is None else jnp.asarray(g, y.dtype).reshape(y.shape))
    (grads,) = vjp(cts)
    result: dict[str, Any] = {}
    for s in _SLOTS:
        out = [None] * len(primal[s])
        for i, g in zip(wanted[s], grads[s]):
            out[i] = g
        result[s + "@GRAD"] = out
    return result
