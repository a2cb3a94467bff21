"""Conditional execution: ``conditional_block`` (``lax.cond``) and its gradient, and
``select_input`` / ``select_output`` (the two branches of a ``cond`` joined and split).

What the control-flow ops share, and how their gradients work: ``_control.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir.errors import OpRuntimeError
from ...ir.program import EMPTY_VAR_NAME
from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext, grad_rule
from ..checks import all_ok, index_inputs
from ..lod_value import LoDValue
from ..lower import CHECKS, lod_aware
from ._control import (_cotangents, _given, _keep_declared, _restore, _same_structure, _scope, _strong, _tree_map,
                       _truth, _where, _zeros)
from ._errors import _fail
from .search import ragged
from .tensor_array import TensorArray, _diffable, _fit_cotangent, _leaf, _put, _with_leaves


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
        if CHECKS in written:                     # the branch's run-time checks leave it last
            outs.append(written[CHECKS])
        shapes[:] = [jax.eval_shape(lambda v=v: v) for v in outs]
        return outs

    def skip(values):
        structs = shapes or jax.eval_shape(run, values)
        outs = []
        if len(structs) > len(out_names):         # a branch not taken failed no check
            outs_checks = [all_ok(sub.check_infos)]
        else:
            outs_checks = []
        for n, struct in zip(out_names, structs):
            before = values.get(n, ctx.env.get(n))
            if isinstance(before, TensorArray) and isinstance(struct, TensorArray) \
                    and before.capacity < struct.buffer.shape[0]:
                before = before.grown(struct.buffer.shape[0] - before.capacity)   # written in the branch
            outs.append(_strong(before) if before is not None and _same_structure(before, struct)
                        else _zeros(struct))
        return outs + outs_checks

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
    if len(outs) > len(out_names):
        sub.report(outs[-1])
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
lod_aware("conditional_block")


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
            # dtype and shape of each input (of each part of a LoD value): the two may differ in either
            kinds = [" + ".join(f"{leaf.dtype}{list(leaf.shape)}" for leaf in
                                jax.tree_util.tree_leaves(jax.eval_shape(lambda v=v: v))) for v in xs]
            names = ctx.op.input("X")
            raise OpRuntimeError(
                f"{_where(ctx.op)}: its inputs have different shapes or dtypes: "
                + ", ".join(f"{n!r} is {k}" for n, k in zip(names, kinds))
                + "; under XLA both branches of a cond must produce the same shape and dtype")
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


# -- Fluid 1.x's IfElse: rows split by a mask and merged back -------------------------------------
def _rows(value):
    return value.data if value.__class__ is LoDValue else value


def _mask_rows(ctx, mask, n: int):
    m = _rows(mask).reshape(-1)
    if m.shape[0] != n:
        _fail(ctx, f"Mask has {m.shape[0]} entries for {n} rows")
    return m.astype(bool)


def _split_lod_tensor_shape(ctx: InferShapeContext) -> None:
    x, mask = ctx.input("X"), ctx.input("Mask")
    ctx.check(x.lod_level == 0, "split_lod_tensor of a LoD tensor (splitting sequences) is not supported: "
                                "fluidjax splits the rows of a dense tensor")
    ctx.check(mask.ndim == 2 and mask.shape[1] in (1, -1), f"Mask must be [N, 1], got {mask.shape}")
    for slot in ("OutTrue", "OutFalse"):
        ctx.set_output(slot, (-1,) + tuple(x.shape[1:]), x.dtype, 0)


def _split_grad_maker(op, out_grads, in_grads):
    # Paddle's: the gradient of a split is the merge of the parts' gradients (and the reverse).
    inputs = {"X": op.inputs["X"], "Mask": op.inputs["Mask"]}
    for slot, part in (("InTrue", "OutTrue"), ("InFalse", "OutFalse")):
        if any(n != EMPTY_VAR_NAME for n in out_grads.get(part, [])):
            inputs[slot] = out_grads[part]
    return [("merge_lod_tensor", inputs, {"Out": in_grads["X"]}, dict(op.attrs))]


def _merge_grad_maker(op, out_grads, in_grads):
    return [("split_lod_tensor", {"X": out_grads["Out"], "Mask": op.inputs["Mask"]},
             {"OutTrue": in_grads.get("InTrue") or [EMPTY_VAR_NAME], "OutFalse": in_grads.get("InFalse") or [EMPTY_VAR_NAME]},
             dict(op.attrs))]


@op("split_lod_tensor", inputs="X Mask", outputs="OutTrue OutFalse", attrs={"level": 0},
    infer_shape=_split_lod_tensor_shape, no_grad_inputs=["Mask"], grad_maker=_split_grad_maker)
def split_lod_tensor(ctx):
    """The rows of X where Mask [N, 1] is true (OutTrue) and where it is false (OutFalse), in order.
    Their counts depend on the data: each is padded to N rows and carries its count (a ragged
    value, docs/ops_data_dependent.md)."""
    x = _rows(ctx.input("X"))          # a counted value (a merge's result, its gradient): its rows
    n = x.shape[0]
    m = _mask_rows(ctx, ctx.input("Mask"), n)
    out = {}
    for slot, keep in (("OutTrue", m), ("OutFalse", ~m)):
        (pos,) = jnp.nonzero(keep, size=n, fill_value=n - 1 if n else 0)
        count = jnp.sum(keep)
        rows = jnp.where((jnp.arange(n) < count).reshape((n,) + (1,) * (x.ndim - 1)), x[pos], jnp.zeros((), x.dtype))
        out[slot] = ragged(rows, count)
    return out


def _merge_lod_tensor_shape(ctx: InferShapeContext) -> None:
    mask, t, f = ctx.input("Mask"), ctx.input("InTrue"), ctx.input("InFalse")
    t, f = t or f, f or t                     # a gradient's merge may lack one part (zeros)
    ctx.check(t.shape[1:] == f.shape[1:] or any(d < 0 for d in t.shape[1:] + f.shape[1:]),
              f"InTrue {t.shape} and InFalse {f.shape} must have the same row shape")
    ctx.check(t.dtype == f.dtype, f"InTrue is {t.dtype} but InFalse is {f.dtype}")
    ctx.set_output("Out", (mask.shape[0],) + tuple(t.shape[1:]), t.dtype, 0)


@op("merge_lod_tensor", inputs="X Mask InTrue? InFalse?", outputs="Out", attrs={"level": 0},
    infer_shape=_merge_lod_tensor_shape, no_grad_inputs=["X", "Mask"], grad_maker=_merge_grad_maker)
def merge_lod_tensor(ctx):
    """The rows of InTrue and InFalse put back where Mask [N, 1] is true and false: row i is the
    next unused row of InTrue when Mask[i], else of InFalse (split_lod_tensor's inverse)."""
    mask = ctx.input("Mask")
    t, f = ctx.input("InTrue"), ctx.input("InFalse")
    t, f = _rows(t if t is not None else f), _rows(f if f is not None else t)
    if ctx.input("InTrue") is None or ctx.input("InFalse") is None:      # a gradient's missing part
        t = t if ctx.input("InTrue") is not None else jnp.zeros_like(t)
        f = f if ctx.input("InFalse") is not None else jnp.zeros_like(f)
    n = _rows(mask).reshape(-1).shape[0]
    m = _mask_rows(ctx, mask, n)
    it = jnp.clip(jnp.cumsum(m) - 1, 0, max(t.shape[0] - 1, 0))
    jf = jnp.clip(jnp.cumsum(~m) - 1, 0, max(f.shape[0] - 1, 0))
    pick_t = t[it] if t.shape[0] else jnp.zeros((n,) + t.shape[1:], t.dtype)
    pick_f = f[jf] if f.shape[0] else jnp.zeros((n,) + f.shape[1:], f.dtype)
    # every one of the N rows is real: said explicitly, or the lowering would give the result the
    # row count of the (counted) InTrue it read
    return {"Out": ragged(jnp.where(m.reshape((n,) + (1,) * (t.ndim - 1)), pick_t, pick_f), n)}


lod_aware("split_lod_tensor", "merge_lod_tensor")
