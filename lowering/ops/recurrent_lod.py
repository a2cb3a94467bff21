"""Recurrent ops: ``lstm`` and ``gru`` over LoD sequences (Paddle's ops behind ``dynamic_lstm`` /
``dynamic_gru``), and the one-step cells ``lstm_unit`` and ``gru_unit``.

Gate layouts (Paddle 2.6.2's kernels; the op-test rows check them against Paddle):

- ``lstm``: the 4D columns of Input, Weight and Bias are (candidate c, input i, forget f, output o)
  — the kernels' "old API" layout (``lstm_cpu_kernel.h``). A [1, 7D] Bias (``use_peepholes``) ends
  with the peepholes (w_ic, w_fc, w_oc): i and f look at c_{t-1}, o at the new c_t.
- ``gru``/``gru_unit``: the 3D columns are (update u, reset r, candidate c). Weight [D, 3D] is read
  as its memory holds it: the first 2·D·D values are a [D, 2D] matrix (u, r), the last D·D a [D, D]
  matrix (candidate) — *not* ``Weight[:, :2D]`` and ``Weight[:, 2D:]``. ``origin_mode`` picks
  h = u·h_prev + (1-u)·c instead of the default h = (1-u)·h_prev + u·c.
- ``lstm_unit``: the 4D columns of X are (i, f, o, g); ``forget_bias`` is added to f's input.

How a recurrence runs inside ``jax.jit``: a LoD input is rows padded to a bucket plus offsets
(``lowering/lod_value.py``). The number of sequences is static, their lengths are not. By default
(``RAGGED``) the sequences are sorted by length and run in phases of a shrinking static active
batch (``_ragged.py``), so the work follows the real tokens as Paddle's sequence2batch does. The
padded loop below stays as the reference: a loop of exactly ``max(lengths)`` steps (a traced trip
count), step t gathering row ``start + t`` (``end - 1 - t`` with ``is_reverse``) of every
sequence still running, updating a [num_seqs, D] state and scattering its outputs back to those
rows; finished sequences keep their state and write nothing, empty sequences never run. Both are
``while`` loops, which JAX cannot differentiate in reverse, so each carries its own vjp: a second
loop walks the steps backwards, differentiating one step at a time with ``jax.vjp`` of the cell.
It saves what Paddle saves — per row, the state and the gate pre-activations, O(rows · D) memory,
nothing proportional to padding — so the backward redoes no matrix product, and the weight
gradient is one [D, rows] x [rows, 4D] product after the loop.

Paddle quirks kept: ``lstm_grad`` ignores Cell's gradient (Paddle's grad op has no Cell@GRAD
input), so Cell is a no-gradient output here too; only Hidden's gradient flows. The intermediate
outputs (BatchGate, BatchCellPreAct, BatchResetHiddenPrev, BatchHidden) hold Paddle's values
(activated gates, act(c), r·h_prev, h) but in input row order with the input's LoD, not in
Paddle's length-sorted batch order (``std::sort`` leaves ties unordered, so that order is not
reproducible); nothing reads them, so XLA drops them unless they are fetched.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax

from ...ir.registry import op
from ...ir.shape import InferShapeContext
from ..lod_value import LoDValue, sequence_count
from ..lower import lod_aware, plain_row_outputs
from ._ragged import batch_levels, previous_rows, ragged_recurrence
from ._shapes import dims_equal

# Paddle's GetActivationType names (lstm also lists them in its attrs' InEnum); the _v2 forms are
# Paddle's unclipped sigmoid/tanh. Paddle clips sigmoid's input to [-40, 13] and tanh's to
# [-20, inf); the results differ from these by < 3e-6, and only for saturated inputs.
_ACTIVATIONS = {
    "sigmoid": jax.nn.sigmoid, "sigmoid_v2": jax.nn.sigmoid,
    "tanh": jnp.tanh, "tanh_v2": jnp.tanh,
    "relu": jax.nn.relu,
    "identity": lambda v: v, "": lambda v: v,
}
# gru_unit's int attributes (Paddle's GRUActivationType).
_GRU_UNIT_ACTIVATIONS = {0: "identity", 1: "sigmoid", 2: "tanh", 3: "relu"}


# -- the recurrence: a loop over time steps with its own vjp --------------------------------------
@dataclasses.dataclass(frozen=True)
class _Cell:
    """One step of an LSTM or GRU after its linear part ``pre = x[:, :width] + h_prev @ w_lin``.

    ``step(pre, x_rest, carry, params)`` -> new carry (h first). Hashable: it is a static argument
    of :func:`_recurrence`.
    """

    kind: str                 # "lstm" | "lstmp" | "gru"
    reverse: bool
    gate_act: str
    cell_act: str = "tanh"    # lstm: act(c) in h = o * act(c)
    cand_act: str = "tanh"    # lstm: candidate; gru: the candidate ("activation")
    origin_mode: bool = False
    proj_act: str = "tanh"    # lstmp: r = proj_act(h @ ProjWeight)
    cell_clip: float = 0.0    # lstmp: c clipped to [-cell_clip, cell_clip] when > 0
    proj_clip: float = 0.0    # lstmp: r clipped likewise

    def _lstm(self, pre, c_prev, peep):
        """One LSTM step from its gate pre-activations (c, i, f, o): (h, c)."""
        gate = _ACTIVATIONS[self.gate_act]
        gc, gi, gf, go = jnp.split(pre, 4, axis=1)
        if peep:
            w_ic, w_fc, w_oc = peep
            i, f = gate(gi + c_prev * w_ic), gate(gf + c_prev * w_fc)
        else:
            i, f = gate(gi), gate(gf)
        c = _ACTIVATIONS[self.cand_act](gc) * i + c_prev * f
        if self.cell_clip > 0:
            c = jnp.clip(c, -self.cell_clip, self.cell_clip)
        o = gate(go + c * w_oc) if peep else gate(go)
        return _ACTIVATIONS[self.cell_act](c) * o, c

    def project(self, h, w_proj):
        """lstmp's recurrent projection of a hidden state."""
        r = _ACTIVATIONS[self.proj_act](h @ w_proj)
        return jnp.clip(r, -self.proj_clip, self.proj_clip) if self.proj_clip > 0 else r

    def step(self, pre, x_rest, carry, params):
        if self.kind == "lstm":
            return self._lstm(pre, carry[1], params)
        if self.kind == "lstmp":                      # carry (r, c); params (*peepholes, ProjWeight)
            h, c = self._lstm(pre, carry[1], params[:-1])
            return self.project(h, params[-1]), c
        gate = _ACTIVATIONS[self.gate_act]
        cand = _ACTIVATIONS[self.cand_act]
        (h_prev,) = carry
        (w_c,) = params
        u, r = jnp.split(gate(pre), 2, axis=1)
        c = cand(x_rest + (r * h_prev) @ w_c)
        if self.origin_mode:
            return (u * h_prev + c - u * c,)
        return (h_prev - u * h_prev + u * c,)


def _step_rows(offsets, t, reverse: bool):
    """Row of step ``t`` of every sequence (0 where it has no such step) and whether it has one."""
    starts, ends = offsets[:-1], offsets[1:]
    active = t < ends - starts
    rows = ends - 1 - t if reverse else starts + t
    return jnp.where(active, rows, 0), active


def _step_count(offsets):
    return jnp.max(offsets[1:] - offsets[:-1], initial=0)


_previous_rows = previous_rows    # (shared with the ragged recurrence)


def _run_forward(cell: _Cell, x_rows, w_lin, params, init, offsets):
    rows = x_rows.shape[0]
    width = w_lin.shape[1]

    def body(t, state):
        carry, state_rows, pre_rows = state
        at, active = _step_rows(offsets, t, cell.reverse)
        xt = x_rows[at]
        pre = xt[:, :width] + carry[0] @ w_lin
        new = cell.step(pre, xt[:, width:], carry, params)
        keep = active[:, None]
        dest = jnp.where(active, at, rows)            # finished sequences write nowhere
        carry = tuple(jnp.where(keep, n, o) for n, o in zip(new, carry))
        state_rows = tuple(buf.at[dest].set(n, mode="drop") for buf, n in zip(state_rows, new))
        return carry, state_rows, pre_rows.at[dest].set(pre, mode="drop")

    state_rows = tuple(jnp.zeros((rows,) + c.shape[1:], c.dtype) for c in init)
    pre_rows = jnp.zeros((rows, width), x_rows.dtype)
    _, state_rows, pre_rows = lax.fori_loop(0, _step_count(offsets), body, (tuple(init), state_rows, pre_rows))
    return state_rows, pre_rows


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _recurrence(cell: _Cell, x_rows, w_lin, params, init, offsets):
    """Run ``cell`` over every sequence of ``offsets``: (per-row states, per-row pre-activations)."""
    return _run_forward(cell, x_rows, w_lin, params, init, offsets)


def _recurrence_fwd(cell, x_rows, w_lin, params, init, offsets):
    state_rows, pre_rows = _run_forward(cell, x_rows, w_lin, params, init, offsets)
    return (state_rows, pre_rows), (x_rows, w_lin, params, init, offsets, state_rows, pre_rows)


def _recurrence_bwd(cell, saved, cotangents):
    x_rows, w_lin, params, init, offsets, state_rows, pre_rows = saved
    ct_states, ct_pre = cotangents
    rows, width = x_rows.shape[0], w_lin.shape[1]
    steps = _step_count(offsets)

    def body(k, state):
        d_carry, dx_rows, d_params = state
        t = steps - 1 - k
        at, active = _step_rows(offsets, t, cell.reverse)
        before, _ = _step_rows(offsets, t - 1, cell.reverse)
        carry_prev = tuple(jnp.where(t == 0, i, buf[before]) for i, buf in zip(init, state_rows))
        keep = active[:, None]
        # A sequence not yet reached (walking backwards) has no gradient: its d_carry is still 0.
        d_new = tuple(jnp.where(keep, d + ct[at], jnp.zeros((), d.dtype)) for d, ct in zip(d_carry, ct_states))
        _, step_vjp = jax.vjp(cell.step, pre_rows[at], x_rows[at][:, width:], carry_prev, params)
        d_pre, d_rest, d_prev, d_step_params = step_vjp(d_new)
        d_pre = jnp.where(keep, d_pre + ct_pre[at], jnp.zeros((), d_pre.dtype))
        d_prev = (d_prev[0] + d_pre @ w_lin.T,) + tuple(d_prev[1:])
        d_carry = tuple(jnp.where(keep, n, o) for n, o in zip(d_prev, d_carry))
        dest = jnp.where(active, at, rows)
        dx_rows = dx_rows.at[dest].set(jnp.concatenate([d_pre, d_rest], axis=1), mode="drop")
        d_params = jax.tree_util.tree_map(jnp.add, d_params, d_step_params)
        return d_carry, dx_rows, d_params

    start = (tuple(jnp.zeros_like(i) for i in init), jnp.zeros_like(x_rows),
             jax.tree_util.tree_map(jnp.zeros_like, params))
    d_init, dx_rows, d_params = lax.fori_loop(0, steps, body, start)
    # The recurrent weight's gradient, one product over all rows: sum_t h_{t-1}^T d_pre_t.
    h_prev_rows = _previous_rows(state_rows[0], init[0], offsets, cell.reverse)
    d_w_lin = h_prev_rows.T @ dx_rows[:, :width]
    return dx_rows, d_w_lin, d_params, d_init, None


_recurrence.defvjp(_recurrence_fwd, _recurrence_bwd)

# The ragged recurrence (``_ragged.py``: sequences sorted by length, a shrinking active batch) is
# the default; False runs the padded loop above, every sequence every step (kept as the reference
# the tests compare against). Read when a step is traced.
RAGGED = True


def _run_recurrence(cell: _Cell, x_rows, w_lin, params, init, offsets):
    """(per-row states, per-row pre-activations) of ``cell`` over the sequences of ``offsets``."""
    count = offsets.shape[0] - 1
    if not RAGGED or count == 0:
        return _recurrence(cell, x_rows, w_lin, params, init, offsets)
    return ragged_recurrence(cell, x_rows, w_lin, params, init, offsets, batch_levels(count))


# -- shape rules ----------------------------------------------------------------------------------
def _check_activation(ctx: InferShapeContext, attr: str) -> None:
    name = ctx.attr(attr)
    ctx.check(name in _ACTIVATIONS, f"{attr} must be one of {sorted(k for k in _ACTIVATIONS if k)}, got {name!r}")


def _check_sequence_input(ctx: InferShapeContext, gates: int):
    x = ctx.input("Input")
    ctx.check(x.ndim == 2, f"Input must be [T, {gates}D] (rank 2), got shape {x.shape}")
    ctx.check(x.lod_level == 1, f"Input must be a LoD tensor with one level (lod_level 1), got lod_level "
                                f"{x.lod_level}: feed it as a LoDTensor of sequences")
    return x


def _check_init_state(ctx: InferShapeContext, slot: str, size: int) -> None:
    v = ctx.input(slot)
    if v is not None:
        ctx.check(v.ndim == 2 and dims_equal(v.shape[1], size),
                  f"{slot} must be [num_sequences, {size}], got shape {v.shape}")


def _lstm_shape(ctx: InferShapeContext) -> None:
    x = _check_sequence_input(ctx, 4)
    w, b = ctx.input("Weight"), ctx.input("Bias")
    ctx.check(w.ndim == 2 and w.shape[1] >= 0 and w.shape[1] % 4 == 0,
              f"Weight must be [D, 4D], got shape {w.shape}")
    size = w.shape[1] // 4
    ctx.check(dims_equal(w.shape[0], size), f"Weight must be [D, 4D], got shape {w.shape}")
    ctx.check(dims_equal(x.shape[1], 4 * size), f"Input's width must be 4 * {size} (Weight {w.shape}), got {x.shape}")
    width = 7 * size if ctx.attr("use_peepholes") else 4 * size
    ctx.check(b.ndim == 2 and dims_equal(b.shape[0], 1) and dims_equal(b.shape[1], width),
              f"Bias must be [1, {width}] with use_peepholes={bool(ctx.attr('use_peepholes'))}, got shape {b.shape}")
    ctx.check((ctx.input("H0") is None) == (ctx.input("C0") is None),
              "H0 and C0 must be given together (or neither)")
    _check_init_state(ctx, "H0", size)
    _check_init_state(ctx, "C0", size)
    for attr in ("gate_activation", "cell_activation", "candidate_activation"):
        _check_activation(ctx, attr)
    rows = x.shape[0]
    for slot in ("Hidden", "Cell", "BatchCellPreAct"):
        ctx.set_output(slot, (rows, size), x.dtype, 1)
    ctx.set_output("BatchGate", (rows, 4 * size), x.dtype, 1)


def _gru_weight_size(ctx: InferShapeContext, w) -> int:
    ctx.check(w.ndim == 2 and w.shape[0] >= 0 and dims_equal(w.shape[1], 3 * w.shape[0]),
              f"Weight must be [D, 3D], got shape {w.shape}")
    return w.shape[0]


def _check_gru_bias(ctx: InferShapeContext, size: int) -> None:
    b = ctx.input("Bias")
    if b is not None:
        ctx.check(b.ndim == 2 and dims_equal(b.shape[0], 1) and dims_equal(b.shape[1], 3 * size),
                  f"Bias must be [1, {3 * size}], got shape {b.shape}")


def _gru_shape(ctx: InferShapeContext) -> None:
    x = _check_sequence_input(ctx, 3)
    size = _gru_weight_size(ctx, ctx.input("Weight"))
    ctx.check(dims_equal(x.shape[1], 3 * size), f"Input's width must be 3 * {size}, got shape {x.shape}")
    _check_init_state(ctx, "H0", size)
    _check_gru_bias(ctx, size)
    _check_activation(ctx, "activation")
    _check_activation(ctx, "gate_activation")
    rows = x.shape[0]
    for slot in ("Hidden", "BatchResetHiddenPrev", "BatchHidden"):
        ctx.set_output(slot, (rows, size), x.dtype, 1)
    ctx.set_output("BatchGate", (rows, 3 * size), x.dtype, 1)


def _gru_unit_shape(ctx: InferShapeContext) -> None:
    x, h = ctx.input("Input"), ctx.input("HiddenPrev")
    size = _gru_weight_size(ctx, ctx.input("Weight"))
    ctx.check(x.ndim == 2 and dims_equal(x.shape[1], 3 * size), f"Input must be [N, {3 * size}], got {x.shape}")
    ctx.check(h.ndim == 2 and dims_equal(h.shape[1], size) and dims_equal(h.shape[0], x.shape[0]),
              f"HiddenPrev must be [N, {size}] with Input's N, got {h.shape} (Input {x.shape})")
    _check_gru_bias(ctx, size)
    for attr in ("activation", "gate_activation"):
        ctx.check(ctx.attr(attr) in _GRU_UNIT_ACTIVATIONS,
                  f"{attr} must be 0 (identity), 1 (sigmoid), 2 (tanh) or 3 (relu), got {ctx.attr(attr)!r}")
    batch = x.shape[0] if x.shape[0] >= 0 else h.shape[0]
    # Paddle's gru_unit shares no LoD: its outputs are plain rows, one per row of Input (the
    # decoders of Fluid 1.x sequence_expand the new state by the selected ids).
    ctx.set_output("Gate", (batch, 3 * size), x.dtype, 0)
    ctx.set_output("ResetHiddenPrev", (batch, size), x.dtype, 0)
    ctx.set_output("Hidden", (batch, size), x.dtype, 0)


def _lstm_unit_shape(ctx: InferShapeContext) -> None:
    x, c = ctx.input("X"), ctx.input("C_prev")
    ctx.check(x.ndim == 2 and c.ndim == 2, f"X and C_prev must be rank 2, got {x.shape} and {c.shape}")
    ctx.check(dims_equal(x.shape[0], c.shape[0]) and (c.shape[1] < 0 or dims_equal(x.shape[1], 4 * c.shape[1])),
              f"X must be [N, 4D] for C_prev [N, D], got X {x.shape} and C_prev {c.shape}")
    batch = c.shape[0] if c.shape[0] >= 0 else x.shape[0]
    ctx.set_output("C", (batch, c.shape[1]), x.dtype, x.lod_level)
    ctx.set_output("H", (batch, c.shape[1]), x.dtype, x.lod_level)


# -- the ops --------------------------------------------------------------------------------------
def _sequences(ctx) -> LoDValue:
    x = ctx.input("Input")
    if x.__class__ is not LoDValue or x.lod_level != 1:
        raise TypeError("Input must be a LoD tensor with one level (fed as a LoDTensor of sequences)")
    return x


def _initial(ctx, slot: str, count: int, size: int, dtype):
    """The initial state in ``slot`` ([num_sequences, D]), zeros when the slot is empty."""
    v = ctx.input(slot)
    if v is None:
        return jnp.zeros((count, size), dtype)
    x = ctx.input("Input")
    if (v.ndim == 2 and v.shape[0] < count and v.shape[1] == size and x.__class__ is LoDValue
            and sequence_count(x.offsets[0]) is not None):
        # padding sequences (FLAGS_bucket_sequences) are empty: their initial state is never read
        v = jnp.concatenate([jnp.asarray(v, dtype), jnp.zeros((count - v.shape[0], size), dtype)])
    if tuple(v.shape) != (count, size):
        raise ValueError(f"{slot} must be [num_sequences, D] = [{count}, {size}] for this Input, got {tuple(v.shape)}")
    return jnp.asarray(v, dtype)


@op("lstm", inputs="Input H0? C0? Weight Bias", outputs="Hidden Cell BatchGate BatchCellPreAct",
    attrs={"use_peepholes": True, "is_reverse": False, "is_test": False, "gate_activation": "sigmoid",
           "cell_activation": "tanh", "candidate_activation": "tanh"},
    infer_shape=_lstm_shape, no_grad_outputs=["Cell", "BatchGate", "BatchCellPreAct"])
def lstm(ctx):
    """An LSTM over every sequence of Input ([T, 4D], already projected: x·W_x), Paddle's ``lstm``.

    Per step: (c̃, i, f, o) = Input row + h_{t-1}·Weight + Bias[:4D]; i, f (and o) may peek at the
    cell through the peepholes of a [1, 7D] Bias; c_t = f·c_{t-1} + i·act_cand(c̃),
    h_t = o·act_cell(c_t). H0/C0 ([num_seqs, D]) start each sequence (zeros when absent);
    ``is_reverse`` runs each sequence from its last row. Hidden and Cell keep Input's LoD.
    """
    x = _sequences(ctx)
    w, b = ctx.input("Weight"), ctx.input("Bias")
    size = w.shape[0]
    bias = b.reshape(-1)
    offsets = x.offsets[-1]
    count = offsets.shape[0] - 1
    peep = (bias[4 * size:5 * size], bias[5 * size:6 * size], bias[6 * size:7 * size]) \
        if ctx.attr("use_peepholes") else ()
    cell = _Cell("lstm", bool(ctx.attr("is_reverse")), ctx.attr("gate_activation"),
                 ctx.attr("cell_activation"), ctx.attr("candidate_activation"))
    init = (_initial(ctx, "H0", count, size, x.dtype), _initial(ctx, "C0", count, size, x.dtype))
    (hidden, c), pre = _run_recurrence(cell, x.data + bias[:4 * size], w, peep, init, offsets)
    # Paddle's intermediates (activated gates, act(c)), per row; only a fetch keeps them.
    gate, cand = _ACTIVATIONS[cell.gate_act], _ACTIVATIONS[cell.cand_act]
    pre, c_const = lax.stop_gradient(pre), lax.stop_gradient(c)
    c_prev = _previous_rows(c_const, lax.stop_gradient(init[1]), offsets, cell.reverse)
    gc, gi, gf, go = jnp.split(pre, 4, axis=1)
    w_ic, w_fc, w_oc = peep if peep else (0, 0, 0)
    gates = jnp.concatenate([cand(gc), gate(gi + c_prev * w_ic), gate(gf + c_prev * w_fc),
                             gate(go + c_const * w_oc)], axis=1)
    return {"Hidden": LoDValue(hidden, x.offsets), "Cell": LoDValue(c, x.offsets),
            "BatchGate": LoDValue(gates, x.offsets),
            "BatchCellPreAct": LoDValue(_ACTIVATIONS[cell.cell_act](c_const), x.offsets)}


def _lstmp_shape(ctx: InferShapeContext) -> None:
    x = _check_sequence_input(ctx, 4)
    w, pw, b = ctx.input("Weight"), ctx.input("ProjWeight"), ctx.input("Bias")
    ctx.check(pw.ndim == 2 and pw.shape[0] >= 0 and pw.shape[1] >= 0, f"ProjWeight must be [D, P], got {pw.shape}")
    size, proj = pw.shape
    ctx.check(w.ndim == 2 and dims_equal(w.shape[0], proj) and dims_equal(w.shape[1], 4 * size),
              f"Weight must be [P, 4D] = [{proj}, {4 * size}] (ProjWeight {pw.shape}), got {w.shape}")
    ctx.check(dims_equal(x.shape[1], 4 * size), f"Input's width must be 4 * {size}, got {x.shape}")
    width = 7 * size if ctx.attr("use_peepholes") else 4 * size
    ctx.check(b.ndim == 2 and dims_equal(b.shape[0], 1) and dims_equal(b.shape[1], width),
              f"Bias must be [1, {width}] with use_peepholes={bool(ctx.attr('use_peepholes'))}, got shape {b.shape}")
    _check_init_state(ctx, "H0", proj)   # Fluid 1.8: the initial projection r_0, [num_seqs, P]
    _check_init_state(ctx, "C0", size)
    for attr in ("gate_activation", "cell_activation", "candidate_activation", "proj_activation"):
        _check_activation(ctx, attr)
    ctx.check(ctx.attr("cell_clip") >= 0 and ctx.attr("proj_clip") >= 0, "cell_clip and proj_clip must be >= 0")
    rows = x.shape[0]
    ctx.set_output("Projection", (rows, proj), x.dtype, 1)
    ctx.set_output("Cell", (rows, size), x.dtype, 1)


# Fluid 1.x's op (Paddle 2.6 has no lstmp kernel); its intermediates (BatchGate, BatchHidden, ...)
# are not produced.
@op("lstmp", inputs="Input H0? C0? Weight ProjWeight Bias", outputs="Projection Cell",
    attrs={"use_peepholes": True, "is_reverse": False, "gate_activation": "sigmoid", "cell_activation": "tanh",
           "candidate_activation": "tanh", "proj_activation": "tanh", "cell_clip": 0.0, "proj_clip": 0.0},
    infer_shape=_lstmp_shape, no_grad_outputs=["Cell"])
def lstmp(ctx):
    """An LSTM with a recurrent projection over every sequence of Input ([T, 4D], already
    projected), Fluid 1.x's ``lstmp``: the ``lstm`` step (same gate columns and peepholes) with
    r_{t-1} [P] in place of h_{t-1}: (c̃, i, f, o) = Input row + r_{t-1}·Weight [P, 4D] + Bias,
    h_t = o·act_cell(c_t) (c_t clipped by ``cell_clip`` > 0), r_t = proj_act(h_t·ProjWeight [D, P])
    (clipped by ``proj_clip`` > 0). H0 [num_seqs, P] is r's initial value, as Fluid 1.8's
    ``dynamic_lstmp`` gives it (its ``h_0`` has the projection size), C0 the cell (zeros when absent). Projection [T, P] and Cell [T, D] keep Input's LoD; as ``lstm``'s,
    only Projection's gradient flows.
    """
    x = _sequences(ctx)
    w, pw, b = ctx.input("Weight"), ctx.input("ProjWeight"), ctx.input("Bias")
    size, _ = pw.shape
    bias = b.reshape(-1)
    offsets = x.offsets[-1]
    count = offsets.shape[0] - 1
    peep = (bias[4 * size:5 * size], bias[5 * size:6 * size], bias[6 * size:7 * size]) \
        if ctx.attr("use_peepholes") else ()
    cell = _Cell("lstmp", bool(ctx.attr("is_reverse")), ctx.attr("gate_activation"), ctx.attr("cell_activation"),
                 ctx.attr("candidate_activation"), proj_act=ctx.attr("proj_activation"),
                 cell_clip=float(ctx.attr("cell_clip")), proj_clip=float(ctx.attr("proj_clip")))
    r0 = _initial(ctx, "H0", count, pw.shape[1], x.dtype)
    init = (r0, _initial(ctx, "C0", count, size, x.dtype))
    (proj, c), _ = _run_recurrence(cell, x.data + bias[:4 * size], w, peep + (pw,), init, offsets)
    return {"Projection": LoDValue(proj, x.offsets), "Cell": LoDValue(c, x.offsets)}


def _gru_weights(w):
    """Paddle's GRU weight as its memory holds it: ([D, 2D] update/reset part, [D, D] candidate)."""
    size = w.shape[0]
    flat = w.reshape(-1)
    return flat[:2 * size * size].reshape(size, 2 * size), flat[2 * size * size:].reshape(size, size)


@op("gru", inputs="Input H0? Weight Bias?", outputs="BatchGate BatchResetHiddenPrev BatchHidden Hidden",
    attrs={"activation": "tanh", "gate_activation": "sigmoid", "is_reverse": False, "origin_mode": False},
    infer_shape=_gru_shape, no_grad_outputs=["BatchGate", "BatchResetHiddenPrev", "BatchHidden"])
def gru(ctx):
    """A GRU over every sequence of Input ([T, 3D], already projected), Paddle's ``gru``.

    Per step: (u, r) = act_gate(Input[:, :2D] + h_{t-1}·W_ur + b_ur);
    c = act(Input[:, 2D:] + (r·h_{t-1})·W_c + b_c); h_t = (1-u)·h_{t-1} + u·c, or
    u·h_{t-1} + (1-u)·c with ``origin_mode``. W_ur and W_c are Weight's memory read as [D, 2D]
    then [D, D] (see the module docstring). H0 ([num_seqs, D]) starts each sequence.
    """
    x = _sequences(ctx)
    w, b = ctx.input("Weight"), ctx.input("Bias")
    size = w.shape[0]
    offsets = x.offsets[-1]
    w_ur, w_c = _gru_weights(w)
    rows = x.data if b is None else x.data + b.reshape(-1)
    cell = _Cell("gru", bool(ctx.attr("is_reverse")), ctx.attr("gate_activation"),
                 cand_act=ctx.attr("activation"), origin_mode=bool(ctx.attr("origin_mode")))
    h0 = _initial(ctx, "H0", offsets.shape[0] - 1, size, x.dtype)
    (hidden,), pre = _run_recurrence(cell, rows, w_ur, (w_c,), (h0,), offsets)
    gate = _ACTIVATIONS[cell.gate_act]
    pre, h_const = lax.stop_gradient(pre), lax.stop_gradient(hidden)
    h_prev = _previous_rows(h_const, lax.stop_gradient(h0), offsets, cell.reverse)
    u, r = jnp.split(gate(pre), 2, axis=1)
    reset_prev = r * h_prev
    cand = _ACTIVATIONS[cell.cand_act](lax.stop_gradient(rows[:, 2 * size:]) + reset_prev @ lax.stop_gradient(w_c))
    return {"Hidden": LoDValue(hidden, x.offsets), "BatchHidden": LoDValue(h_const, x.offsets),
            "BatchResetHiddenPrev": LoDValue(reset_prev, x.offsets),
            "BatchGate": LoDValue(jnp.concatenate([u, r, cand], axis=1), x.offsets)}


@op("gru_unit", inputs="Input HiddenPrev Weight Bias?", outputs="Gate ResetHiddenPrev Hidden",
    attrs={"activation": 2, "gate_activation": 1, "origin_mode": False},
    infer_shape=_gru_unit_shape, no_grad_outputs=["Gate", "ResetHiddenPrev"])
def gru_unit(ctx):
    """One GRU step for a batch, Paddle's ``gru_unit``: Input [N, 3D] (projected x), HiddenPrev
    [N, D]; Gate holds the activated (u, r, c), ResetHiddenPrev r·h_prev, Hidden the new state.
    ``activation`` / ``gate_activation`` are Paddle's ints: 0 identity, 1 sigmoid, 2 tanh, 3 relu.
    """
    x, h_prev, w, b = ctx.input("Input"), ctx.input("HiddenPrev"), ctx.input("Weight"), ctx.input("Bias")
    size = w.shape[0]
    g = x if b is None else x + b.reshape(1, -1)
    w_ur, w_c = _gru_weights(w)
    gate = _ACTIVATIONS[_GRU_UNIT_ACTIVATIONS[ctx.attr("gate_activation")]]
    act = _ACTIVATIONS[_GRU_UNIT_ACTIVATIONS[ctx.attr("activation")]]
    u, r = jnp.split(gate(g[:, :2 * size] + h_prev @ w_ur), 2, axis=1)
    reset_prev = r * h_prev
    c = act(g[:, 2 * size:] + reset_prev @ w_c)
    hidden = c + u * (h_prev - c) if ctx.attr("origin_mode") else u * (c - h_prev) + h_prev
    return {"Gate": jnp.concatenate([u, r, c], axis=1), "ResetHiddenPrev": reset_prev, "Hidden": hidden}


@op("lstm_unit", inputs="X C_prev", outputs="C H", attrs={"forget_bias": 0.0}, infer_shape=_lstm_unit_shape)
def lstm_unit(ctx):
    """One LSTM step for a batch, Fluid 1.x's ``lstm_unit`` (gone from Paddle 2.x's op library):
    X [N, 4D] holds the projected (i, f, o, g); C = σ(f + forget_bias)·C_prev + σ(i)·tanh(g),
    H = σ(o)·tanh(C).
    """
    x, c_prev = ctx.input("X"), ctx.input("C_prev")
    xi, xf, xo, xg = jnp.split(x, 4, axis=1)
    c = jax.nn.sigmoid(xf + jnp.asarray(ctx.attr("forget_bias"), x.dtype)) * c_prev + jax.nn.sigmoid(xi) * jnp.tanh(xg)
    return {"C": c, "H": jax.nn.sigmoid(xo) * jnp.tanh(c)}


lod_aware("lstm", "lstmp", "gru")
plain_row_outputs("gru_unit", "Gate", "ResetHiddenPrev", "Hidden")
plain_row_outputs("gru_unit_grad", "Input@GRAD", "HiddenPrev@GRAD")
plain_row_outputs("lstm_unit", "C", "H")
plain_row_outputs("lstm_unit_grad", "X@GRAD", "C_prev@GRAD")
