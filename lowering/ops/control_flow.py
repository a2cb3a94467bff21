"""Control flow: ``conditional_block``, ``select_input`` / ``select_output``, ``while``, their
gradients, ``increment``, ``is_empty`` and tensor arrays without LoD.

A control-flow op asks its context for its sub-block (``ctx.sub_block()``): a pure function of
the values it reads (see ``lowering/lower.py``, ``SubBlock``). ``conditional_block`` becomes
``lax.cond``, ``while`` becomes ``lax.while_loop``. Their gradient ops do not run Paddle's grad
sub-blocks: they re-lower the *forward* sub-block and take ``jax.vjp`` of the whole forward op
(``while_grad`` through a bounded ``lax.scan`` when the loop carries ``max_iterations``, else by
recomputation). The reasoning and the costs are in ``docs/control_flow.md``.

The ``Scope`` / ``StepScopes`` output of the forward op (Paddle's scopes, kept for its backward)
holds here what the gradient op needs from the forward run: the op's input values as they were
before it ran (``while`` overwrites its loop variables in place) and its random key.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir import dtypes
from ...ir.errors import OpRuntimeError, ShapeError
from ...ir.program import EMPTY_VAR_NAME
from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext, grad_rule
from ..checks import IndexInput, index_inputs
from ..lod_value import LoDValue
from ..lower import lod_aware

_tree_map = jax.tree_util.tree_map


# -- helpers ---------------------------------------------------------------------------------------
def _keep_declared(ctx: InferShapeContext) -> None:
    """The outputs keep the shapes the sub-block's own ops gave them when they were appended."""


def _where(op) -> str:
    return f"op {op.type!r} at {op.location}"


def _truth(value, op, what: str):
    """A one-element condition as a bool scalar."""
    v = jnp.asarray(value)
    if v.size != 1:
        raise OpRuntimeError(f"{_where(op)}: {what} must hold exactly one value (shape [1] or []), "
                             f"got shape {tuple(v.shape)}")
    return v.reshape(()).astype(bool)


def _floating(value) -> bool:
    return (value is not None and hasattr(value, "dtype") and hasattr(value, "shape")
            and jnp.issubdtype(value.dtype, jnp.inexact))


def _given(names, values) -> dict[str, Any]:
    return {n: v for n, v in zip(names, values) if n != EMPTY_VAR_NAME and v is not None}


def _strong(value):
    """``value`` without JAX's weak type (branches and loop carries must agree on types exactly)."""
    return _tree_map(lambda v: lax.convert_element_type(v, v.dtype) if hasattr(v, "dtype") else v, value)


def _zeros(struct):
    return _tree_map(lambda s: jnp.zeros(s.shape, s.dtype), struct)


def _same_structure(a, b) -> bool:
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    return ta == tb and all(getattr(x, "shape", None) == getattr(y, "shape", None)
                            and getattr(x, "dtype", None) == getattr(y, "dtype", None) for x, y in zip(la, lb))


def _cotangents(op, ctx, out_names: list[str]) -> list:
    """The ``Out@GRAD`` value of each forward output (None where none is given).

    Paddle's ``while_grad`` lists only the gradients that exist, with ``original_output_grad``
    naming them; otherwise the slot is aligned with ``Out`` by position (or by name).
    """
    grad_names = op.input("Out@GRAD")
    grad_values = ctx.inputs("Out@GRAD")
    by_name = {n: v for n, v in zip(grad_names, grad_values) if n != EMPTY_VAR_NAME}
    original = op.attrs.get("original_output_grad")
    if original and len(original) == len(grad_names):
        by_original = {o: v for o, v in zip(original, grad_values)}
        return [by_original.get(n + "@GRAD") for n in out_names]
    if len(grad_names) == len(out_names):
        return [None if g == EMPTY_VAR_NAME else v for g, v in zip(grad_names, grad_values)]
    return [by_name.get(n + "@GRAD") for n in out_names]


def _scope(given: dict, key) -> dict:
    """What a forward control-flow op keeps for its gradient op (its Scope / StepScopes output)."""
    return {"inputs": dict(given), "key": key}


def _restore(ctx, given: dict, slot: str):
    """The forward op's inputs as they were before it ran, and its key, from its saved scope."""
    scope = ctx.input(slot)
    if isinstance(scope, dict):
        return {**given, **scope.get("inputs", {})}, scope.get("key")
    return given, None


# -- conditional_block -----------------------------------------------------------------------------
def _branch(ctx, sub, out_names: list[str], key):
    """(run, skip): the sub-block's outputs, and what the outputs are when it does not run
    (their values from before, where they have one of the same type, else zeros)."""
    shapes: list = []

    def run(values):
        written = sub(values, key)
        outs = []
        for n in out_names:
            if n in written:
                outs.append(_strong(written[n]))
            elif n in values or n in ctx.env:
                outs.append(_strong(values.get(n, ctx.env.get(n))))
            else:
                raise OpRuntimeError(f"{_where(ctx.op)}: output {n!r} is neither written by sub-block "
                                     f"{sub.block.idx} nor has a value before the op")
        shapes[:] = [jax.eval_shape(lambda v=v: v) for v in outs]
        return outs

    def skip(values):
        structs = shapes or jax.eval_shape(run, values)
        outs = []
        for n, struct in zip(out_names, structs):
            before = values.get(n, ctx.env.get(n))
            if isinstance(before, TensorArray) and isinstance(struct, TensorArray) \
                    and before.capacity < struct.buffer.shape[0]:
                before = before.grown(struct.buffer.shape[0] - before.capacity)   # written in the branch
            outs.append(_strong(before) if before is not None and _same_structure(before, struct)
                        else _zeros(struct))
        return outs

    return run, skip


def _condition(ctx):
    """The op's condition: a traced bool, or a Python bool when it is static (non-scalar form)."""
    conds = ctx.inputs("Cond")
    if ctx.attr("is_scalar_condition"):
        if not conds:
            raise OpRuntimeError(f"{_where(ctx.op)}: is_scalar_condition needs a Cond input")
        return _truth(conds[0], ctx.op, "Cond")
    # Paddle: the block runs when every Cond tensor is non-empty; shapes are static under XLA.
    return all(int(np.prod(c.shape)) != 0 for c in conds if c is not None)


@op("conditional_block", inputs="Cond*? Input*?", outputs="Out*? Scope?",
    attrs={"sub_block": Attr("block", 0), "is_scalar_condition": False},
    infer_shape=_keep_declared, grad="custom")
def conditional_block(ctx):
    """Run sub-block ``sub_block`` when ``Cond`` holds (``lax.cond``); ``Out`` are the variables of
    enclosing blocks it writes. Not run, they keep their values from before (zeros if none)."""
    sub = ctx.sub_block()
    given = _given(ctx.op.input("Input"), ctx.inputs("Input"))
    out_names = [n for n in ctx.op.output("Out") if n != EMPTY_VAR_NAME]
    key = sub.base_key()
    pred = _condition(ctx)
    run, skip = _branch(ctx, sub, out_names, key)
    if isinstance(pred, bool):
        outs = run(given) if pred else skip(given)
    else:
        outs = lax.cond(pred, run, skip, given)
    result = dict(zip(out_names, outs))
    return {"Out": [result.get(n) for n in ctx.op.output("Out")], "Scope": _scope(given, key)}


@op("conditional_block_grad", inputs="Cond* Input* Out* Out@GRAD* Scope?", outputs="Input@GRAD*",
    attrs={"sub_block": Attr("block", 0), "is_scalar_condition": False}, infer_shape=grad_rule, grad=None)
def conditional_block_grad(ctx):
    """The gradient of ``conditional_block``: ``jax.vjp`` of its forward sub-block where the
    condition held, zeros where it did not. ``sub_block`` may name the forward block (fluidjax's
    backward) or Paddle's grad block (whose ``forward_block_idx`` is then used)."""
    op = ctx.op
    sub = ctx.sub_block()
    names = op.input("Input")
    given, key = _restore(ctx, _given(names, ctx.inputs("Input")), "Scope")
    grad_names = op.output("Input@GRAD")
    wanted = [n for i, n in enumerate(names) if i < len(grad_names) and grad_names[i] != EMPTY_VAR_NAME
              and _diffable(given.get(n))]
    wanted = list(dict.fromkeys(wanted))
    out_names = op.input("Out")
    cts = _cotangents(op, ctx, out_names)
    used = [(n, ct) for n, ct in zip(out_names, cts) if ct is not None and n != EMPTY_VAR_NAME]
    if not wanted:
        return {}

    def forward(diff):
        written = sub(_with_leaves(given, dict(zip(wanted, diff))), key)
        # An output the branch does not write keeps its value from before: no gradient path.
        return [_leaf(written[n]) if n in written else jnp.zeros_like(_leaf(ct)) for n, ct in used]

    primals = [_leaf(given[n]) for n in wanted]

    def taken(args):
        diff, cotangents = args
        outs, vjp = jax.vjp(forward, diff)
        cotangents = [_fit_cotangent(c, o) for c, o in zip(cotangents, outs)]
        return _strong(vjp(cotangents)[0])

    def not_taken(args):
        return [jnp.zeros_like(p) for p in args[0]]

    pred = _condition(ctx)
    args = (primals, [ct for _, ct in used])
    if isinstance(pred, bool):
        grads = taken(args) if pred else not_taken(args)
    else:
        grads = lax.cond(pred, taken, not_taken, args)
    by_name = {n: _put(given[n], g) for n, g in zip(wanted, grads)}
    return {"Input@GRAD": [by_name.get(n) if i < len(grad_names) and grad_names[i] != EMPTY_VAR_NAME else None
                           for i, n in enumerate(names)]}


# Sub-blocks see LoD values as they are (a DynamicRNN step pools its LoD static input).
lod_aware("conditional_block", "while", "write_to_array", "is_empty")


# -- select_input / select_output ------------------------------------------------------------------
def _mask(ctx, count: int):
    m = jnp.asarray(ctx.input("Mask"))
    if m.size != 1:
        raise OpRuntimeError(f"{_where(ctx.op)}: Mask must hold one integer, got shape {tuple(m.shape)}")
    return jnp.clip(m.reshape(()).astype(jnp.int32), 0, count - 1)


def _select_input_shape(ctx: InferShapeContext) -> None:
    xs = [x for x in ctx.inputs("X") if x is not None]
    ctx.check(bool(xs), "select_input needs at least one input")
    first = xs[0]
    shape = list(first.shape)
    for x in xs[1:]:
        if len(x.shape) != len(shape):
            shape = list(xs[-1].shape)
            break
        shape = [a if a == b else -1 for a, b in zip(shape, x.shape)]
    ctx.set_output("Out", shape, xs[-1].dtype, xs[-1].lod_level)


def _select_input_grad(op, out_grads, in_grads):
    return [("select_output", {"X": out_grads["Out"], "Mask": op.input("Mask")},
             {"Out": in_grads["X"]}, {})]


def _select_output_grad(op, out_grads, in_grads):
    return [("select_input", {"X": out_grads["Out"], "Mask": op.input("Mask")},
             {"Out": in_grads["X"]}, {})]


@op("select_input", inputs="X* Mask", outputs="Out", infer_shape=_select_input_shape,
    no_grad_inputs=["Mask"], grad_maker=_select_input_grad)
def select_input(ctx):
    """Out = X[Mask] (the branch a ``cond`` took). XLA needs one shape: the inputs must agree."""
    xs = ctx.inputs("X")
    present = [x for x in xs if x is not None]
    if not present:
        raise OpRuntimeError(f"{_where(ctx.op)}: no input has a value")
    xs = [x if x is not None else _zeros(jax.eval_shape(lambda: present[0])) for x in xs]
    first = jax.eval_shape(lambda: xs[0])
    for i, x in enumerate(xs[1:], 1):
        if not _same_structure(jax.eval_shape(lambda x=x: x), first):
            shapes = [getattr(v, "shape", type(v).__name__) for v in xs]
            raise OpRuntimeError(
                f"{_where(ctx.op)}: its inputs have different shapes or dtypes {shapes}; under XLA both "
                "branches of a cond must produce the same shape and dtype")
    if len(xs) == 1:
        return {"Out": xs[0]}
    which = _mask(ctx, len(xs))
    return {"Out": _tree_map(lambda *leaves: lax.select_n(which, *leaves), *xs)}


def _select_output_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    for i, _ in enumerate(ctx.op.outputs.get("Out", [])):
        ctx.set_output("Out", x.shape, x.dtype, x.lod_level, index=i)


@op("select_output", inputs="X Mask", outputs="Out*", infer_shape=_select_output_shape,
    no_grad_inputs=["Mask"], grad_maker=_select_output_grad)
def select_output(ctx):
    """Out[Mask] = X. The other outputs (which Paddle leaves unwritten) are zeros here: they are
    the gradients of the branch not taken."""
    x = ctx.input("X")
    n = len(ctx.op.output("Out"))
    which = _mask(ctx, n)
    return {"Out": [_tree_map(lambda v, i=i: jnp.where(which == i, v, jnp.zeros_like(v)), x) for i in range(n)]}


@index_inputs("select_input")
def _(attr, shape):
    return []      # Mask is clamped into range (its count is the number of X inputs, not a shape)


# -- while -----------------------------------------------------------------------------------------
class _Loop:
    """A ``while`` op's loop: which names it carries, their values before it, the rest it reads."""

    def __init__(self, ctx, fwd_op, sub, given: dict, key) -> None:
        self.op, self.sub, self.key, self.ctx = fwd_op, sub, key, ctx
        conds = [n for n in fwd_op.input("Condition") if n != EMPTY_VAR_NAME]
        if len(conds) != 1:
            raise OpRuntimeError(f"{_where(fwd_op)}: needs exactly one Condition, got {conds}")
        self.cond_name = conds[0]
        outs = [n for n in fwd_op.output("Out") if n != EMPTY_VAR_NAME]
        self.carried = list(dict.fromkeys(outs + [self.cond_name]))
        init, missing = {}, []
        for n in self.carried:
            v = given.get(n, ctx.env.get(n))
            if v is None:
                missing.append(n)
            else:
                init[n] = _strong(v)
        self.consts = {n: v for n, v in given.items() if n not in self.carried}
        # Arrays the body writes keep one capacity through the loop: room made before it starts.
        writes = [o.output("Out")[0] for o in _ops_within(sub.block) if o.type == "write_to_array"]
        trips = _bound(fwd_op) or DEFAULT_LOOP_CAPACITY
        self.room = len(writes) * trips
        for n, v in init.items():
            if isinstance(v, TensorArray):          # room for every write of the body to it
                init[n] = v.grown(writes.count(n) * trips)
        self._widen_arrays(init)
        if missing:
            # Variables the body writes for the first time: zeros of the type one iteration gives.
            written = jax.eval_shape(lambda c: self._body(c, self.consts, 0), init)
            for n in missing:
                if n not in written:
                    raise OpRuntimeError(f"{_where(fwd_op)}: output {n!r} has no value before the loop and "
                                         f"its body (block {sub.block.idx}) does not write it")
                init[n] = _zeros(written[n])
        self.init = init

    def _widen_arrays(self, init: dict) -> None:
        """Give arrays of LoD elements the element size the body writes (the first step of a beam
        decoder has one prefix per source, later ones up to ``beam_size``): one body trace per
        widening, until an iteration keeps every array's shape."""
        from .lod_array import widened
        for _ in range(8):
            if not any(isinstance(v, TensorArray) for v in init.values()):
                return
            try:
                written = jax.eval_shape(lambda c: self._body(c, self.consts, 0), init)
            except Exception:
                return          # the loop's own run reports it
            changed = False
            for n, v in list(init.items()):
                after = written.get(n)
                if isinstance(v, TensorArray) and isinstance(after, TensorArray):
                    wide = widened(v, after)
                    if wide is not v:
                        init[n], changed = wide, True
            if not changed:
                return

    def _key(self, i):
        return None if self.key is None else jax.random.fold_in(self.key, i)

    def _check_types(self) -> None:
        after = jax.eval_shape(lambda c: self._body(c, self.consts, 0), self.init)
        for n in self.carried:
            if n not in after:
                continue
            a, b = jax.eval_shape(lambda: self.init[n]), after[n]
            la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
            if len(la) != len(lb) or any(x.shape != y.shape for x, y in zip(la, lb)):
                raise ShapeError(
                    f"{_where(self.op)}: loop variable {n!r} changes shape across iterations "
                    f"({[x.shape for x in la]} before, {[y.shape for y in lb]} after one): an XLA loop "
                    "carries one shape; give it the same shape in every iteration")
            if any(x.dtype != y.dtype for x, y in zip(la, lb)):
                raise ShapeError(
                    f"{_where(self.op)}: loop variable {n!r} changes dtype across iterations "
                    f"({[str(x.dtype) for x in la]} before, {[str(y.dtype) for y in lb]} after one)")

    def _body(self, carry: dict, consts: dict, i) -> dict:
        return self.sub({**consts, **carry, _IN_LOOP: self.room}, self._key(i))

    def step(self, carry: dict, consts: dict, i) -> dict:
        """One iteration: the body run on ``carry`` (and ``consts``); the new carry."""
        written = self._body(carry, consts, i)
        return {n: _strong(written[n]) if n in written else carry[n] for n in self.carried}

    def running(self, carry: dict):
        return _truth(carry[self.cond_name], self.op, "Condition")

    def run(self, carry: dict, consts: dict):
        """The loop to its end (``lax.while_loop``): (final carry, trip count)."""
        def cond(state):
            return self.running(state[0])

        def body(state):
            c, i = state
            return self.step(c, consts, i), i + 1

        try:
            return lax.while_loop(cond, body, (carry, jnp.zeros((), jnp.int32)))
        except TypeError:
            self._check_types()     # names the loop variable whose type changed (one more trace)
            raise


def _ops_within(block):
    """The ops of ``block`` and of the sub-blocks its ops run."""
    from ..lower import block_refs

    seen, stack = set(), [block]
    while stack:
        b = stack.pop()
        if b.idx in seen:
            continue
        seen.add(b.idx)
        for o in b.ops:
            yield o
            stack.extend(b.program.blocks[i] for i in block_refs(o)
                         if isinstance(i, (int, np.integer)) and 0 <= i < len(b.program.blocks))


def _forward_while(ctx, sub_block):
    """The ``while`` op whose sub-block is ``sub_block`` (the op a ``while_grad`` differentiates)."""
    block = ctx.op.block
    for _ in range(len(block.program.blocks)):
        for candidate in block.ops:
            if candidate.type == "while" and _block_idx(candidate.attrs.get("sub_block")) == sub_block.idx:
                return candidate
        block = block.parent
        if block is None:
            break
    raise OpRuntimeError(f"{_where(ctx.op)}: no 'while' op runs block {sub_block.idx}, the block it "
                         "differentiates")


def _block_idx(ref):
    return getattr(ref, "idx", ref)


@op("while", inputs="X*? Condition*", outputs="Out*? StepScopes?",
    attrs={"sub_block": Attr("block", 0), "is_test": False}, infer_shape=_keep_declared, grad="custom")
def while_(ctx):
    """Run sub-block ``sub_block`` while ``Condition`` holds (``lax.while_loop``). ``Out`` are the
    loop variables (written by the body; ``Condition`` among them); a loop variable keeps one
    shape and dtype across iterations. An undeclared int attribute ``max_iterations`` (set by
    ``layer.while_loop(..., max_iterations=N)``) bounds the loop for its gradient."""
    sub = ctx.sub_block()
    given = _given(ctx.op.input("X"), ctx.inputs("X"))
    given.update(_given(ctx.op.input("Condition"), ctx.inputs("Condition")))
    key = sub.base_key()
    loop = _Loop(ctx, ctx.op, sub, given, key)
    final, _ = loop.run(loop.init, loop.consts)
    return {"Out": [final.get(n) for n in ctx.op.output("Out")], "StepScopes": _scope(given, key)}


def _bound(fwd_op) -> int | None:
    """The loop's trip-count bound: its ``max_iterations`` attribute, else the exact count
    :func:`_counted_trips` reads off the program, else None."""
    bound = fwd_op.attrs.get("max_iterations")
    if bound is None or isinstance(bound, bool):
        return _counted_trips(fwd_op)
    bound = int(bound)
    return bound if bound > 0 else None


_COMPARE = {"less_than": lambda i, n, k: -(-(n - i) // k),
            "less_equal": lambda i, n, k: (n - i) // k + 1}


def _last_writer(ops, name: str):
    found = None
    for o in ops:
        if name in o.output_arg_names:
            found = o
    return found


def _constant(block, fwd_op, name: str):
    """The value of a one-element ``fill_constant`` that last writes ``name`` before ``fwd_op``."""
    ops = block.ops[:block.ops.index(fwd_op)] if fwd_op in block.ops else []
    writer = _last_writer(ops, name)
    if writer is None or writer.type != "fill_constant" or writer.input_arg_names:
        return None
    if int(np.prod(writer.attrs.get("shape") or [1])) != 1:
        return None
    text = writer.attrs.get("str_value") or ""
    try:
        value = float(text) if text else float(writer.attrs.get("value", 0.0))
    except ValueError:
        return None
    return value if value == int(value) else None


def _counted_trips(fwd_op) -> int | None:
    """The trip count of a counting loop, read off the program: the body ends with
    ``cond = i' < n`` (or ``<=``; directly or through ``assign``) where ``i' = i + k`` (``scale``
    with bias k or ``increment``) is the loop variable ``i``'s last write, ``n`` is not written in
    the body, and ``i`` and ``n`` come from ``fill_constant`` s before the loop: what
    ``while_loop(lambda i: i < n, ...)`` and Fluid's ``While`` with a counter build. A condition
    that is ``logical_and`` of such a compare and anything else gives the count as a bound. None
    for anything else (the gradient then recomputes)."""
    try:
        body = fwd_op.block.program.block(_block_idx(fwd_op.attrs.get("sub_block")))
        ops = list(body.ops)
        return _trips_until(fwd_op, ops, len(ops), fwd_op.input("Condition")[0], 0)
    except (KeyError, IndexError, ValueError, TypeError):
        return None


def _trips_until(fwd_op, ops, end: int, cond: str, depth: int) -> int | None:
    """:func:`_counted_trips` for the condition ``cond`` written among the body's first ``end``
    ops: through ``assign`` s and ``logical_and`` (the loop ends no later than its counting side:
    a bound, as for Fluid's beam decoder, ``counter < max_len and not is_empty(selected_ids)``)."""
    last = _last_writer(ops[:end], cond)
    if last is None or depth > 8:
        return None
    at = ops.index(last)
    if last.type == "assign":
        return _trips_until(fwd_op, ops, at, last.input("X")[0], depth + 1)
    if last.type == "logical_and":
        sides = [_trips_until(fwd_op, ops, at, last.input(slot)[0], depth + 1) for slot in ("X", "Y")]
        sides = [t for t in sides if t is not None]
        return min(sides) if sides else None
    if last.type not in _COMPARE:
        return None
    counter, limit = last.input("X")[0], last.input("Y")[0]
    if _last_writer(ops, limit) is not None:
        return None
    step_op = _last_writer(ops[:at], counter)
    if step_op is not None and step_op.type == "assign":        # i = i'; the compare reads i
        step_op = _last_writer(ops[:ops.index(step_op)], step_op.input("X")[0])
    if step_op is None:
        return None
    if step_op.type == "increment":
        k = float(step_op.attrs.get("step", 1.0))
    elif step_op.type == "scale" and float(step_op.attrs.get("scale", 1.0)) == 1.0 \
            and not step_op.input("ScaleTensor"):
        k = float(step_op.attrs.get("bias", 0.0))
    else:
        return None
    var = step_op.input("X")[0]
    # The loop variable is advanced once per iteration: its last write is this step.
    writer = _last_writer(ops, var)
    if var not in fwd_op.output("Out") or k <= 0 or k != int(k) or writer is None or not (
            writer is step_op or (writer.type == "assign" and writer.input("X")[0] in step_op.output_arg_names)):
        return None
    start, stop = _constant(fwd_op.block, fwd_op, var), _constant(fwd_op.block, fwd_op, limit)
    if start is None or stop is None:
        return None
    return max(0, int(_COMPARE[last.type](int(start), int(stop), int(k))))


@op("while_grad", inputs="X* Out* Out@GRAD* StepScopes?", outputs="X@GRAD*",
    attrs={"sub_block": Attr("block", 0), "is_test": False, "original_output_grad": Attr("strings", [])},
    infer_shape=grad_rule, grad=None)
def while_grad(ctx):
    """The gradient of ``while``: the vjp of the whole loop, through a bounded ``lax.scan`` when the
    forward op has ``max_iterations`` (a loop still running at the bound gives NaN gradients), else
    by running the iterations backwards, recomputing each one's input from the start (exact, no
    memory per iteration, quadratic time in the trip count). See docs/control_flow.md."""
    sub = ctx.sub_block()
    fwd_op = _forward_while(ctx, sub.block)
    names = ctx.op.input("X")
    given, key = _restore(ctx, _given(names, ctx.inputs("X")), "StepScopes")
    if not isinstance(ctx.input("StepScopes"), dict):
        raise OpRuntimeError(f"{_where(ctx.op)}: needs StepScopes, the forward loop's saved inputs (its "
                             "loop variables are overwritten by the loop)")
    loop = _Loop(ctx, fwd_op, sub, given, key)
    grad_names = ctx.op.output("X@GRAD")
    wanted = list(dict.fromkeys(n for i, n in enumerate(names) if i < len(grad_names)
                                and grad_names[i] != EMPTY_VAR_NAME and _diffable(given.get(n))))
    if not wanted:
        return {}
    diff_carry = [n for n in loop.carried if _diffable(loop.init[n])]
    diff_const = [n for n in wanted if n not in loop.carried]
    out_names = ctx.op.input("Out")
    cts = dict(zip(out_names, _cotangents(ctx.op, ctx, out_names)))
    ct_final = {n: _fit_cotangent(cts.get(n), _leaf(loop.init[n])) for n in diff_carry}
    bound = _bound(fwd_op)
    if bound is not None:
        d_carry, d_const = _grad_bounded(loop, diff_carry, diff_const, ct_final, bound)
    else:
        d_carry, d_const = _grad_recompute(loop, diff_carry, diff_const, ct_final)
    grads = {**d_const, **{n: d_carry[n] for n in diff_carry}}
    grads = {n: _put(given[n], g) for n, g in grads.items()}      # an array's gradient is an array
    return {"X@GRAD": [grads.get(n) if i < len(grad_names) and grad_names[i] != EMPTY_VAR_NAME and n in wanted
                       else None for i, n in enumerate(names)]}


def _grad_bounded(loop: _Loop, diff_carry, diff_const, ct_final, bound: int):
    """vjp through ``bound`` masked iterations of ``lax.scan``: memory for ``bound`` iterations."""
    def forward(dc, dk):
        consts = _with_leaves(loop.consts, dk)

        def scan_step(state, _):
            c, i = state
            go = loop.running(c)
            c = lax.cond(go, lambda c: loop.step(c, consts, i), lambda c: c, c)
            return (c, i + go.astype(jnp.int32)), None

        (final, _), _ = lax.scan(scan_step, (_with_leaves(loop.init, dc), jnp.zeros((), jnp.int32)), None,
                                 length=bound)
        return {n: _leaf(final[n]) for n in diff_carry}, loop.running(final)

    _, vjp, unfinished = jax.vjp(forward, {n: _leaf(loop.init[n]) for n in diff_carry},
                                 {n: _leaf(loop.consts[n]) for n in diff_const}, has_aux=True)
    d_carry, d_const = vjp(ct_final)
    # A loop that had not finished within the bound: its gradient is unknown, and says so.
    poison = lambda g: jnp.where(unfinished, jnp.full_like(g, jnp.nan), g)  # noqa: E731
    return _tree_map(poison, d_carry), _tree_map(poison, d_const)


def _grad_recompute(loop: _Loop, diff_carry, diff_const, ct_final):
    """Iterations backwards, each one's input recomputed from the loop's start: O(1) memory,
    T(T+1)/2 body evaluations for T iterations, exact for any trip count."""
    consts = loop.consts
    _, trips = loop.run(loop.init, consts)

    def carry_at(k):
        return lax.fori_loop(0, k, lambda i, c: loop.step(c, consts, i), loop.init)

    def back(j, acc):
        ct_c, ct_k = acc
        k = trips - 1 - j
        c_k = carry_at(k)

        def one(dc, dk):
            new = loop.step(_with_leaves(c_k, dc), _with_leaves(consts, dk), k)
            return {n: _leaf(new[n]) for n in diff_carry}

        _, vjp = jax.vjp(one, {n: _leaf(c_k[n]) for n in diff_carry}, {n: _leaf(consts[n]) for n in diff_const})
        d_c, d_k = vjp(ct_c)
        return _strong(d_c), _tree_map(jnp.add, ct_k, _strong(d_k))

    zeros = {n: jnp.zeros_like(_leaf(consts[n])) for n in diff_const}
    return lax.fori_loop(0, trips, back, (ct_final, zeros))


# A tensor array is differentiated through its buffer (its length is an integer).
# A LoD value is differentiated through its rows (its offsets are integers).
def _diffable(value) -> bool:
    return _floating(value) or (isinstance(value, TensorArray) and _floating(value.buffer))


def _leaf(value):
    if isinstance(value, LoDValue):
        return value.data
    return value.buffer if isinstance(value, TensorArray) else value


def _put(template, leaf):
    if isinstance(template, LoDValue):
        return LoDValue(leaf, template.offsets)
    return TensorArray(leaf, template.length) if isinstance(template, TensorArray) else leaf


def _with_leaves(values: dict, leaves: dict) -> dict:
    return {**values, **{n: _put(values[n], v) for n, v in leaves.items()}}


def _fit_cotangent(ct, like):
    """An output gradient shaped as ``like`` (zeros when absent; an array's buffer cut or padded
    to the loop's capacity)."""
    if ct is None:
        return jnp.zeros_like(like)
    if isinstance(ct, LoDValue):
        ct = ct.data
        if ct.ndim == like.ndim and ct.ndim and ct.shape[0] != like.shape[0]:     # other padding
            rows = like.shape[0]
            ct = ct[:rows] if ct.shape[0] > rows else jnp.concatenate(
                [ct, jnp.zeros((rows - ct.shape[0],) + tuple(ct.shape[1:]), ct.dtype)])
    if isinstance(ct, TensorArray):
        buf = ct.buffer.astype(like.dtype)
        rows = like.shape[0]
        if buf.shape[0] < rows:
            buf = jnp.concatenate([buf, jnp.zeros((rows - buf.shape[0],) + tuple(buf.shape[1:]), buf.dtype)])
        return buf[:rows].reshape(like.shape)
    return jnp.asarray(ct, like.dtype).reshape(like.shape)


# -- increment, is_empty ---------------------------------------------------------------------------
def _increment_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", x.shape, x.dtype, x.lod_level)


@op("increment", inputs="X", outputs="Out", attrs={"step": 1.0}, infer_shape=_increment_shape, grad=None)
def increment(ctx):
    """Out = X + step, X of one element (a loop counter), in X's dtype."""
    x = ctx.input("X")
    if int(np.prod(x.shape)) != 1:
        raise OpRuntimeError(f"{_where(ctx.op)}: X must have exactly one element, got shape {tuple(x.shape)}")
    return {"Out": x + jnp.asarray(ctx.attr("step")).astype(x.dtype)}


def _is_empty_shape(ctx: InferShapeContext) -> None:
    ctx.set_output("Out", (), "bool", 0)


@op("is_empty", inputs="X", outputs="Out", infer_shape=_is_empty_shape, grad=None)
def is_empty(ctx):
    """Whether X has no elements (a bool scalar). Static under XLA, except for a value whose row
    count is data (a LoD value, counted rows): then its real row count decides."""
    x = ctx.input("X")
    if isinstance(x, LoDValue):
        if int(np.prod(x.data.shape[1:])) == 0:
            return {"Out": jnp.asarray(True)}
        return {"Out": x.row_count() == 0}
    return {"Out": jnp.asarray(int(np.prod(x.shape)) == 0)}


# -- tensor arrays (no LoD) ------------------------------------------------------------------------
# A LOD_TENSOR_ARRAY inside a step is a TensorArray: a buffer of static capacity plus its length
# (docs/control_flow.md). Outside loops each write grows the capacity by one at trace time; a
# loop grows the arrays its body writes before it starts (the carry keeps one shape).
DEFAULT_LOOP_CAPACITY = 64     # room per write op in a loop without max_iterations
_IN_LOOP = "@fluidjax:loop_array_room@"    # env marker inside a loop body: room per array write


@jax.tree_util.register_pytree_node_class
class TensorArray:
    """A tensor array: ``buffer`` [capacity, *element shape] and ``length`` (int32 scalar)."""

    __slots__ = ("buffer", "length")

    def __init__(self, buffer, length) -> None:
        self.buffer = buffer
        self.length = length

    def tree_flatten(self):
        return (self.buffer, self.length), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)

    @property
    def capacity(self) -> int:
        return int(self.buffer.shape[0])

    def grown(self, extra: int) -> "TensorArray":
        """The same array with room for ``extra`` more elements."""
        if extra <= 0:
            return self

        def pad(a):
            return jnp.concatenate([a, jnp.zeros((extra,) + tuple(a.shape[1:]), a.dtype)])
        if isinstance(self.buffer, LoDValue):       # elements with LoD: unwritten ones are empty
            return TensorArray(LoDValue(pad(self.buffer.data), [pad(o) for o in self.buffer.offsets]), self.length)
        return TensorArray(pad(self.buffer), self.length)

    def __add__(self, other: "TensorArray") -> "TensorArray":
        """Element-wise sum (gradient contributions to one array): the shorter one padded."""
        a, b = self.grown(other.capacity - self.capacity), other.grown(self.capacity - other.capacity)
        return TensorArray(a.buffer + b.buffer, jnp.maximum(a.length, b.length))

    def __array__(self, *args, **kwargs):
        raise TypeError("a tensor array cannot be fetched as one array: fetch an element read with "
                        "layer.array_read, or the array stacked by tensor_array_to_tensor")

    def __repr__(self) -> str:
        return f"TensorArray(capacity={self.capacity}, element={tuple(self.buffer.shape[1:])}, {self.buffer.dtype})"


def _index(ctx, slot: str = "I"):
    i = jnp.asarray(ctx.input(slot))
    if i.size != 1:
        raise OpRuntimeError(f"{_where(ctx.op)}: {slot} must hold one integer, got shape {tuple(i.shape)}")
    return i.reshape(()).astype(jnp.int32)


def _array(ctx, value, what: str) -> TensorArray:
    if not isinstance(value, TensorArray):
        raise OpRuntimeError(f"{_where(ctx.op)}: {what} is not a tensor array with elements (was it written?)")
    return value


def _write_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", x.shape, x.dtype, x.lod_level)


def _static_index(ctx) -> int | None:
    """The index input's value when a ``fill_constant`` before the op gives it (the usual case
    outside loops), else None."""
    names = ctx.op.input("I")
    value = _constant(ctx.op.block, ctx.op, names[0]) if names else None
    return int(value) if value is not None and value >= 0 else None


def _write_to_array_grad(op, out_grads, in_grads):
    # Paddle's: the gradient of a write reads the array's gradient at the same index.
    return [("read_from_array", {"X": out_grads["Out"], "I": op.input("I")}, {"Out": in_grads["X"]}, {})]


def _read_from_array_grad(op, out_grads, in_grads):
    # Paddle's: the gradient of a read writes the element's gradient into the array's.
    return [("write_to_array", {"X": out_grads["Out"], "I": op.input("I")}, {"Out": in_grads["X"]}, {})]


@op("write_to_array", inputs="X I", outputs="Out", infer_shape=_write_shape, no_grad_inputs=["I"],
    grad_maker=_write_to_array_grad)
def write_to_array(ctx):
    """Out[I] = X; the array grows to I + 1 elements when shorter (Paddle's semantics)."""
    raw = ctx.input("X")
    name = ctx.op.output("Out")[0]
    array = ctx.env.get(name)
    room = ctx.env.get(_IN_LOOP)
    if isinstance(raw, LoDValue) or (isinstance(array, TensorArray) and isinstance(array.buffer, LoDValue)):
        # An element keeps its LoD (or the count of its rows, when that is data)
        from .lod_array import counted, write_lod_item
        if not isinstance(raw, LoDValue) and jnp.ndim(raw) == 0:
            raise OpRuntimeError(f"{_where(ctx.op)}: array {name!r} holds LoD tensors (rows); X is a scalar")
        item = raw if isinstance(raw, LoDValue) else counted(_strong(jnp.asarray(raw)))
        return {"Out": write_lod_item(ctx, item, _index(ctx), array, None if room else _static_index(ctx), room)}
    x = _strong(jnp.asarray(raw))
    i = _index(ctx)
    static = None if room else _static_index(ctx)
    if not isinstance(array, TensorArray):
        capacity = room if room else (static + 1 if static is not None else 1)
        array = TensorArray(jnp.zeros((capacity,) + x.shape, x.dtype), jnp.zeros((), jnp.int32))
    elif not room:
        needed = static + 1 if static is not None else array.capacity + 1
        array = array.grown(needed - array.capacity)
    if tuple(array.buffer.shape[1:]) != x.shape:
        raise OpRuntimeError(f"{_where(ctx.op)}: array {name!r} holds elements of shape "
                             f"{tuple(array.buffer.shape[1:])}, X has shape {x.shape}; under XLA every element "
                             "of an array has one shape")
    buffer = array.buffer.at[i].set(x.astype(array.buffer.dtype), mode="drop")
    length = jnp.minimum(jnp.maximum(array.length, i + 1), array.capacity)
    return {"Out": TensorArray(buffer, length.astype(jnp.int32))}


def _read_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", x.shape, x.dtype, x.lod_level)     # an element keeps the LoD it was written with


@op("read_from_array", inputs="X I X_W?", outputs="Out", infer_shape=_read_shape, no_grad_inputs=["I", "X_W"],
    grad_maker=_read_from_array_grad)
def read_from_array(ctx):
    """Out = X[I]; an index at or past the array's length reads zeros (Paddle: an error)."""
    array = _array(ctx, ctx.input("X"), "X")
    i = _index(ctx)
    if isinstance(array.buffer, LoDValue):
        from .lod_array import read_lod_item
        return {"Out": read_lod_item(array, i)}
    element = lax.dynamic_index_in_dim(array.buffer, jnp.clip(i, 0, array.capacity - 1), keepdims=False)
    return {"Out": jnp.where((i >= 0) & (i < array.length), element, jnp.zeros_like(element))}


def _length_shape(ctx: InferShapeContext) -> None:
    ctx.set_output("Out", (1,), "int64", 0)


@op("lod_array_length", inputs="X", outputs="Out", infer_shape=_length_shape, grad=None)
def lod_array_length(ctx):
    """The number of elements of array X, int64 of shape [1]."""
    value = ctx.input("X")
    length = value.length if isinstance(value, TensorArray) else jnp.zeros((), jnp.int32)
    return {"Out": length.astype(jnp.int64).reshape(1)}


def _to_tensor_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    axis = int(ctx.attr("axis") or 0)
    shape = list(x.shape)
    if ctx.attr("use_stack"):
        axis = axis + len(shape) + 1 if axis < 0 else axis
        shape.insert(axis, -1)
    elif shape:
        axis = axis + len(shape) if axis < 0 else axis
        shape[axis] = -1
    ctx.set_output("Out", shape, x.dtype, 0)
    ctx.set_output("OutIndex", (-1,), "int32", 0)


@op("tensor_array_to_tensor", inputs="X", outputs="Out OutIndex", attrs={"axis": 0, "use_stack": False},
    infer_shape=_to_tensor_shape, no_grad_outputs=["OutIndex"], grad=None)
def tensor_array_to_tensor(ctx):
    """The array's elements stacked (``use_stack``) or concatenated along ``axis``; OutIndex gives
    each element's size along ``axis``. XLA needs a static shape, so every slot of the buffer is
    used: the array must be full (length == capacity), which is what writes at 0..n-1 give."""
    array = _array(ctx, ctx.input("X"), "X")
    elements = [array.buffer[k] for k in range(array.capacity)]
    axis = int(ctx.attr("axis"))
    if ctx.attr("use_stack"):
        out = jnp.stack(elements, axis=axis)
        index = jnp.ones((len(elements),), jnp.int32)
    else:
        out = jnp.concatenate(elements, axis=axis)
        index = jnp.full((len(elements),), elements[0].shape[axis], jnp.int32)
    return {"Out": out, "OutIndex": index}
