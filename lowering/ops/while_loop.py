"""Loops: ``while`` (``lax.while_loop``) and its gradient ``while_grad`` (through a bounded
``lax.scan`` or by recomputation), and the ops loops test and count with: ``increment``,
``is_empty``.

What the control-flow ops share, and how their gradients work: ``_control.py``; the reasoning
and the costs: ``docs/control_flow.md``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..interrupt import while_loop as gated_while_loop
from ...ir.errors import OpRuntimeError, ShapeError
from ...ir.program import EMPTY_VAR_NAME
from ...ir.registry import Attr, op
from ...ir.shape import InferShapeContext, grad_rule
from ..checks import all_ok, bound_checked, merge_packed, room_of
from ..lod_value import LoDValue, assumed_longest, longest_of
from ..lower import CHECKS, block_refs, lod_aware
from ._control import (_constant, _cotangents, _given, _keep_declared, _last_writer, _restore, _scope, _strong,
                       _tree_map, _truth, _where, _zeros)
from .tensor_array import (_IN_LOOP, _LOOP_OWNER, DEFAULT_LOOP_CAPACITY, TensorArray, _diffable, _fit_cotangent,
                           _leaf, _put, _with_leaves, widened)


# -- while -----------------------------------------------------------------------------------------
class _Loop:
    """A ``while`` op's loop: which names it carries, their values before it, the rest it reads."""

    def __init__(self, ctx, fwd_op, sub, given: dict, key, assume: bool = False) -> None:
        self.op, self.sub, self.key, self.ctx = fwd_op, sub, key, ctx
        conds = [n for n in fwd_op.input("Condition") if n != EMPTY_VAR_NAME]
        if len(conds) != 1:
            raise OpRuntimeError(f"{_where(fwd_op)}: needs exactly one Condition, got {conds}")
        self.cond_name = conds[0]
        outs = [n for n in fwd_op.output("Out") if n != EMPTY_VAR_NAME]
        self.carried = list(dict.fromkeys(outs + [self.cond_name]))
        init, missing = {}, []
        # Bounds on the longest sequence of the LoD loop variables, per level (see _longest_bounds):
        # the body is traced with them, and every iteration's values are checked against them.
        self.longest = {}
        for n in self.carried:
            v = given.get(n, ctx.env.get(n))
            if v is None:
                missing.append(n)
            else:
                if assume and v.__class__ is LoDValue:
                    self.longest.update(_longest_bounds(fwd_op, n, v))
                init[n] = _strong(v)
        self.consts = {n: v for n, v in given.items() if n not in self.carried}
        # Arrays the body writes keep one capacity through the loop: room made before it starts,
        # for as many iterations as the program or the data bounds the loop by (a DynamicRNN's
        # longest sequence is at most its rank table's bound: RankTable.longest), else a default that a run
        # writing past it grows (checks.grow_rooms: the run is done again with more room).
        writes = [o.output("Out")[0] for o in _ops_within(sub.block) if o.type == "write_to_array"]
        trips = room_of(fwd_op, _bound(fwd_op) or _ranked_trips(fwd_op, ctx.env) or DEFAULT_LOOP_CAPACITY)
        self.trips = trips
        # An array the body creates gets room for its own writes (an array made before the loop is
        # grown below); "*" covers a name the static scan of the body could not see.
        self.room = {"*": len(writes) * trips, **{n: writes.count(n) * trips for n in writes}}
        for n, v in init.items():
            if isinstance(v, TensorArray):          # room for every write of the body to it
                init[n] = v.grown(writes.count(n) * trips)
        self._widen_arrays(init)
        self.capacity = self._widen_lod_vars(init)
        if self.capacity:
            self._widen_arrays(init)                 # arrays the wider variables feed
            init[_FIT] = (jnp.asarray(True), jnp.zeros((), jnp.int64))
            self.carried.append(_FIT)
        if self.longest:
            init[_LONGEST] = {k: (jnp.asarray(True), jnp.zeros((), jnp.int64)) for k in self.longest}
            self.carried.append(_LONGEST)
        self.checked = False
        if missing or sub.checks is not None:
            # Variables the body writes for the first time: zeros of the type one iteration gives.
            written = jax.eval_shape(lambda c: self._body(c, self.consts, 0), init)
            for n in missing:
                if n not in written:
                    raise OpRuntimeError(f"{_where(fwd_op)}: output {n!r} has no value before the loop and "
                                         f"its body (block {sub.block.idx}) does not write it")
                init[n] = _zeros(written[n])
            if CHECKS in written:                   # the body's run-time checks ride in the carry
                init[CHECKS] = all_ok(sub.check_infos)
                self.carried.append(CHECKS)
                self.checked = True
        self.init = init

    def _widen_arrays(self, init: dict) -> None:
        """Give arrays of LoD elements the element size the body writes (the first step of a beam
        decoder has one prefix per source, later ones up to ``beam_size``): one body trace per
        widening, until an iteration keeps every array's shape."""
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

    def _widen_lod_vars(self, init: dict) -> dict:
        """Loop variables holding LoD values that one iteration gives more rows or sequences (Fluid's
        beam decoder assigns ``sequence_expand(encoder_out, selected_ids)`` back to ``encoder_out``:
        one sequence per source before the loop, one per live prefix after): that iteration's
        static shape becomes the variable's capacity, its value before the loop padded to it (rows
        of zeros, empty sequences at the end). Each iteration's value is fitted back into it
        (:func:`_fit_lod`), and a value whose real rows or sequences do not fit fails the run with
        a ``BoundExceededError`` (the check rides in the carry). {name: (rows, entries per level)}."""
        try:
            written = jax.eval_shape(lambda c: self._body(c, self.consts, 0), init)
        except Exception:
            return {}               # the loop's own run reports it
        capacity = {}
        for n in self.carried:
            v, after = init.get(n), written.get(n)
            if v.__class__ is not LoDValue or after.__class__ is not LoDValue \
                    or len(v.offsets) != len(after.offsets) or v.data.shape[1:] != after.data.shape[1:]:
                continue
            rows = max(v.data.shape[0], after.data.shape[0])
            entries = [max(a.shape[0], b.shape[0]) for a, b in zip(v.offsets, after.offsets)]
            if rows != v.data.shape[0] or any(e != o.shape[0] for e, o in zip(entries, v.offsets)):
                capacity[n] = (rows, entries)
                init[n] = _fit_lod(v, rows, entries)[0]
        return capacity

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
        pairs = [(v.offsets[level], bound) for (n, level), bound in self.longest.items()
                 if (v := carry.get(n)).__class__ is LoDValue and level < len(v.offsets)]
        with assumed_longest(pairs):
            return self.sub({**consts, **carry, _IN_LOOP: self.room, _LOOP_OWNER: (self.op, self.trips)},
                            self._key(i))

    def step(self, carry: dict, consts: dict, i) -> dict:
        """One iteration: the body run on ``carry`` (and ``consts``); the new carry."""
        written = self._body(carry, consts, i)
        new = {n: _strong(written[n]) if n in written else carry[n] for n in self.carried if n != CHECKS}
        for n, (rows, entries) in self.capacity.items():
            new[n], fits, needed = _fit_lod(new[n], rows, entries)
            ok, most = carry[_FIT]
            new[_FIT] = (ok & fits, jnp.maximum(most, needed))
        if self.longest:
            new[_LONGEST] = {k: _within_longest(new[k[0]], k[1], bound, carry[_LONGEST][k])
                             for k, bound in self.longest.items()}
        if self.checked:
            new[CHECKS] = merge_packed(carry[CHECKS], written[CHECKS], self.sub.check_infos)
        return new

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
            # (Ctrl-C and FLAGS_max_while_iterations can end it: lowering/interrupt.py)
            return gated_while_loop(self.op, cond, body, (carry, jnp.zeros((), jnp.int32)))
        except TypeError:
            self._check_types()     # names the loop variable whose type changed (one more trace)
            raise


def _ops_within(block):
    """The ops of ``block`` and of the sub-blocks its ops run."""
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
    loop = _Loop(ctx, ctx.op, sub, given, key, assume=ctx.checks is not None)
    final, _ = loop.run(loop.init, loop.consts)
    if loop.checked:
        sub.report(final[CHECKS])
    if loop.capacity and ctx.checks is not None:
        ok, needed = final[_FIT]
        names = ", ".join(repr(n) for n in loop.capacity)
        ctx.checks.check_bound(ctx.op, ok, needed, {
            "kind": "bound", "bound": max(r for r, _ in loop.capacity.values()),
            "message": f"loop variable(s) {names} grew past the rows or sequences their first iteration "
                       f"gave them ({ {n: r for n, (r, _) in loop.capacity.items()} } rows); the loop carries "
                       "one shape, fixed when the step compiles (real rows or sequences needed)"})
    for (n, level), bound in loop.longest.items():
        ok, needed = final[_LONGEST][(n, level)]
        ctx.checks.check_bound(ctx.op, ok, needed, {
            "kind": "room", "owner": ctx.op, "room": bound, "room_key": ("longest", n, level), "array": n,
            "what": f"loop variable {n!r} has a sequence (level {level}) of {{needed}} entries, but its bound "
                    f"(the longest its loop may carry) may be at most {{cap}}"})
    return {"Out": [final.get(n) for n in ctx.op.output("Out")], "StepScopes": _scope(given, key)}


# The carry entry of a loop whose LoD variables have bounds on their longest sequence: per
# (variable, level), (every iteration's value kept to the bound, the longest sequence one had).
_LONGEST = "@fluidjax:loop-longest@"


def _longest_bounds(fwd_op, name: str, value) -> dict:
    """{(name, level): bound} for the levels of a LoD loop variable whose value before the loop has
    a known bound on its longest sequence (a fed LoD's bucket, ``lod_value.longest_of``), or a
    larger one a run found necessary (``checks.room_of``: a run whose iterations made a longer
    sequence is done again with the bound grown, as an array's room is)."""
    out = {}
    for level, offsets in enumerate(value.offsets):
        longest = longest_of(offsets)
        if longest is not None:
            out[(name, level)] = room_of(fwd_op, max(int(longest), 1), ("longest", name, level))
    return out


def _within_longest(value, level: int, bound: int, before):
    """The running (ok, longest) check of one loop variable's level against its bound."""
    ok, most = before
    if value.__class__ is not LoDValue or level >= len(value.offsets):
        return before
    o = value.offsets[level]
    longest = jnp.max(o[1:] - o[:-1], initial=0).astype(jnp.int64) if o.shape[0] > 1 else jnp.zeros((), jnp.int64)
    return ok & (longest <= bound), jnp.maximum(most, longest)


# The carry entry of a loop whose LoD variables have a capacity: (every value fit so far, the most
# rows or sequences one needed).
_FIT = "@fluidjax:loop-fit@"


def _fit_lod(value, rows: int, entries) -> tuple:
    """``value`` (a LoDValue) with ``rows`` data rows and ``entries`` offsets per level: padded
    (zero rows, empty sequences at the end) or cut. Returns (the value, whether its real rows and
    sequences all fit, the most it needed). Real rows come first and padding sequences are empty
    at the end, so a cut that keeps them changes nothing."""
    if value.__class__ is not LoDValue:
        return value, jnp.asarray(True), jnp.zeros((), jnp.int64)
    fits, needed = jnp.asarray(True), jnp.zeros((), jnp.int64)
    offsets = []
    for o, e in zip(value.offsets, entries):
        if o.shape[0] > e:      # the cut entries must repeat the last kept one (empty sequences)
            last = o[e - 1]
            fits = fits & jnp.all(o[e:] == last)
            needed = jnp.maximum(needed, jnp.sum(o != o[-1]).astype(jnp.int64) + 1)
            o = o[:e]
        elif o.shape[0] < e:
            o = jnp.concatenate([o, jnp.broadcast_to(o[-1:], (e - o.shape[0],))])
        offsets.append(o)
    data = value.data
    real = value.offsets[-1][-1]
    if data.shape[0] > rows:
        fits = fits & (real <= rows)
        data = data[:rows]
    elif data.shape[0] < rows:
        data = jnp.concatenate([data, jnp.zeros((rows - data.shape[0],) + data.shape[1:], data.dtype)])
    needed = jnp.maximum(needed, real.astype(jnp.int64))
    return LoDValue(data, offsets), fits, needed


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


def _ranked_trips(fwd_op, env) -> int | None:
    """A bound on the trip count of a loop counting to a ``max_sequence_len`` (DynamicRNN's
    ``step < max_seq_len``): the longest sequence of the ranked LoD tensor is at most its padded
    row count, and for a fed sequence at most a bucket of its longest; the rank table holds the
    bound statically (part of the step's signature). None for any other loop."""
    try:
        body = fwd_op.block.program.block(_block_idx(fwd_op.attrs.get("sub_block")))
        ops = list(body.ops)
        return _trips_until(fwd_op, ops, len(ops), fwd_op.input("Condition")[0], 0, env)
    except (KeyError, IndexError, ValueError, TypeError):
        return None


def _rank_rows(fwd_op, name: str, env) -> int | None:
    """The bound on the longest sequence (``RankTable.longest``: a bucket of it for a fed sequence,
    else the padded row count) of the rank table whose ``max_sequence_len`` last wrote ``name`` before
    ``fwd_op`` (in its block), when that table is at hand."""
    block = fwd_op.block
    ops = block.ops[:block.ops.index(fwd_op)] if fwd_op in block.ops else []
    writer = _last_writer(ops, name)
    if writer is None or writer.type != "max_sequence_len":
        return None
    table = env.get(writer.input("RankTable")[0]) if env is not None else None
    longest = getattr(table, "longest", None)
    return max(int(longest), 1) if isinstance(longest, int) else None


def _trips_until(fwd_op, ops, end: int, cond: str, depth: int, env=None) -> int | None:
    """:func:`_counted_trips` for the condition ``cond`` written among the body's first ``end``
    ops: through ``assign`` s and ``logical_and`` (the loop ends no later than its counting side:
    a bound, as for Fluid's beam decoder, ``counter < max_len and not is_empty(selected_ids)``).
    With ``env`` (the loop's environment), a limit written by ``max_sequence_len`` counts too, as
    a bound: see :func:`_ranked_trips`."""
    last = _last_writer(ops[:end], cond)
    if last is None or depth > 8:
        return None
    at = ops.index(last)
    if last.type == "assign":
        return _trips_until(fwd_op, ops, at, last.input("X")[0], depth + 1, env)
    if last.type == "logical_and":
        sides = [_trips_until(fwd_op, ops, at, last.input(slot)[0], depth + 1, env) for slot in ("X", "Y")]
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
    if stop is None and env is not None and last.type == "less_than":
        stop = _rank_rows(fwd_op, limit, env)
        start = start if start is None or start >= 0 else None      # counting up from 0 or more
    if start is None or stop is None:
        return None
    return max(0, int(_COMPARE[last.type](int(start), int(stop), int(k))))


@op("while_grad", inputs="X* Out* Out@GRAD* StepScopes?", outputs="X@GRAD*",
    attrs={"sub_block": Attr("block", 0), "is_test": False, "original_output_grad": Attr("strings", [])},
    infer_shape=grad_rule, grad=None)
def while_grad(ctx):
    """The gradient of ``while``: the vjp of the whole loop, through a bounded ``lax.scan`` when the
    forward op has ``max_iterations``, counts to a constant, or counts to a rank table's
    ``max_sequence_len`` (a loop still running at the bound gives NaN gradients), else
    by running the iterations backwards, recomputing each one's input from the start (exact, no
    memory per iteration, quadratic time in the trip count). See docs/control_flow.md."""
    sub = ctx.sub_block()
    fwd_op = _forward_while(ctx, sub.block)
    names = ctx.op.input("X")
    given, key = _restore(ctx, _given(names, ctx.inputs("X")), "StepScopes")
    if not isinstance(ctx.input("StepScopes"), dict):
        raise OpRuntimeError(f"{_where(ctx.op)}: needs StepScopes, the forward loop's saved inputs (its "
                             "loop variables are overwritten by the loop)")
    # The same bounds as the forward loop (which checks them in the same step): the same shapes, so
    # XLA can share the recomputed forward with the real one.
    loop = _Loop(ctx, fwd_op, sub, given, key, assume=ctx.checks is not None)
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
    # A DynamicRNN's loop counts to its longest sequence, which the rank table bounds (a bucket of
    # the fed lengths): a scan over that bound is linear in the steps, where recomputation is
    # quadratic (2,048 steps: minutes instead of a fraction of a second).
    bound = _bound(fwd_op) or _ranked_trips(fwd_op, ctx.env)
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


# Sub-blocks see LoD values as they are (a DynamicRNN step pools its LoD static input).
lod_aware("while", "is_empty")
# A loop carrying a LoD variable may fit it into a capacity, checked at run time (_Loop._widen_lod_vars).
bound_checked("while", lambda op: any((v := op.block.find_var(n)) is not None and v.lod_level
                                      for n in op.output("Out")))
